"""An in-memory fabric for deterministic tests: links, trimming switches, faults, host timers.

The network is built from a :class:`topologies.Fabric`: every link of the fabric becomes two
directed ports with a rate, a propagation delay and a bounded two-class queue (control and
trimmed packets first). Switches forward by the packet's uSID carrier exactly as the P4 program
does: a switch whose uSID is active shifts the carrier (:func:`topologies.usid.shift`), or, when
the carrier is exhausted there and an SRH has segments left, performs End (the next segment
becomes the destination), then the new active uSID selects the port towards that node. A packet addressed to a host NIC's plain
address (STEV and UDP EVs) is spread by a leaf over its uplinks with the switches' ECMP hash
(:func:`switchmodel.ecmp.member_index`: CRC-32 over source, destination, flow label and UDP
source port, members in spine order) and routed down by the spine, as the controller's
``ipv6_ecmp`` entries make the P4 program do. Above a port's trim threshold an MRC data
packet with DSCP 10 is cut to its headers, re-marked DSCP 12 and queued at high priority;
above the ECN threshold ECT packets get CE; a full queue drops. A host NIC's queue (the
sender's own link) marks ECN but never trims or drops.

Faults (all seeded): per-link loss, duplication and reordering (random extra delay), and links
that fail (drop everything) between two times. A discrete-event loop delivers frames to the
hosts' :class:`host.transport.api.Context` objects and runs their timers, so a test is a pure function
of its seed.

Usage::

    net = SimNet(fabric, seed=1)
    net.attach(ctx_h0); net.attach(ctx_h2)
    qp.post_write(...); net.kick("h0")
    net.run(until=1.0, stop=lambda: len(cq) > 0)
"""

from __future__ import annotations

import collections
import heapq
import ipaddress
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from host.transport import wire
from host.transport.api import Context
from switchmodel.ecmp import member_index
from topologies import Fabric
from topologies import usid as usidlib

HOST_QUEUE = 1 << 16  # packets a host NIC may queue (the sender's window is the real bound)


@dataclass
class LinkFaults:
    """Faults of one link (both directions)."""

    loss: float = 0.0  #: probability a frame is lost
    duplicate: float = 0.0  #: probability a frame is delivered twice
    reorder: float = 0.0  #: probability a frame gets a random extra delay
    reorder_delay: float = 1e-3  #: the largest extra delay (seconds)
    down: list[tuple[float, float]] = field(default_factory=list)  #: [start, end) windows

    def is_down(self, now: float) -> bool:
        """True while the link is failed."""
        return any(start <= now < end for start, end in self.down)


class _Port:
    """One direction of a link: a shaped, bounded, two-class egress queue."""

    __slots__ = ("node", "number", "peer", "peer_port", "rate", "delay", "depth", "trim_at",
                 "ecn_at", "high", "low", "busy", "faults", "name", "current")  # fmt: skip

    def __init__(
        self, node: str, number: int, peer: str, peer_port: int, rate: float, delay: float,
        depth: int, trim_at: int | None, ecn_at: int | None, faults: LinkFaults,
    ) -> None:  # fmt: skip
        self.node = node
        self.number = number
        self.peer = peer
        self.peer_port = peer_port
        self.rate = rate
        self.delay = delay
        self.depth = depth
        self.trim_at = trim_at
        self.ecn_at = ecn_at
        self.high: collections.deque[bytearray] = collections.deque()
        self.low: collections.deque[bytearray] = collections.deque()
        self.busy = False
        self.current: bytearray | None = None  # the frame being serialised
        self.faults = faults
        self.name = f"{node}-eth{number}" if number else node


