"""Hosts on one machine for multi-node tests: a bridge, and per host a network namespace joined to it by a veth pair,
with an address of its own in a private /24 (10.231.X.0/24, X one this machine uses nowhere), a hostname of its own
(a UTS namespace per process started there) and mounts of its own (a mount namespace). The machine itself is the
bridge's .1: a controller in the root namespace serves every host there. Every namespace, link and address is the
test's own, created by `create` and removed by `remove` (also after a failure part of the way); nothing else is
touched and no traffic leaves the bridge and loopback (no route, no forwarding: the hosts reach their /24 alone).
Needs root, iproute2's `ip` and util-linux's `nsenter` and `unshare`.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

SUBNET = "10.231"
"""The first two bytes of every test network's address; the third is free on this machine, chosen at random."""


def available() -> bool:
    """Whether this machine can make the network: root, iproute2 and util-linux's `nsenter` and `unshare`."""
    return os.geteuid() == 0 and all(shutil.which(p) for p in ("ip", "nsenter", "unshare"))


@dataclass(frozen=True)
class Host:
    """One host: its name (its hostname and Slurm node name), its network namespace and its address."""

    name: str
    netns: str
    addr: str


def _ip(*argv: str) -> str:
    return subprocess.run(["ip", *argv], capture_output=True, text=True, check=True, timeout=30).stdout


class Network:
    """A bridge at `gateway` and the `hosts` on it."""

    def __init__(self, names: Sequence[str]) -> None:
        used = _ip("-4", "-o", "addr") + _ip("-4", "route")
        free = [x for x in range(2, 255) if f"{SUBNET}.{x}." not in used]
        x = random.choice(free)
        tag = f"abl{os.urandom(2).hex()}"
        self.bridge, self.gateway = tag, f"{SUBNET}.{x}.1"
        self.hosts = [Host(n, f"{tag}-{n}", f"{SUBNET}.{x}.{11 + i}") for i, n in enumerate(names)]
        self.made: list[list[str]] = []
        """The `ip` commands that undo what was made, last first."""

    def create(self) -> Network:
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            self.made.append(["link", "del", self.bridge])
            _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for i, h in enumerate(self.hosts):
                _ip("netns", "add", h.netns)
                self.made.append(["netns", "del", h.netns])
                _ip("link", "add", f"{self.bridge}h{i}", "type", "veth", "peer", "name", "eth0", "netns", h.netns)
                self.made.append(["link", "del", f"{self.bridge}h{i}"])  # its peer goes with it
                _ip("link", "set", f"{self.bridge}h{i}", "master", self.bridge, "up")
                _ip("-n", h.netns, "addr", "add", f"{h.addr}/24", "dev", "eth0")
                _ip("-n", h.netns, "link", "set", "eth0", "up")
                _ip("-n", h.netns, "link", "set", "lo", "up")
        except BaseException:
            self.remove()
            raise
        return self

    def on(self, host: Host, argv: Sequence[str], first: str = "") -> list[str]:
        """`argv` as run on `host`: in its network namespace, with its hostname, in a mount namespace of its own
        (private: what the shell command `first` mounts there, the host alone sees; the command is exec'd in place of
        `nsenter` and `unshare`, so a process started so has the pid of `argv`'s program). Not `ip netns exec`,
        which mounts a /sys of its own without the cgroup filesystem that slurmd wants."""
        return ["nsenter", f"--net=/run/netns/{host.netns}", "unshare", "--uts", "--mount", "sh", "-c",
                f'hostname "$0" && {first or "true"} && exec "$@"', host.name, *argv]  # fmt: skip

    def pids(self, host: Host) -> list[int]:
        """Every process in `host`'s namespace (all started there by the test, or by what it started)."""
        with contextlib.suppress(subprocess.CalledProcessError):
            return [int(p) for p in _ip("netns", "pids", host.netns).split()]
        return []

    def kill(self, host: Host) -> list[int]:
        """Every process on `host` gone at once (a host lost); their pids. Each is stopped first (SIGSTOP, until no
        new one appears: a stopped process forks no more), then SIGKILLed: one by one, a process still running would
        see another end and say so (a batch job's slurmstepd that outlives its shell reports the job failed, where a
        lost node leaves the job to be requeued), and pids, reused past pid_max, give no parent-first order."""
        stopped: list[int] = []
        while fresh := [pid for pid in self.pids(host) if pid not in stopped]:
            for pid in fresh:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGSTOP)
            stopped += fresh
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return stopped

    def remove(self) -> None:
        """What `create` made, last first, after the processes left on the hosts (a namespace lives on while a
        process is in it)."""
        for h in self.hosts:
            if ["netns", "del", h.netns] in self.made:
                self.kill(h)
        while self.made:
            with contextlib.suppress(subprocess.CalledProcessError):
                _ip(*self.made.pop())
