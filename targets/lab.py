"""Network-namespace labs: namespaces, veth pairs and packet sockets that a run makes and removes.

The data-plane tests, the switchmodel tests, the back-to-back agent networks
(:mod:`experiments.hostnets`) and the benchmarks wire switches and hosts with this module.
Every name is given by the caller and must carry the caller's prefix ("dpb" for the BMv2 data-plane
target, "kp" for the kernel peer, "ag" for the agent networks...); :class:`NetnsLab` removes
exactly what it made, even on failure (use it as a context manager, or call
:meth:`NetnsLab.cleanup` in a ``finally``)::

    with NetnsLab() as lab:
        ns = lab.add_netns("kp1234")
        lab.add_veth("kp1234s1", "kp1234t1", b_netns=ns)   # one end in the root namespace
        port = PacketPort("kp1234t1", ns)                  # an AF_PACKET socket inside ns

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
import struct
import subprocess
import time
from collections.abc import Iterator

CLONE_NEWNET = 0x40000000
ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
SO_RCVBUFFORCE = 33
SO_TIMESTAMPNS = 35
SNAPLEN = 65535

_libc = ctypes.CDLL(None, use_errno=True)


class LabError(RuntimeError):
    """A command that builds the lab failed; the message carries its output."""


def netns_available() -> str | None:
    """Why namespaces cannot be used here (None when they can)."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, veth pairs, AF_PACKET sockets)"
    if shutil.which("ip") is None:
        return "needs iproute2 ('ip' is not on PATH)"
    return None


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on right now (for a switch's gRPC server)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def netns_argv(netns: str | None, argv: list[str]) -> list[str]:
    """``argv`` run inside ``netns`` (unchanged for None)."""
    return ["ip", "netns", "exec", netns, *argv] if netns else list(argv)


def run(*argv: str, netns: str | None = None) -> str:
    """Run a command (inside ``netns`` if given); raise :class:`LabError` on failure."""
    full = netns_argv(netns, list(argv))
    result = subprocess.run(full, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise LabError(
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
    arrived on the interface before the port was ready is drained. ``rcvbuf`` (bytes) enlarges
    the receive buffer beyond the system's limit, for bursts read later.
    """

    def __init__(self, intf: str, netns: str | None = None, rcvbuf: int | None = None) -> None:
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
        if rcvbuf is not None:
            self.sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, rcvbuf)
        self.sock.setblocking(False)
        self.drain()

    def send(self, frame: bytes) -> None:
        """Transmit ``frame`` (a whole Ethernet frame) on the interface."""
        self.sock.send(frame)

    def recv(self, timeout: float) -> bytes | None:
        """The next frame that arrived on the interface (not one sent on it), or None after
        ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self.sock], [], [], remaining)
            if not ready:
                return None
            frame, address = self.sock.recvfrom(SNAPLEN)
            if address[2] != PACKET_OUTGOING:  # our own transmissions are seen too
                return frame

    def recv_all(self, quiet: float) -> list[tuple[float, bytes]]:
        """Every frame until none arrives for ``quiet`` seconds: (kernel arrival time, frame).

        The time is the kernel's receive timestamp (SO_TIMESTAMPNS), so a process that is
        scheduled late does not distort the arrival times.
        """
        self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        frames: list[tuple[float, bytes]] = []
        while True:
            ready, _, _ = select.select([self.sock], [], [], quiet)
            if not ready:
                return frames
            frame, ancillary, _flags, address = self.sock.recvmsg(SNAPLEN, 64)
            if address[2] == PACKET_OUTGOING:
                continue
            stamp = time.time()
            for level, kind, data in ancillary:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                    seconds, nanoseconds = struct.unpack("qq", data[:16])
                    stamp = seconds + nanoseconds / 1e9
            frames.append((stamp, frame))

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
        """Close the socket."""
        self.sock.close()


def _veth_end(intf: str, netns: str | None, mac: str | None) -> list[str]:
    """How ``ip link add`` names one end of a veth pair, its namespace and its MAC."""
    argv = ["name", intf]
    if netns is not None:
        argv += ["netns", netns]
    if mac is not None:
        argv += ["address", mac]
    return argv


class NetnsLab:
    """Namespaces and veth pairs made by one test or run; :meth:`cleanup` removes them all."""

    def __init__(self) -> None:
        self.namespaces: list[str] = []
        self.links: list[tuple[str, str | None]] = []  # (interface, namespace) of one veth end

    def add_netns(self, name: str) -> str:
        """A namespace ``name`` with its loopback up."""
        run("ip", "netns", "add", name)
        self.namespaces.append(name)
        run("ip", "link", "set", "lo", "up", netns=name)
        return name

    def add_veth(
        self,
        a: str,
        b: str,
        *,
        a_netns: str | None = None,
        b_netns: str | None = None,
        macs: tuple[str, str] | None = None,
        mtu: int | None = None,
        configure: bool = True,
    ) -> None:
        """A veth pair ``a`` <-> ``b``, each end made in its namespace (the root namespace for
        None), with ``macs`` (of ``a``, of ``b``) if given; with ``configure`` both ends then get
        :meth:`configure`.

        The ends are created inside their namespaces, so the same names may be used by several
        labs at once. Without ``configure`` the ends stay as the kernel made them (down, IPv6
        on): for a program that sets its interfaces up itself, such as the host agent.
        """
        a_mac, b_mac = macs or (None, None)
        run("ip", "link", "add", *_veth_end(a, a_netns, a_mac), "type", "veth",
            "peer", *_veth_end(b, b_netns, b_mac))  # fmt: skip
        self.links.append((a, a_netns))
        if configure:
            self.configure(a, a_netns, mtu)
            self.configure(b, b_netns, mtu)

    def configure(self, intf: str, netns: str | None = None, mtu: int | None = None) -> None:
        """Silence IPv6 on ``intf``, give it ``mtu`` if given, and set it up.

        IPv6 is disabled so the kernel sends nothing (no DAD, RS or MLD) into the switch under
        test; a test that needs it re-enables it.
        """
        run("sysctl", "-qw", f"net.ipv6.conf.{intf}.disable_ipv6=1", netns=netns)
        if mtu is not None:
            run("ip", "link", "set", intf, "mtu", str(mtu), netns=netns)
        run("ip", "link", "set", intf, "up", netns=netns)

    def mac(self, intf: str, netns: str | None = None) -> str:
        """The MAC address of ``intf``."""
        return run("cat", f"/sys/class/net/{intf}/address", netns=netns).strip()

    def cleanup(self) -> None:
        """Delete every link and namespace this lab made (errors ignored: best effort)."""
        for intf, netns in reversed(self.links):
            argv = netns_argv(netns, ["ip", "link", "del", intf])
            subprocess.run(argv, capture_output=True, check=False)
        for name in reversed(self.namespaces):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
        self.links.clear()
        self.namespaces.clear()

    def __enter__(self) -> NetnsLab:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.cleanup()
