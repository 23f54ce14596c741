"""The agent's NIC sockets: one ``AF_PACKET`` socket per plane, non-blocking, batched.

:class:`PlaneSocket` owns one plane NIC's socket:

- bound to the interface for ``ETH_P_IPV6`` only: protocol-specific packet sockets never see
  the frames this host sends (no ``PACKET_OUTGOING`` copies to filter), and
  ``PACKET_IGNORE_OUTGOING`` is set as well where the kernel has it;
- :meth:`PlaneSocket.receive_batch` takes frames from a memory-mapped ``PACKET_RX_RING``
  (:class:`targets.rxring.RxRing`: no system call per frame) or, without a ring, with ``recv_into`` into one
  reusable buffer, until the socket is empty (or a batch limit, so timers and other planes get
  their turn), and keeps only frames that :func:`is_mrc_frame` accepts (IPv6, then UDP to port
  4791 or a routing header); the rest is counted as ``ignored`` and dropped -- a filter in
  Python, no BPF program;
- :meth:`PlaneSocket.send` writes one frame; when the socket buffer is full the frame waits in a
  per-plane backlog (bounded) and the agent selects the socket for writing until it drains.

Large socket buffers (``SO_RCVBUFFORCE``/``SO_SNDBUFFORCE`` as root) absorb bursts of a window
of packets; the kernel's count of frames dropped on a full receive buffer
(``PACKET_STATISTICS``) is reported as ``kernel_drops``. The qdisc is *not* bypassed: a fabric link's delay line (netem) sits there.
"""

from __future__ import annotations

import contextlib
import errno
import socket
import struct
from collections import deque

from p4src.contract import ETHERTYPE_IPV6, IP_PROTO_ROUTING, IP_PROTO_UDP, ROCEV2_UDP_PORT
from targets.rxring import RELEASE, TP2_LEN_MAC, TP_STATUS_USER, RxRing

ETH_P_IPV6 = ETHERTYPE_IPV6
SOL_PACKET = 263
PACKET_IGNORE_OUTGOING = 23
SO_RCVBUFFORCE = 33
SO_SNDBUFFORCE = 32
PACKET_STATISTICS = 6
RECV_SOCKET_BUFFER = 32 << 20  # a window of ~2000 full-size frames (skb truesize ~2x the frame)
SEND_SOCKET_BUFFER = 8 << 20
RECV_BUFFER = 16384  # larger than any frame of a fabric (link_mtu <= 9500)
BATCH = 128  # frames read per readiness event before the loop looks at timers and sends
MAX_BACKLOG = 16384  # frames waiting for socket space on one plane (then the oldest are dropped)

RING_BYTES = 16 << 20  # receive ring per plane

_IPV6_TYPE = ETHERTYPE_IPV6.to_bytes(2, "big")
_ROCE_PORT = ROCEV2_UDP_PORT.to_bytes(2, "big")
_UDP = IP_PROTO_UDP
_ROUTING = IP_PROTO_ROUTING


def is_mrc_frame(frame: bytes) -> bool:
    """Cheap pre-filter: an IPv6 frame to UDP 4791, or with a routing header (SRH) first."""
    if frame[12:14] != _IPV6_TYPE or len(frame) < 58:
        return False
    next_header = frame[20]
    if next_header == _UDP:
        return frame[56:58] == _ROCE_PORT
    return next_header == _ROUTING