class SimNet:
    """A fabric of trimming switches and links between the attached host contexts."""

    def __init__(
        self,
        fabric: Fabric,
        *,
        seed: int = 0,
        trim: bool = True,
        trim_threshold: int | None = None,
        ecn_threshold: int | None = None,
        queue_depth: int | None = None,
        rate_mbps: float | None = None,
        delay_us: float | None = None,
    ) -> None:
        topo = fabric.topology
        self.fabric = fabric
        self.now = 0.0
        self._rng = random.Random(seed)
        self._heap: list[tuple[float, int, int, object, object]] = []
        self._seq = 0
        depth = queue_depth or topo.queue_depth
        rate = (rate_mbps or topo.link_rate_mbps) * 1e6
        delay = (delay_us if delay_us is not None else topo.link_delay_us) * 1e-6
        #: the fabric's topology with this network's link rate and delay
        self.topology = topo.with_(
            link={"rate_mbps": rate / 1e6, "delay_us": delay * 1e6,
                  "nominal_rate_gbps": topo.nominal_rate_gbps}
        )  # fmt: skip
        #: the time dilation of contexts on this network: nominal rate / its links' rate
        self.dilation = self.topology.dilation
        trim_at = (trim_threshold if trim_threshold is not None else depth // 2) if trim else None
        ecn_at = ecn_threshold if ecn_threshold is not None else max(1, depth // 4)
        self._block = int(fabric.block.network_address) >> 96
        self._hosts_of_fabric = frozenset(h.name for h in fabric.hosts)
        self._hosts: dict[str, Context] = {}
        self._host_timer: dict[str, float | None] = {}
        self._ports: dict[tuple[str, int], _Port] = {}
        self._routes: dict[str, dict[int, int]] = {}  # switch -> active uSID -> port
        self._usid: dict[str, int] = {}
        self._faults: dict[frozenset[str], LinkFaults] = {}
        self.counters: collections.Counter[str] = collections.Counter()
        self.port_counters: dict[str, collections.Counter[str]] = collections.defaultdict(
            collections.Counter
        )
        for link in fabric.links:
            faults = self._faults.setdefault(frozenset((link.a, link.b)), LinkFaults())
            a_host = link.a_port == 0
            # a host NIC is port "plane" of the host node (0 means plane 0 here)
            a_key = link.plane if a_host else link.a_port
            self._ports[(link.a, a_key)] = _Port(
                link.a, a_key, link.b, link.b_port, rate, delay,
                HOST_QUEUE if a_host else depth, None if a_host else trim_at, ecn_at, faults,
            )  # fmt: skip
            b_peer_port = link.plane if a_host else link.a_port
            self._ports[(link.b, link.b_port)] = _Port(
                link.b, link.b_port, link.a, b_peer_port, rate, delay, depth, trim_at, ecn_at,
                faults,
            )  # fmt: skip
        for sw in fabric.switches:
            self._usid[sw.name] = sw.usid
            table: dict[int, int] = {}
            for port in sw.ports:
                if fabric.node_kind(port.peer) == "switch":
                    table[fabric.switch(port.peer).usid] = port.number
                else:
                    table[fabric.host(port.peer).nic(sw.plane).usid] = port.number
            self._routes[sw.name] = table
        # ECMP (docs/p4-pipeline.md): a leaf hashes a NIC of its plane in another rack over its
        # uplinks; a spine routes every NIC of its plane down to the NIC's leaf
        self._ecmp: dict[str, tuple[frozenset[int], tuple[int, ...]]] = {}
        for sw in fabric.switches:
            uplinks = tuple(p.number for p in fabric.uplinks(sw))
            nics = fabric.plane_nics(sw.plane)
            if uplinks:
                remote = frozenset(n.usid for n in nics if n.switch != sw.name)
                self._ecmp[sw.name] = (remote, uplinks)
            else:
                for nic in nics:
                    self._routes[sw.name].setdefault(nic.usid, sw.port_to(nic.switch).number)

    # -- set-up ----------------------------------------------------------------------------------

    def attach(self, ctx: Context) -> None:
        """Connect a host's context to its NICs."""
        self.fabric.host(ctx.host)  # validates the name
        self._hosts[ctx.host] = ctx
        self._host_timer[ctx.host] = None

    def faults(self, a: str, b: str) -> LinkFaults:
        """The faults of the link between nodes ``a`` and ``b`` (to modify in place)."""
        try:
            return self._faults[frozenset((a, b))]
        except KeyError:
            raise KeyError(f"no link between {a} and {b} in {self.fabric.topology.name}") from None

    def set_faults(self, *, loss: float = 0.0, duplicate: float = 0.0, reorder: float = 0.0,
                   reorder_delay: float = 1e-3) -> None:  # fmt: skip
        """The same random faults on every link."""
        for f in self._faults.values():
            f.loss, f.duplicate, f.reorder, f.reorder_delay = (
                loss,
                duplicate,
                reorder,
                reorder_delay,
            )

    def fail_link(self, a: str, b: str, start: float, end: float = float("inf")) -> None:
        """The link between ``a`` and ``b`` drops everything from ``start`` until ``end``."""
        self.faults(a, b).down.append((start, end))

    # -- event loop ------------------------------------------------------------------------------

    def _push(self, when: float, kind: int, a: object, b: object = None) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (when, self._seq, kind, a, b))

    def inject(self, host: str, plane: int, frame: bytes | bytearray) -> None:
        """Send a raw frame from ``host``'s NIC on ``plane`` (tests of the network itself)."""
        self._enqueue(self._ports[(host, plane)], bytearray(frame))

    def port_name(self, node: str, port: int) -> str:
        """The counter name of a switch port (or of a host NIC when ``port`` is its plane)."""
        return self._ports[(node, port)].name

    def kick(self, host: str) -> None:
        """Let a host send what it can now (call after posting work)."""
        self._push(self.now, _PUMP, host)

    def run(self, until: float, stop: Callable[[], bool] | None = None,
            max_events: int = 50_000_000) -> float:  # fmt: skip
        """Process events up to time ``until`` or until ``stop()`` is true; returns the time."""
        heap = self._heap
        count = 0
        while heap and heap[0][0] <= until:
            when, _, kind, a, b = heapq.heappop(heap)
            self.now = when
            if kind == _ARRIVE:
                self._arrive(a, b)  # type: ignore[arg-type]
            elif kind == _TXDONE:
                self._tx_done(a)  # type: ignore[arg-type]
            elif kind == _TIMER:
                host = a
                if self._host_timer.get(host) == b:  # type: ignore[call-overload]
                    self._host_timer[host] = None  # type: ignore[index]
                    ctx = self._hosts[host]  # type: ignore[index]
                    ctx.handle_timer(when)
                    self._pump(host)  # type: ignore[arg-type]
            else:
                self._pump(a)  # type: ignore[arg-type]
            count += 1
            if count >= max_events:
                raise RuntimeError(f"simnet: {max_events} events without reaching t={until}")
            if stop is not None and stop():
                return self.now
        if until != float("inf"):
            self.now = max(self.now, until)
        return self.now

    def _pump(self, host: str) -> None:
        ctx = self._hosts[host]
        now = self.now
        for plane, frame in ctx.frames_to_send(now):
            if not isinstance(frame, bytearray):
                frame = bytearray(frame)
            self._enqueue(self._ports[(host, plane)], frame)
        t = ctx.next_timer()
        if t is not None:
            t = max(t, now)
            if self._host_timer[host] != t:
                self._host_timer[host] = t
                self._push(t, _TIMER, host, t)

    # -- links and queues ------------------------------------------------------------------------

    def _enqueue(self, port: _Port, frame: bytearray) -> None:
        counters = self.port_counters[port.name]
        depth = len(port.high) + len(port.low) + port.busy
        tc = ((frame[14] & 0x0F) << 4) | (frame[15] >> 4) if len(frame) >= 54 else 0
        dscp, ecn = tc >> 2, tc & 3
        high = dscp in (wire.DSCP_CONTROL, wire.DSCP_TRIMMED, wire.DSCP_TRIMMED_LAST_HOP)
        if port.trim_at is not None and dscp == wire.DSCP_TRIMMABLE and depth >= port.trim_at:
            cut = _mrc_data_header_len(frame)
            if cut:
                del frame[cut:]
                # a port that faces a host trims at the last hop (docs/p4-pipeline.md)
                code = (
                    wire.DSCP_TRIMMED_LAST_HOP
                    if port.peer in self._hosts_of_fabric
                    else (wire.DSCP_TRIMMED)
                )
                tc = (code << 2) | ecn
                frame[14] = (frame[14] & 0xF0) | (tc >> 4)
                frame[15] = (frame[15] & 0x0F) | ((tc & 0x0F) << 4)
                frame[18:20] = (cut - 54).to_bytes(2, "big")
                udp = _udp_offset(frame)
                frame[udp + 4 : udp + 6] = (cut - udp).to_bytes(2, "big")
                high = True
                counters["trimmed"] += 1
                self.counters["trimmed"] += 1
        if (len(port.high) if high else depth) >= port.depth:
            counters["queue_full"] += 1
            self.counters["drop_queue_full"] += 1
            return
        if port.ecn_at is not None and ecn in (1, 2) and depth >= port.ecn_at:
            frame[15] |= 0x30  # ECN bits of the traffic class -> CE
            counters["ecn_marked"] += 1
            self.counters["ecn_marked"] += 1
        (port.high if high else port.low).append(frame)
        if not port.busy:
            self._start(port)

    def _start(self, port: _Port) -> None:
        frame = (port.high if port.high else port.low).popleft()
        port.current = frame
        port.busy = True
        self._push(self.now + len(frame) * 8 / port.rate, _TXDONE, port)

    def _tx_done(self, port: _Port) -> None:
        frame = port.current
        assert frame is not None
        port.current = None
        port.busy = False
        self.port_counters[port.name]["tx"] += 1
        if port.high or port.low:
            self._start(port)
        faults = port.faults
        now = self.now
        if faults.down and faults.is_down(now):
            self.counters["drop_link_down"] += 1
            return
        rng = self._rng
        if faults.loss and rng.random() < faults.loss:
            self.counters["drop_loss"] += 1
            return
        copies = 2 if faults.duplicate and rng.random() < faults.duplicate else 1
        for copy in range(copies):
            extra = 0.0
            if faults.reorder and rng.random() < faults.reorder:
                extra = rng.random() * faults.reorder_delay
            delivered = frame if copy == 0 else bytearray(frame)
            self._push(now + port.delay + extra, _ARRIVE, (port.peer, port.peer_port), delivered)

    # -- nodes -----------------------------------------------------------------------------------

    def _arrive(self, where: tuple[str, int], frame: bytearray) -> None:
        node, port_number = where
        ctx = self._hosts.get(node)
        if ctx is not None:
            ctx.receive_frame(port_number, frame, self.now)
            self._pump(node)
            return
        if node in self._routes:
            self._switch(node, frame)
        else:
            self.counters["drop_no_host"] += 1

    def _switch(self, name: str, frame: bytearray) -> None:
        self.counters["switched"] += 1
        if len(frame) < 54 or frame[12:14] != b"\x86\xdd":
            self.counters["drop_not_ipv6"] += 1
            return
        if frame[21] <= 1:
            self.counters["drop_hop_limit"] += 1
            return
        frame[21] -= 1
        addr = ipaddress.IPv6Address(bytes(frame[38:54]))
        if int(addr) >> 96 != self._block:
            self.counters["drop_no_route"] += 1
            return
        if usidlib.active(addr) == self._usid[name]:
            if not usidlib.exhausted(addr):
                addr = usidlib.shift(addr)
            elif frame[20] == wire.IPPROTO_ROUTING and len(frame) >= 62 and frame[57] > 0:
                # End: segments left -= 1, the segment it now points at is the destination
                left = frame[57] - 1
                frame[57] = left
                at = 62 + 16 * left
                if frame[58] < left or len(frame) < at + 16:
                    self.counters["drop_sid_end"] += 1
                    return
                addr = ipaddress.IPv6Address(bytes(frame[at : at + 16]))
            else:
                self.counters["drop_sid_end"] += 1
                return
            frame[38:54] = addr.packed
        active = usidlib.active(addr)
        ecmp = self._ecmp.get(name)
        if ecmp is not None and active in ecmp[0]:
            out: int | None = ecmp[1][_ecmp_member(frame, len(ecmp[1]))]
            self.counters["ecmp"] += 1
        else:
            out = self._routes[name].get(active)
        if out is None:
            self.counters["drop_no_route"] += 1
            return
        self._enqueue(self._ports[(name, out)], frame)


_ARRIVE, _TXDONE, _TIMER, _PUMP = range(4)


def _ecmp_member(frame: bytearray, members: int) -> int:
    """The uplink (0-based, spine order) the switches' ECMP hash gives this IPv6 frame."""
    flow = int.from_bytes(frame[15:18], "big") & 0xFFFFF
    src = int.from_bytes(frame[22:38], "big")
    dst = int.from_bytes(frame[38:54], "big")
    udp = _udp_offset(frame)
    sport = int.from_bytes(frame[udp : udp + 2], "big") if udp >= 0 else 0
    return member_index(src, dst, flow, sport, members)


def _udp_offset(frame: bytearray) -> int:
    """Offset of the UDP header of an IPv6 frame (after the SRH if there is one; -1 when the
    frame holds no UDP)."""
    nh, off = frame[20], wire.OFF_UDP
    if nh == wire.IPPROTO_ROUTING and len(frame) >= off + 8:
        nh, off = frame[off], off + 8 + frame[off + 1] * 8
    return off if nh == wire.IPPROTO_UDP else -1


def _mrc_data_header_len(frame: bytearray) -> int:
    """Header length of an MRC data frame, SRH included (0 when the frame is not one)."""
    udp = _udp_offset(frame)
    ext = udp - wire.OFF_UDP
    if udp < 0 or len(frame) < wire.DATA_HEADER_LEN + ext:
        return 0
    if frame[udp + 2 : udp + 4] != b"\x12\xb7":  # UDP destination port 4791
        return 0
    opcode = frame[udp + wire.UDP_LEN]
    if opcode == wire.OP_WRITE_ONLY:
        return wire.DATA_HEADER_LEN + ext
    if opcode == wire.OP_WRITE_ONLY_IMM and len(frame) >= wire.DATA_IMM_HEADER_LEN + ext:
        return wire.DATA_IMM_HEADER_LEN + ext
    return 0
