"""The switch's data path: raw sockets and an event loop around the pure pipeline and queues.

:class:`DataPlane` owns one AF_PACKET socket per port (all protocols, promiscuous, its own
transmissions ignored) and runs one thread with an ``epoll`` loop (:func:`select.epoll` itself:
the loop wakes up for nearly every frame of a paced fabric, and the :mod:`selectors` layer
cost about as much Python per wake-up as the frame's pipeline):

- a readable port is emptied (at most :data:`RX_BATCH` frames at a time) from its receive ring
  (:class:`~targets.rxring.RxRing`: no system call per frame, and no read that ends in
  ``EAGAIN`` per wake-up), or, where the kernel has no ring or cannot ignore the socket's own
  transmissions, read until ``EAGAIN`` into one preallocated buffer; each frame goes through
  :func:`switchmodel.pipeline.ingress` and, when forwarded, into the
  :class:`~switchmodel.queues.PortQueue` of its egress port;
- the select timeout is the earliest time a shaped queue may send again, so an idle switch
  sleeps in the kernel (no polling) and a busy one wakes when its token buckets allow;
- a packet leaving a queue goes through :func:`switchmodel.pipeline.egress` (``port_qdepth``
  and ``port_out``) and is sent on the egress port's socket;
- a port with a latency (:attr:`PortConfig.latency_s`, the fabric's per-hop latency where the
  kernel has no ``netem``) puts what leaves its queue in a :class:`~targets.delayline.DelayLine`
  and sends it from there when its time comes: a frame leaves no earlier than the latency after
  it left the queue, plus its serialisation at the port's rate on each link the line stands
  for (:attr:`PortConfig.links`: a frame goes on the veth whole, a real link delivers its last
  bit one serialisation later); the select timeout includes the next frame's time.

The :class:`~switchmodel.tables.PipelineState` is shared with the P4Runtime server: both hold
:attr:`DataPlane.lock` while they touch it (the data path for one batch at a time). Until a
pipeline is set (:attr:`DataPlane.state` is None) every frame is dropped and nothing is counted,
as BMv2 does without a P4 program.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import select
import socket
import struct
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from p4src.contract import DropReason
from switchmodel.pipeline import Forward, count_drop, egress, ingress
from switchmodel.queues import PortQueue
from switchmodel.tables import PipelineState
from targets.delayline import DelayLine
from targets.pcap import PcapWriter
from targets.rxring import RELEASE, TP2_LEN_MAC, TP_STATUS_USER, RxRing

log = logging.getLogger("switchmodel.dataplane")

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_ADD_MEMBERSHIP = 1
PACKET_MR_PROMISC = 1
PACKET_IGNORE_OUTGOING = 23
PACKET_OUTGOING = 4
SIOCGIFMTU = 0x8921
SO_SNDBUFFORCE = 32
SO_RCVBUFFORCE = 33
ETH_HEADER = 14

TX_TRACE = "tx port %d priority %d bytes %d enq_qdepth %d"
RX_BATCH = 256  # frames read from one socket before looking at the others
RX_BUFFER = 1 << 16
SOCKET_BUFFER = 4 << 20
PCAP_FLUSH_INTERVAL = 1.0

QueuedPacket = tuple[bytearray, int, int, int]  # frame, ingress length, priority, enq_qdepth


class DataPlaneError(RuntimeError):
    """An interface that cannot be opened (named in the message)."""


@dataclass
class PortConfig:
    """One switch port: its number, interface and traffic manager settings."""

    number: int
    intf: str
    rate_bps: float = 0.0  # 0: not shaped
    mtu: int | None = None  # None: the interface's MTU
    latency_s: float = 0.0  # the link's latency, applied before the wire (0: none)
    links: int = 1  # links the delay line stands for: a frame waits its serialisation on each

    def delay_line(self) -> DelayLine[bytearray] | None:
        """The port's delay line (None without a latency): the latency, and each frame's
        serialisation at the port's rate on each of its links (targets.delayline)."""
        if self.latency_s <= 0:
            return None
        per_byte = self.links * 8 / self.rate_bps if self.rate_bps else 0.0
        return DelayLine(self.latency_s, per_byte)


