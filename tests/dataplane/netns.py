"""Network namespaces, veth pairs and packet sockets for the data-plane tests.

Every name is given by the caller and must carry the caller's prefix ("dpb" for the BMv2 target,
"kp" for the kernel peer); :class:`NetnsLab` removes exactly what it created, even on failure.
Sockets are opened *inside* a namespace by switching the calling thread into it for the time of
``socket()`` and ``bind()`` (an AF_PACKET socket stays attached to the namespace it was made in).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import shutil
import socket
import subprocess
from collections.abc import Iterator

CLONE_NEWNET = 0x40000000
ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
SNAPLEN = 65535

_libc = ctypes.CDLL(None, use_errno=True)


def netns_available() -> str | None:
    """Why namespaces cannot be used here (None when they can)."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, veth pairs)"
    if shutil.which("ip") is None:
        return "needs iproute2 ('ip' is not on PATH)"
    return None


def run(*argv: str, netns: str | None = None) -> str:
    """Run a command (inside ``netns`` if given); raise with its output on failure."""
    full = ["ip", "netns", "exec", netns, *argv] if netns else list(argv)
    result = subprocess.run(full, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(
            f"command failed ({result.returncode}): {' '.join(full)}\n{result.stderr.strip()}"
        )
    return result.stdout


@contextlib.contextmanager
def inside(netns: str | None) -> Iterator[None]:
    """Run the body with the calling thread in namespace ``netns`` (no-op for None)."""
    if netns is None:
        yield
        return
    with open("/proc/thread-self/ns/net", "rb") as own, open(f"/run/netns/{netns}", "rb") as other:
        if _libc.setns(other.fileno(), CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns into {netns}: {os.strerror(err)}")
        try:
            yield
        finally:
            if _libc.setns(own.fileno(), CLONE_NEWNET) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"setns back from {netns}: {os.strerror(err)}")


class PacketPort:
    """An AF_PACKET socket on one interface: send frames, receive the frames that arrive.

    The socket is opened for protocol 0, so it receives nothing until ``bind()`` names the
    interface together with ETH_P_ALL; a socket opened for ETH_P_ALL would queue every
    interface's frames (loopback gRPC traffic, other tests' veths) in the meantime. Whatever
    arrived on the interface before the port was ready is drained.
    """

    def __init__(self, intf: str, netns: str | None = None) -> None:
        self.intf = intf
        self.netns = netns
        with inside(netns):
            self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
            try:
                self.sock.bind((intf, ETH_P_ALL))
            except OSError as exc:
                self.sock.close()
                where = f" in namespace {netns}" if netns else ""
                raise OSError(
                    exc.errno, f"packet socket on {intf}{where}: {exc.strerror}"
                ) from None
        self.sock.setblocking(False)
        self.drain()

    def send(self, frame: bytes) -> None:
        """Transmit ``frame`` (a whole Ethernet frame) on the interface."""
        self.sock.send(frame)

    def recv(self, timeout: float) -> bytes | None:
        """The next frame that arrived on the interface, or None after ``timeout`` seconds."""
        poller = select.poll()
        poller.register(self.sock, select.POLLIN)
        remaining_ms = int(timeout * 1000)
        while True:
            if not poller.poll(remaining_ms):
                return None
            frame, address = self.sock.recvfrom(SNAPLEN)
            if address[2] != PACKET_OUTGOING:  # our own transmissions are seen too
                return frame
            remaining_ms = min(remaining_ms, 50)  # keep waiting briefly for a real arrival

    def drain(self) -> int:
        """Discard frames already received; return how many."""
        count = 0
        while True:
            try:
                self.sock.recv(SNAPLEN)
            except BlockingIOError:
                return count
            count += 1

    def close(self) -> None:
        self.sock.close()


class NetnsLab:
    """Namespaces and veth pairs made by one test module; :meth:`cleanup` removes them all."""

    def __init__(self) -> None:
        self.namespaces: list[str] = []
        self.links: list[tuple[str, str | None]] = []  # (interface, namespace) of one veth end

    def add_netns(self, name: str) -> str:
        run("ip", "netns", "add", name)
        self.namespaces.append(name)
        run("ip", "link", "set", "lo", "up", netns=name)
        return name

    def add_veth(
        self, a: str, b: str, *, a_netns: str | None = None, b_netns: str | None = None
    ) -> None:
        """A veth pair ``a`` <-> ``b``, each end moved into its namespace, up, IPv6 silenced.

        IPv6 is disabled on the ends so the kernel sends nothing (no DAD, RS or MLD) into the
        switch under test; the kernel peer test re-enables it where it needs it.
        """
        run("ip", "link", "add", a, "type", "veth", "peer", "name", b)
        self.links.append((a, None))
        for intf, netns in ((a, a_netns), (b, b_netns)):
            if netns is not None:
                run("ip", "link", "set", intf, "netns", netns)
                if intf == a:
                    self.links[-1] = (a, netns)
            run("sysctl", "-qw", f"net.ipv6.conf.{intf}.disable_ipv6=1", netns=netns)
            run("ip", "link", "set", intf, "up", netns=netns)

    def mac(self, intf: str, netns: str | None = None) -> str:
        """The MAC address of ``intf``."""
        return run("cat", f"/sys/class/net/{intf}/address", netns=netns).strip()

    def cleanup(self) -> None:
        """Delete every link and namespace this lab made (errors ignored: best effort)."""
        for intf, netns in reversed(self.links):
            full = ["ip", "netns", "exec", netns] if netns else []
            subprocess.run([*full, "ip", "link", "del", intf], capture_output=True, check=False)
        for name in reversed(self.namespaces):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
        self.links.clear()
        self.namespaces.clear()
