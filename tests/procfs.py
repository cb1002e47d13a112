"""Processes and their listening sockets, read from Linux's /proc (tests only)."""

from __future__ import annotations

import contextlib
import ipaddress
import os
from pathlib import Path

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def descendants(pid: int) -> set[int]:
    """Every process under `pid`, from /proc (parent of each process)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):  # ended while we looked
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
    found, todo = set(), [pid]
    while todo:
        pid = todo.pop()
        children = {p for p, parent in parents.items() if parent == pid}
        found |= children
        todo += children
    return found


def listening(pids: set[int]) -> set[Address]:
    """Addresses on which any of `pids` accepts TCP connections."""
    inodes = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    if (target := os.readlink(fd)).startswith("socket:["):
                        inodes.add(target[8:-1])
    found: set[Address] = set()
    for table, width in (("tcp", 8), ("tcp6", 32)):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            cols = line.split()
            if cols[3] == "0A" and cols[9] in inodes:  # 0A: LISTEN
                raw = bytes.fromhex(cols[1].split(":")[0])
                found.add(ipaddress.ip_address(b"".join(raw[i : i + 4][::-1] for i in range(0, width // 2, 4))))
    return found


def beyond_loopback(addresses: set[Address]) -> list[str]:
    """The addresses that are not loopback (IPv4-mapped IPv6 loopback counts as loopback)."""

    def v4(a: Address) -> Address:
        return a.ipv4_mapped if isinstance(a, ipaddress.IPv6Address) and a.ipv4_mapped else a

    return sorted(str(a) for a in addresses if not v4(a).is_loopback)
