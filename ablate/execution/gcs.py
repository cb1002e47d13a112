"""Whether a Ray cluster's GCS answers, asked before `ray.init` joins it (`ablate.execution.fanout.connect`): inside
ray.init a signal waits for Ray's connect timeout, here it is handled within a second."""

from __future__ import annotations

import time


class Unanswered(ConnectionError):
    """A Ray cluster whose GCS accepted the connection but never answered (`answered`)."""


ANSWER_WAIT = 40.0
"""Seconds a launch waits for a cluster's GCS to answer before it gives up: what ray.init waits at its defaults."""


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
    try:
        ready, end = grpc.channel_ready_future(channel), time.monotonic() + wait
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
    finally:
        channel.close()