class PlaneSocket:
    """The raw socket of one plane NIC and its counters."""

    def __init__(self, plane: int, intf: str, *, ring: bool = True, max_frame: int = 9600) -> None:
        self.plane = plane
        self.intf = intf
        # Protocol 0 receives nothing until bind(): no frame of another interface slips in.
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        self.ring: RxRing | None = None
        if ring:
            try:
                self.ring = RxRing(self.sock, max_frame, RING_BYTES)
            except OSError:
                self.ring = None  # no ring (old kernel, locked memory limit): plain reads
        try:
            self.sock.bind((intf, ETH_P_IPV6))
        except OSError as exc:
            self.close()
            raise OSError(exc.errno, f"cannot bind to interface '{intf}': {exc.strerror}") from None
        with contextlib.suppress(OSError):
            self.sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
        for force, plain, size in (
            (SO_RCVBUFFORCE, socket.SO_RCVBUF, RECV_SOCKET_BUFFER),
            (SO_SNDBUFFORCE, socket.SO_SNDBUF, SEND_SOCKET_BUFFER),
        ):
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, force, size)
            except OSError:
                with contextlib.suppress(OSError):
                    self.sock.setsockopt(socket.SOL_SOCKET, plain, size)
        self.sock.setblocking(False)
        self._buffer = bytearray(RECV_BUFFER)
        self._view = memoryview(self._buffer)
        self.backlog: deque[bytes | bytearray] = deque()
        self.rx_packets = 0
        self.rx_bytes = 0
        self.tx_packets = 0
        self.tx_bytes = 0
        self.ignored = 0  # frames that are not MRC (kernel noise, other protocols)
        self.misaddressed = 0  # MRC frames for another address (counted by the agent)
        self.tx_errors = 0
        self.backlog_drops = 0
        self.backlog_peak = 0
        self.kernel_drops = 0  # frames the kernel dropped because the socket buffer was full
        self.truncated = 0  # frames larger than a receive ring slot
        self.link_errors = 0  # socket errors reported by the kernel (link down)

    def fileno(self) -> int:
        """The socket's file descriptor."""
        return self.sock.fileno()

    def has_frames(self) -> bool:
        """True when a frame may be waiting (always, without a ring: recv will tell)."""
        ring = self.ring
        return ring is None or bool(ring.mem[ring.slot * ring.frame_size] & TP_STATUS_USER)

    def take_error(self) -> int:
        """Take (and so clear) the socket's pending error, e.g. ENETDOWN; 0 when none."""
        try:
            error = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        except OSError:
            return 0
        if error:
            self.link_errors += 1
        return error

    def receive_batch(self, limit: int = BATCH) -> tuple[list[bytes], bool]:
        """Up to ``limit`` MRC frames; the flag is True when the socket may hold more."""
        if self.ring is not None:
            return self._receive_ring(self.ring, limit)
        frames: list[bytes] = []
        recv_into = self.sock.recv_into
        view = self._view
        size = len(self._buffer)
        for _ in range(limit):
            try:
                n = recv_into(self._buffer, size)
            except (BlockingIOError, InterruptedError):
                self.rx_packets += len(frames)
                return frames, False
            except OSError as exc:
                if exc.errno in (errno.ENETDOWN, errno.ENXIO, errno.ENODEV):
                    self.link_errors += 1
                    self.rx_packets += len(frames)
                    return frames, False
                raise
            frame = bytes(view[:n])
            if is_mrc_frame(frame):
                frames.append(frame)
                self.rx_bytes += n
            else:
                self.ignored += 1
        self.rx_packets += len(frames)
        return frames, True

    def _receive_ring(self, ring: RxRing, limit: int) -> tuple[list[bytes], bool]:
        """:meth:`receive_batch` from the memory-mapped ring: no system call per frame."""
        frames: list[bytes] = []
        mem = ring.mem
        slot = ring.slot
        count = ring.count
        size = ring.frame_size
        unpack = TP2_LEN_MAC.unpack_from
        more = True
        for _ in range(limit):
            off = slot * size
            if not mem[off] & TP_STATUS_USER:
                more = False
                break
            length, snaplen, mac = unpack(mem, off + 4)
            start = off + mac
            frame = mem[start : start + snaplen]
            mem[off : off + 4] = RELEASE  # the slot goes back to the kernel
            slot = slot + 1 if slot + 1 < count else 0
            if snaplen < length:
                self.truncated += 1  # larger than a ring slot: cannot be an MRC frame of ours
            elif is_mrc_frame(frame):
                frames.append(frame)
                self.rx_bytes += snaplen
            else:
                self.ignored += 1
        ring.slot = slot
        self.rx_packets += len(frames)
        return frames, more

    def send(self, frame: bytes | bytearray) -> bool:
        """Send (or queue) one frame; False when it had to wait in the backlog."""
        if self.backlog:
            self._queue(frame)
            return False
        try:
            self.sock.send(frame)
        except (BlockingIOError, InterruptedError):
            self._queue(frame)
            return False
        except OSError as exc:
            if exc.errno == errno.ENOBUFS:
                self._queue(frame)
                return False
            self.tx_errors += 1  # link down, message too long: the core retransmits
            return True
        self.tx_packets += 1
        self.tx_bytes += len(frame)
        return True

    def _queue(self, frame: bytes | bytearray) -> None:
        if len(self.backlog) >= MAX_BACKLOG:
            self.backlog.popleft()
            self.backlog_drops += 1
        self.backlog.append(frame)
        self.backlog_peak = max(self.backlog_peak, len(self.backlog))

    def drain(self) -> bool:
        """Send from the backlog until it is empty (True) or the socket is full (False)."""
        backlog = self.backlog
        send = self.sock.send
        while backlog:
            frame = backlog[0]
            try:
                send(frame)
            except (BlockingIOError, InterruptedError):
                return False
            except OSError as exc:
                if exc.errno == errno.ENOBUFS:
                    return False
                self.tx_errors += 1
            else:
                self.tx_packets += 1
                self.tx_bytes += len(frame)
            backlog.popleft()
        return True

    def _kernel_stats(self) -> None:
        """Add the kernel's socket drop count (PACKET_STATISTICS resets on every read)."""
        try:
            raw = self.sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8)
        except OSError:
            return
        _, drops = struct.unpack("II", raw)
        self.kernel_drops += drops

    def counters(self) -> dict[str, int]:
        """Per-plane packet counters (JSON-ready)."""
        self._kernel_stats()
        return {
            "rx_packets": self.rx_packets,
            "rx_bytes": self.rx_bytes,
            "tx_packets": self.tx_packets,
            "tx_bytes": self.tx_bytes,
            "ignored": self.ignored,
            "misaddressed": self.misaddressed,
            "tx_errors": self.tx_errors,
            "backlog": len(self.backlog),
            "backlog_peak": self.backlog_peak,
            "backlog_drops": self.backlog_drops,
            "kernel_drops": self.kernel_drops,
            "truncated": self.truncated,
            "link_errors": self.link_errors,
        }

    def close(self) -> None:
        """Unmap the ring, close the socket."""
        if self.ring is not None:
            self.ring.close()
            self.ring = None
        self.sock.close()


__all__ = ["BATCH", "ETH_P_IPV6", "PlaneSocket", "is_mrc_frame"]
