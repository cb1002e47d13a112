"""Whether a Ray cluster's GCS answers, asked before `ray.init` joins it (`ablate.execution.fanout.connect`): inside
ray.init a signal waits for Ray's connect timeout, here it is handled within a second."""

from __future__ import annotations

import time


class Unanswered(ConnectionError):
    """A Ray cluster whose GCS accepted the connection but never answered (`answered`)."""


ANSWER_WAIT = 40.0
"""Seconds a launch waits for a cluster's GCS to answer before it gives up: what ray.init waits at its defaults."""


SETTLE = 0.5
"""Seconds a cancelled wait gives grpc's connectivity thread, which looks every 0.2 s, to stop before the channel
closes."""


def answered(address: str, wait: float = ANSWER_WAIT) -> None:
    """Wait until the GCS at `address` (host:port; other forms are left to Ray) completes a gRPC handshake, looking
    every second, so that a SIGTERM or Ctrl-C meanwhile stops the launch at once: inside ray.init a signal waits for
    its connect timeout (about 40 s at Ray's defaults). `Unanswered` when it never does."""
    import grpc
    from ray._private.gcs_utils import create_gcs_channel

    _, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "://" in address:
        return
    channel = create_gcs_channel(address)
    ready = grpc.channel_ready_future(channel)
    try:
        end = time.monotonic() + wait
        while True:
            try:
                ready.result(timeout=max(0.0, min(1.0, end - time.monotonic())))
                return
            except grpc.FutureTimeoutError:
                if time.monotonic() >= end:
                    raise Unanswered(
                        f"cannot connect to the Ray cluster at {address}: it accepted the connection but "
                        f"did not answer in {wait:.0f} s (is it a Ray head's GCS port?)"
                    ) from None
    except BaseException:
        # A signal (or no answer) leaves grpc's thread watching the channel's state; closed under it, that thread
        # prints "Cannot monitor channel state: Channel closed!" with a traceback below the launch's one line.
        # Cancelled, it stops at its next look (every 0.2 s).
        ready.cancel()
        time.sleep(SETTLE)
        raise
    finally:
        channel.close()
