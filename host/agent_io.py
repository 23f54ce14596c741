"""The agent's NIC sockets: one ``AF_PACKET`` socket per plane, non-blocking, batched.

:class:`PlaneSocket` owns one plane NIC's socket:

- bound to the interface for ``ETH_P_IPV6`` only: protocol-specific packet sockets never see
  the frames this host sends (no ``PACKET_OUTGOING`` copies to filter), and
  ``PACKET_IGNORE_OUTGOING`` is set as well where the kernel has it;
- :meth:`PlaneSocket.receive_batch` reads with ``recv_into`` into one reusable buffer until
  ``EAGAIN`` (or a batch limit, so timers and other planes get their turn) and keeps only
  frames that :func:`is_mrc_frame` accepts (IPv6, then UDP to port 4791 or a routing header);
  the rest is counted as ``ignored`` and dropped -- a filter in Python, no BPF program;
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

ETH_P_IPV6 = 0x86DD
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

_IPV6_TYPE = b"\x86\xdd"
_ROCE_PORT = b"\x12\xb7"  # 4791
_UDP = 17
_ROUTING = 43


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

    def __init__(self, plane: int, intf: str) -> None:
        self.plane = plane
        self.intf = intf
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_IPV6))
        try:
            self.sock.bind((intf, ETH_P_IPV6))
        except OSError as exc:
            self.sock.close()
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

    def fileno(self) -> int:
        """The socket's file descriptor."""
        return self.sock.fileno()

    def receive_batch(self, limit: int = BATCH) -> tuple[list[bytes], bool]:
        """Up to ``limit`` MRC frames; the flag is True when the socket may hold more."""
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
                    self.rx_packets += len(frames)
                    return frames, False
                raise
            frame = bytes(view[:n])
            if (
                frame[12:14] == _IPV6_TYPE
                and n >= 58
                and ((frame[20] == _UDP and frame[56:58] == _ROCE_PORT) or frame[20] == _ROUTING)
            ):
                frames.append(frame)
                self.rx_bytes += n
            else:
                self.ignored += 1
        self.rx_packets += len(frames)
        return frames, True

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
        }

    def close(self) -> None:
        """Close the socket."""
        self.sock.close()


__all__ = ["BATCH", "ETH_P_IPV6", "PlaneSocket", "is_mrc_frame"]
