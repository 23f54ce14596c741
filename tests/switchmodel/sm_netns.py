"""Veth pairs and a namespace for the switchmodel tests (names start with "sm").

The switch side of every pair stays in the root namespace (so mrc-switch serves gRPC on the
root namespace's loopback); the other side goes into one namespace where the test sends and
receives with AF_PACKET sockets, opened inside it by switching the calling thread there.
:meth:`VethLab.cleanup` removes exactly what the lab made.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import shutil
import socket
import struct
import subprocess
import time
from collections.abc import Iterator

CLONE_NEWNET = 0x40000000
ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
SO_RCVBUFFORCE = 33
SO_TIMESTAMPNS = 35

_libc = ctypes.CDLL(None, use_errno=True)


def netns_unavailable() -> str | None:
    """Why veths and namespaces cannot be made here (None when they can)."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, veth pairs, raw sockets)"
    if shutil.which("ip") is None:
        return "needs iproute2 ('ip' is not on PATH)"
    return None


def sh(*argv: str) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {result.stderr.strip()}")


@contextlib.contextmanager
def inside(netns: str) -> Iterator[None]:
    """The calling thread in namespace ``netns`` for the body."""
    with open("/proc/thread-self/ns/net", "rb") as own, open(f"/run/netns/{netns}", "rb") as ns:
        if _libc.setns(ns.fileno(), CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {netns}")
        try:
            yield
        finally:
            _libc.setns(own.fileno(), CLONE_NEWNET)


class HostPort:
    """An AF_PACKET socket on the namespace side of a veth pair."""

    def __init__(self, intf: str, netns: str) -> None:
        with inside(netns):
            # protocol 0 until bind(): no frame of another interface gets in meanwhile
            self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
            self.sock.bind((intf, ETH_P_ALL))
        self.sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 16 << 20)
        self.sock.setblocking(False)

    def send(self, frame: bytes) -> None:
        self.sock.send(frame)

    def recv(self, timeout: float) -> bytes | None:
        """The next frame that arrived (not one we sent), or None after ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            ready, _, _ = select.select([self.sock], [], [], max(0.0, remaining))
            if not ready:
                return None
            frame, address = self.sock.recvfrom(65535)
            if address[2] != PACKET_OUTGOING:
                return frame

    def recv_all(self, quiet: float) -> list[tuple[float, bytes]]:
        """Every frame until none arrives for ``quiet`` seconds: (kernel arrival time, frame).

        The time is the kernel's receive timestamp (SO_TIMESTAMPNS), so a test process that is
        scheduled late does not distort the arrival times.
        """
        self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        frames = []
        while True:
            ready, _, _ = select.select([self.sock], [], [], quiet)
            if not ready:
                return frames
            frame, ancillary, _flags, address = self.sock.recvmsg(65535, 64)
            if address[2] == PACKET_OUTGOING:
                continue
            stamp = time.time()
            for level, kind, data in ancillary:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                    seconds, nanoseconds = struct.unpack("qq", data[:16])
                    stamp = seconds + nanoseconds / 1e9
            frames.append((stamp, frame))

    def close(self) -> None:
        self.sock.close()


class VethLab:
    """One namespace and the veth pairs of one test."""

    def __init__(self, tag: str) -> None:
        self.netns = f"sm{tag}{os.getpid() % 10000}"
        self.links: list[str] = []
        sh("ip", "netns", "add", self.netns)

    def pair(self, name: str) -> tuple[str, str]:
        """A veth pair: (switch side in the root namespace, host side in the namespace)."""
        switch_side, host_side = f"{self.netns}{name}s", f"{self.netns}{name}h"
        sh("ip", "link", "add", switch_side, "type", "veth", "peer", "name", host_side)
        self.links.append(switch_side)
        sh("ip", "link", "set", host_side, "netns", self.netns)
        sh("sysctl", "-qw", f"net.ipv6.conf.{switch_side}.disable_ipv6=1")
        sh("ip", "link", "set", switch_side, "up")
        for command in (
            ("sysctl", "-qw", f"net.ipv6.conf.{host_side}.disable_ipv6=1"),
            ("ip", "link", "set", host_side, "up"),
        ):
            sh("ip", "netns", "exec", self.netns, *command)
        return switch_side, host_side

    def cleanup(self) -> None:
        for link in self.links:
            subprocess.run(["ip", "link", "del", link], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "del", self.netns], capture_output=True, check=False)