@dataclass
class _Port:
    number: int
    intf: str
    sock: socket.socket
    queue: PortQueue[QueuedPacket]
    max_frame: int
    filter_outgoing: bool
    pcap_in: PcapWriter | None = None
    pcap_out: PcapWriter | None = None
    blocked: bool = False
    delay: DelayLine[bytearray] | None = None  # frames that left the queue, not yet on the wire
    ring: RxRing | None = None  # the socket's receive ring (None: read with recv)
    rx_frames: int = 0
    tx_frames: int = 0
    tx_errors: int = 0


def interface_mtu(intf: str) -> int:
    """The MTU of interface ``intf`` (DataPlaneError when it does not exist)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        request = struct.pack("16si", intf.encode(), 0)
        try:
            reply = fcntl.ioctl(probe.fileno(), SIOCGIFMTU, request)
        except OSError as exc:
            if exc.errno == errno.ENODEV:
                raise DataPlaneError(f"interface '{intf}' does not exist") from None
            raise DataPlaneError(f"interface '{intf}': {os.strerror(exc.errno or 0)}") from None
    return int(struct.unpack("16si", reply)[1])


def open_port_socket(intf: str, max_frame: int = 0) -> tuple[socket.socket, bool, RxRing | None]:
    """A non-blocking, promiscuous AF_PACKET socket bound to ``intf``.

    Returns the socket, whether the caller must filter out its own transmissions (kernels
    without PACKET_IGNORE_OUTGOING) and, when ``max_frame`` is given and the kernel ignores the
    socket's own transmissions, a receive ring (:class:`~targets.rxring.RxRing`, None where the
    kernel refuses one: then the socket is read with ``recv``).
    """
    try:
        ifindex = socket.if_nametoindex(intf)
    except OSError:
        raise DataPlaneError(f"interface '{intf}' does not exist") from None
    try:
        # Protocol 0: the socket receives nothing until bind() names the interface and the
        # protocol (a socket opened for ETH_P_ALL would see every interface's frames until then).
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    except PermissionError:
        raise DataPlaneError(f"interface '{intf}': raw sockets need root (CAP_NET_RAW)") from None
    filter_outgoing = False
    try:
        sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
    except OSError:
        filter_outgoing = True
    ring: RxRing | None = None
    if max_frame and not filter_outgoing:
        try:  # before bind(): no frame waits in the socket's own queue beside the ring
            ring = RxRing(sock, max_frame, SOCKET_BUFFER)
        except OSError:
            ring = None
    try:
        sock.bind((intf, ETH_P_ALL))
        mreq = struct.pack("iHH8s", ifindex, PACKET_MR_PROMISC, 0, b"")
        sock.setsockopt(SOL_PACKET, PACKET_ADD_MEMBERSHIP, mreq)
        for force, plain in (
            (SO_RCVBUFFORCE, socket.SO_RCVBUF),
            (SO_SNDBUFFORCE, socket.SO_SNDBUF),
        ):
            try:  # as root, beyond net.core.rmem_max / wmem_max
                sock.setsockopt(socket.SOL_SOCKET, force, SOCKET_BUFFER)
            except PermissionError:
                sock.setsockopt(socket.SOL_SOCKET, plain, SOCKET_BUFFER)
    except OSError as exc:
        if ring is not None:
            ring.close()
        sock.close()
        raise DataPlaneError(f"interface '{intf}': {exc.strerror}") from None
    sock.setblocking(False)
    return sock, filter_outgoing, ring


class DataPlane:
    """Sockets, queues and the event loop of one switch."""

    def __init__(
        self,
        ports: Mapping[int, PortConfig],
        priorities: int = 2,
        queue_depth: int = 64,
        pcap_dir: Path | None = None,
        profile: Path | None = None,
        rx_ring: bool = True,
        control_queue_depth: int | None = None,
    ) -> None:
        self.priorities = priorities
        self.queue_depth = queue_depth
        self.control_queue_depth = control_queue_depth
        self.lock = threading.Lock()
        self.state: PipelineState | None = None
        self._configs = dict(ports)
        self._pcap_dir = pcap_dir
        self._ports: dict[int, _Port] = {}
        self._epoll = select.epoll()
        self._by_fd: dict[int, _Port | None] = {}  # registered descriptors (None: the waker)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._stopping = False
        self._opened = False
        self._thread: threading.Thread | None = None
        self._buffer = bytearray(RX_BUFFER)
        self._profile = profile
        self._rx_ring = rx_ring  # read the ports through receive rings where the kernel has them
        self._trace = False  # log every transmitted frame (at debug level)
        self.unknown_port_drops = 0
        #: service lag: how much later than its shaped time the loop served a queue that was
        #: due (the largest since start, since the last service_figures(), their sum, count)
        self.service_lag_max = 0.0
        self.service_lag_window = 0.0
        self.service_lag_total = 0.0
        self.service_late = 0

    # -- life cycle --------------------------------------------------------------------------

    def open(self) -> None:
        """Open every port's socket (DataPlaneError naming the first interface that fails)."""
        now = time.monotonic()
        try:
            for number, config in sorted(self._configs.items()):
                mtu = config.mtu if config.mtu is not None else interface_mtu(config.intf)
                sock, filter_outgoing, ring = open_port_socket(
                    config.intf, mtu + ETH_HEADER if self._rx_ring else 0
                )
                port = _Port(
                    number=number,
                    intf=config.intf,
                    sock=sock,
                    queue=PortQueue(
                        self.priorities,
                        self.queue_depth,
                        config.rate_bps,
                        now=now,
                        control_depth=self.control_queue_depth,
                    ),
                    max_frame=mtu + ETH_HEADER,
                    filter_outgoing=filter_outgoing,
                    delay=config.delay_line(),
                    ring=ring,
                )
                if self._pcap_dir is not None:
                    self._pcap_dir.mkdir(parents=True, exist_ok=True)
                    port.pcap_in = PcapWriter(self._pcap_dir / f"{config.intf}_in.pcap")
                    port.pcap_out = PcapWriter(self._pcap_dir / f"{config.intf}_out.pcap")
                self._ports[number] = port
                self._by_fd[sock.fileno()] = port
                self._epoll.register(sock.fileno(), select.EPOLLIN)
        except DataPlaneError:
            self.close()
            raise
        self._by_fd[self._wake_r.fileno()] = None
        self._epoll.register(self._wake_r.fileno(), select.EPOLLIN)
        self._opened = True

    def start(self) -> None:
        """Open the ports (if not yet) and run the event loop in its own thread.

        At debug log level every transmitted frame is logged (:data:`TX_TRACE`): its port,
        priority class, length and the queue depth it saw.
        """
        if not self._opened:
            self.open()
        self._trace = log.isEnabledFor(logging.DEBUG)
        self._thread = threading.Thread(target=self._run_thread, name="dataplane", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the event loop and close the sockets."""
        self._stopping = True
        self.wake()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        self.close()

    def _run_thread(self) -> None:
        if self._profile is None:
            self.run()
            return
        import cProfile

        profiler = cProfile.Profile()
        try:
            profiler.runcall(self.run)
        finally:
            profiler.dump_stats(str(self._profile))

    def wake(self) -> None:
        """Make the event loop look at its queues again (from another thread)."""
        with contextlib.suppress(BlockingIOError, OSError):
            self._wake_w.send(b"\0")

    def close(self) -> None:
        """Close sockets and pcap files."""
        for port in self._ports.values():
            fd = port.sock.fileno()
            if self._by_fd.pop(fd, None) is not None:
                with contextlib.suppress(OSError, ValueError):
                    self._epoll.unregister(fd)
            if port.ring is not None:
                port.ring.close()
            port.sock.close()
            for writer in (port.pcap_in, port.pcap_out):
                if writer is not None:
                    writer.close()
        self._ports.clear()

    @property
    def ports(self) -> dict[int, str]:
        """Port number -> interface name."""
        return {number: config.intf for number, config in self._configs.items()}

    def port_stats(self) -> dict[int, dict[str, int]]:
        """Frames received, sent, send errors and queued packets per port."""
        return {
            number: {
                "rx": port.rx_frames,
                "tx": port.tx_frames,
                "tx_errors": port.tx_errors,
                "queued": port.queue.length,
            }
            for number, port in self._ports.items()
        }

    # -- the event loop ----------------------------------------------------------------------

    def run(self) -> None:
        """The event loop (returns after :meth:`stop`)."""
        monotonic = time.monotonic
        poll = self._epoll.poll
        by_fd = self._by_fd
        readable = ~select.EPOLLOUT  # in, error, hang-up: read (and see the error there)
        writable = ~select.EPOLLIN  # out, error, hang-up: try sending again
        next_flush = monotonic() + PCAP_FLUSH_INTERVAL if self._pcap_dir is not None else None
        timeout: float | None = None
        due: float | None = None  # when a shaped queue may next send
        while not self._stopping:
            events = poll(-1.0 if timeout is None else timeout)
            if due is not None and events:
                now = monotonic()
                if now >= due:
                    # a queue was due to send before the frames that woke the loop arrived:
                    # serve it first, so that they see the depth they found on the wire (a
                    # frame that started serialising is no longer queued), as the sim orders
                    # its events by time
                    self._served_late(now - due)
                    self._transmit(now)
                    due = None
            for fd, mask in events:
                port = by_fd.get(fd)
                if port is None:
                    self._drain_wake()
                    continue
                if mask & writable and port.blocked:
                    port.blocked = False
                    self._epoll.modify(fd, select.EPOLLIN)
                if mask & readable:
                    if mask & select.EPOLLERR and port.ring is not None:
                        self._take_error(port)  # what a recv would have raised and cleared
                    self._receive(port)
            now = monotonic()
            if due is not None and now > due:
                self._served_late(now - due)
            timeout = self._transmit(now)
            due = None if timeout is None else now + timeout
            if next_flush is not None:
                if now >= next_flush:
                    self._flush_pcaps()
                    next_flush = now + PCAP_FLUSH_INTERVAL
                wait = next_flush - now
                timeout = wait if timeout is None or wait < timeout else timeout

    def _served_late(self, lag: float) -> None:
        self.service_lag_total += lag
        self.service_late += 1
        if lag > self.service_lag_window:
            self.service_lag_window = lag
            self.service_lag_max = max(self.service_lag_max, lag)

    def service_figures(self) -> dict[str, float]:
        """Service lag (seconds a due queue was served late): the largest since the previous
        call, the largest since start, the sum and the count of late services."""
        window, self.service_lag_window = self.service_lag_window, 0.0
        return {
            "service_lag_max_s": window,
            "service_lag_max_ever_s": self.service_lag_max,
            "service_lag_total_s": self.service_lag_total,
            "service_late": self.service_late,
        }

    def _take_error(self, port: _Port) -> None:
        with contextlib.suppress(OSError):
            error = port.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if error:
                log.debug("port %d (%s): %s", port.number, port.intf, os.strerror(error))

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, OSError):
            pass

    def _receive(self, port: _Port) -> None:
        buf = self._buffer
        view = memoryview(buf)
        sock = port.sock
        ports = self._ports
        number = port.number
        max_frame = port.max_frame
        pcap = port.pcap_in
        received = 0
        ring = port.ring
        if ring is not None:
            mem = ring.mem
            slot = ring.slot
            slots = ring.count
            slot_size = ring.frame_size
            unpack = TP2_LEN_MAC.unpack_from
        now = time.monotonic()
        with self.lock:
            state = self.state
            for _ in range(RX_BATCH):
                if ring is not None:
                    # the ring: no system call per frame, and none to find it empty
                    off = slot * slot_size
                    if not mem[off] & TP_STATUS_USER:
                        break
                    length, n, mac = unpack(mem, off + 4)
                    frame: bytes | memoryview = mem[off + mac : off + mac + n]
                    mem[off : off + 4] = RELEASE  # the slot goes back to the kernel
                    slot = slot + 1 if slot + 1 < slots else 0
                    received += 1
                    if pcap is not None:
                        pcap.write(frame)
                    if state is None:
                        continue
                    if n < length:  # larger than a slot, so larger than the port's frames
                        count_drop(state, DropReason.OVERSIZE, length)
                        continue
                else:
                    try:
                        if port.filter_outgoing:
                            n, address = sock.recvfrom_into(buf)
                            if address[2] == PACKET_OUTGOING:
                                continue
                        else:
                            n = sock.recv_into(buf)
                    except BlockingIOError:
                        break
                    except OSError as exc:
                        if exc.errno in (errno.ENETDOWN, errno.ENXIO):
                            break
                        raise
                    received += 1
                    frame = view[:n]
                    if pcap is not None:
                        pcap.write(frame)
                    if state is None:
                        continue
                if n > max_frame:
                    count_drop(state, DropReason.OVERSIZE, n)
                    continue
                verdict = ingress(frame, number, state)
                if verdict.__class__ is not Forward:
                    continue
                out_port, priority, out = verdict
                target = ports.get(out_port)
                if target is None:
                    self.unknown_port_drops += 1
                    continue
                queue = target.queue
                if target.delay is not None and queue.admit(len(out), now):
                    target.delay.put(out, now)  # left the queue at once: on the wire later
                    egress(state, out_port, priority, 0, n)
                elif not target.blocked and queue.admit(len(out), now):
                    # cut-through: the port is idle, the packet leaves at once (deq_qdepth 0)
                    try:
                        target.sock.send(out)
                    except BlockingIOError:
                        queue.push_front((out, n, priority, 0), len(out), priority)
                        self._block(target)
                        continue
                    except OSError as exc:
                        # the packet left the queue (BMv2's egress runs at dequeue whatever the
                        # wire does): egress sees it, the link lost it
                        target.tx_errors += 1
                        log.debug("port %d (%s): send failed: %s", out_port, target.intf, exc)
                        egress(state, out_port, priority, 0, n)
                        continue
                    target.tx_frames += 1
                    egress(state, out_port, priority, 0, n)
                    if target.pcap_out is not None:
                        target.pcap_out.write(out)
                    if self._trace:
                        log.debug(TX_TRACE, out_port, priority, len(out), 0)
                elif queue.enqueue((out, n, priority, queue.length), len(out), priority) is None:
                    count_drop(state, DropReason.QUEUE_FULL, n)
        if ring is not None:
            ring.slot = slot
        port.rx_frames += received

    def _transmit(self, now: float) -> float | None:
        """Send what the queues allow at ``now``; the select timeout until the next chance."""
        earliest: float | None = None
        for port in self._ports.values():
            if port.delay is not None:
                due = self._release(port, now)
                if due is not None and (earliest is None or due < earliest):
                    earliest = due
            queue = port.queue
            if not queue.length or port.blocked:
                continue
            sock = port.sock
            pcap = port.pcap_out
            with self.lock:
                state = self.state
                while True:
                    item = queue.dequeue(now)
                    if item is None:
                        break
                    frame, length, priority, enq_qdepth = item
                    if port.delay is not None:
                        port.delay.put(frame, now)  # left the queue: on the wire later
                        if state is not None:
                            egress(state, port.number, priority, queue.depth_of(priority), length)
                        continue
                    try:
                        sock.send(frame)
                    except BlockingIOError:
                        queue.push_front(item, len(frame), priority)
                        self._block(port)
                        break
                    except OSError as exc:
                        # dequeued all the same: egress sees it (it resets the depth registers)
                        port.tx_errors += 1
                        log.debug("port %d (%s): send failed: %s", port.number, port.intf, exc)
                        if state is not None:
                            egress(state, port.number, priority, queue.depth_of(priority), length)
                        continue
                    port.tx_frames += 1
                    if state is not None:
                        egress(state, port.number, priority, queue.depth_of(priority), length)
                    if pcap is not None:
                        pcap.write(frame)
                    if self._trace:
                        log.debug(TX_TRACE, port.number, priority, len(frame), enq_qdepth)
            ready = queue.next_ready(now)
            if ready is not None and not port.blocked:
                earliest = ready if earliest is None or ready < earliest else earliest
        if earliest is None:
            return None
        return max(0.0, earliest - now)

    def _release(self, port: _Port, now: float) -> float | None:
        """Send the frames of ``port``'s delay line whose time has come; when the next is due."""
        line = port.delay
        assert line is not None
        while not port.blocked:
            frame = line.pop(now)
            if frame is None:
                break
            try:
                port.sock.send(frame)
            except BlockingIOError:
                line.put_back(frame, now)
                self._block(port)
                break
            except OSError as exc:
                port.tx_errors += 1  # the link lost it (egress saw it leave the queue)
                log.debug("port %d (%s): send failed: %s", port.number, port.intf, exc)
                continue
            port.tx_frames += 1
            if port.pcap_out is not None:
                port.pcap_out.write(frame)
            if self._trace:
                log.debug(TX_TRACE, port.number, -1, len(frame), -1)
        return None if port.blocked else line.next_due()

    def _block(self, port: _Port) -> None:
        """The port's socket is full: wait until it is writable before sending more."""
        port.blocked = True
        self._epoll.modify(port.sock.fileno(), select.EPOLLIN | select.EPOLLOUT)

    def _flush_pcaps(self) -> None:
        for port in self._ports.values():
            for writer in (port.pcap_in, port.pcap_out):
                if writer is not None:
                    writer.flush()
