"""The simulated network: links, switches and faults between host contexts, in virtual time.

The network is built from a :class:`topologies.Fabric`: every link of the fabric becomes two
directed ports with a rate, a propagation delay and a bounded two-class queue (control and
trimmed packets first). Switches forward by the packet's uSID carrier exactly as the P4 program
does: a switch whose uSID is active shifts the carrier (uN), or, when the carrier is exhausted
there and an SRH has segments left, performs End (the next segment becomes the destination),
then the new active uSID selects the port towards that node. A packet addressed to a host
NIC's plain address (STEV and UDP EVs) is spread by a leaf over its uplinks with the switches'
ECMP hash (:func:`p4src.contract.member_index`: CRC-32 over source, destination, flow label and
UDP source port, members in spine order) and routed down by the spine, as the controller's
``ipv6_ecmp`` entries make the P4 program do. Only MRC data packets marked trimmable (DSCP 10)
are trimmed: cut to their headers, re-marked DSCP 12 (13 at the receiver's own leaf) and queued
at high priority; only ECT packets are ECN-marked.

Two queue disciplines (:class:`sim.queues.QueuePolicy`):

- ``threshold``, the P4 program's and the emulated switches': trim above a queue depth, ECN
  above another, both decided at enqueue, a full queue drops; a host NIC's queue marks ECN but
  never trims or drops. ``SimNet(fabric, trim_threshold=, ecn_threshold=, queue_depth=)``.
- ``red``, UET's reference simulator's, in real units: byte-bounded queues of one BDP, RED ECN
  decided at dequeue, trim only at a full queue, a switch latency, host NICs that hand the
  transport one frame slot at a time (the EV is chosen when the NIC can send, as a NIC's
  transmit scheduler does). ``SimNet.build(SimFabric(...))`` (:mod:`sim.fabric`).

Faults (all seeded): per-link loss, duplication and reordering (random extra delay), links that
fail (drop everything) between two times, degraded links (a share of their rate), and failures
of a switch, a plane or a host NIC (every link of it). A discrete-event loop delivers frames
to the hosts' :class:`host.transport.api.Context` objects and runs their timers, so a run is a
pure function of its seed.

Usage::

    net = SimNet(fabric, seed=1)
    net.attach(ctx_h0); net.attach(ctx_h2)
    qp.post_write(...); net.kick("h0")
    net.run(until=1.0, stop=lambda: len(cq) > 0)
"""

from __future__ import annotations

import collections
import heapq
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from host.transport import wire
from host.transport.api import Context
from p4src.contract import ETHERTYPE_IPV6, ROCEV2_UDP_PORT, member_index
from sim.queues import PortQueue, QueuePolicy
from topologies import Fabric
from topologies.usid import BLOCK_BITS, USID_BITS

if TYPE_CHECKING:
    from sim.fabric import SimFabric

HOST_QUEUE = 1 << 16  # packets a host NIC may queue (the sender's window is the real bound)
NIC_SLOTS = 2  # red discipline: data frames a host NIC holds (the one on the wire and the next)

_ROCE_PORT = ROCEV2_UDP_PORT.to_bytes(2, "big")  # UDP destination port of MRC frames
_IPV6_TYPE = ETHERTYPE_IPV6.to_bytes(2, "big")
# the IPv6 destination address of a frame, in bytes: the block, the active uSID, the carrier's
# rest (the switches read and shift it in place)
_DST, _DST_END = 38, 54
_ACTIVE = _DST + BLOCK_BITS // 8
_ARG = _ACTIVE + USID_BITS // 8
_ARG_ZERO = bytes(_DST_END - _ARG)
_USID_ZERO = bytes(USID_BITS // 8)
assert BLOCK_BITS % 8 == 0 and USID_BITS == 16, "the switches read uSIDs as whole bytes"
_HIGH_DSCP = frozenset((wire.DSCP_CONTROL, wire.DSCP_TRIMMED, wire.DSCP_TRIMMED_LAST_HOP))


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


@dataclass(eq=False, slots=True)
class _Port:
    """One direction of a link: a shaped, bounded, two-class egress queue."""

    node: str
    number: int
    peer: str
    peer_port: int
    rate: float  #: bits per second
    delay: float  #: propagation (and the next switch's latency), seconds
    depth: int  #: threshold discipline: packets the queue holds
    trim_at: int | None  #: threshold discipline: trim at this depth (None: never)
    ecn_at: int | None  #: threshold discipline: mark ECN at this depth (None: never)
    faults: LinkFaults
    red: PortQueue | None  #: the red discipline's bounds (None: threshold discipline)
    host: bool  #: a host NIC (the sender's own link)
    to_host: bool  #: a switch port facing a host (the last hop)
    byte_time: float = 0.0  #: seconds per byte on the wire
    high: collections.deque[bytearray] = field(default_factory=collections.deque)
    low: collections.deque[bytearray] = field(default_factory=collections.deque)
    low_bytes: int = 0  #: red: data bytes queued, the frame on the wire included
    high_bytes: int = 0
    busy: bool = False
    current: bytearray | None = None  #: the frame being serialised
    current_low: bool = False  #: ...taken from the data queue
    peer_switch: _Switch | None = None  #: the switch at the other end, if one is
    name: str = ""
    counters: collections.Counter[str] = field(default_factory=collections.Counter)
    tx: int = 0
    tx_bytes: int = 0  #: bytes sent (every frame as it left the queue)
    ecn_full: int | None = None  #: threshold discipline, RED: every ECT packet from this depth

    def __post_init__(self) -> None:
        self.byte_time = 8 / self.rate
        self.name = f"{self.node}-eth{self.number}" if self.number else self.node


class _Switch:
    """What a switch forwards by: its uSID, its routes and its ECMP group."""

    __slots__ = ("name", "usid", "routes", "ecmp_remote", "ecmp_ports")

    def __init__(self, name: str, usid: int, routes: dict[int, _Port]) -> None:
        self.name = name
        self.usid = usid
        self.routes = routes  # active uSID -> egress port
        self.ecmp_remote: frozenset[int] = frozenset()  # NIC uSIDs hashed over the uplinks
        self.ecmp_ports: tuple[_Port, ...] = ()


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
        queues: PortQueue | None = None,
        switch_latency_us: float = 0.0,
        ecn_max_threshold: int | None = None,
        data_depth: bool = False,
        nic_slots: int | None = None,
        host_ecn: bool = True,
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
        switch_latency = switch_latency_us * 1e-6
        #: the fabric's topology with this network's link rate and delay
        self.topology = topo.with_(
            link={"rate_mbps": rate / 1e6, "delay_us": delay * 1e6,
                  "nominal_rate_gbps": topo.nominal_rate_gbps}
        )  # fmt: skip
        #: the time dilation of contexts on this network: nominal rate / its links' rate
        self.dilation = self.topology.dilation
        #: the red discipline's port bounds (None: the threshold discipline)
        self.queues = queues
        #: data frames a host NIC holds (None: every frame the window allows, EVs chosen then)
        self.nic_slots: int | None = nic_slots or (NIC_SLOTS if queues is not None else None)
        #: threshold discipline: trim and ECN judge the data queue's depth alone, and each
        #: class holds ``queue_depth`` packets (the P4 program on BMv2's priority queues)
        self.data_depth = data_depth
        trim_at = (trim_threshold if trim_threshold is not None else depth // 2) if trim else None
        ecn_at = ecn_threshold if ecn_threshold is not None else max(1, depth // 4)
        if queues is not None:
            trim_at = None if not queues.trim else 0
        self._block_bytes = fabric.block.network_address.packed[: BLOCK_BITS // 8]
        hosts = frozenset(h.name for h in fabric.hosts)
        self._hosts_of_fabric = hosts
        self._hosts: dict[str, Context] = {}
        self._host_timer: dict[str, float | None] = {}
        self._host_ports: dict[str, list[_Port]] = collections.defaultdict(list)
        self._ports: dict[tuple[str, int], _Port] = {}
        self._routes: dict[str, dict[int, _Port]] = {}  # switch -> active uSID -> port
        self._usid: dict[str, int] = {}
        self._faults: dict[frozenset[str], LinkFaults] = {}
        self.counters: collections.Counter[str] = collections.Counter()
        for link in fabric.links:
            faults = self._faults.setdefault(frozenset((link.a, link.b)), LinkFaults())
            a_host = link.a_port == 0
            # a host NIC is port "plane" of the host node (0 means plane 0 here)
            a_key = link.plane if a_host else link.a_port
            # a frame reaching a switch waits the switch latency before its egress queue
            a_delay = delay + (switch_latency if link.b not in hosts else 0.0)
            b_delay = delay + (switch_latency if link.a not in hosts else 0.0)
            port_a = _Port(
                link.a, a_key, link.b, link.b_port, rate, a_delay,
                HOST_QUEUE if a_host else depth, None if a_host else trim_at,
                (None if queues is not None or not host_ecn else ecn_at) if a_host else ecn_at,
                faults, None if a_host else queues, a_host, False,
            )  # fmt: skip
            if not a_host:
                port_a.ecn_full = ecn_max_threshold
            self._ports[(link.a, a_key)] = port_a
            if a_host:
                self._host_ports[link.a].append(port_a)
            b_peer_port = link.plane if a_host else link.a_port
            self._ports[(link.b, link.b_port)] = _Port(
                link.b, link.b_port, link.a, b_peer_port, rate, b_delay, depth, trim_at, ecn_at,
                faults, queues, False, a_host, ecn_full=ecn_max_threshold,
            )  # fmt: skip
        for sw in fabric.switches:
            self._usid[sw.name] = sw.usid
            table: dict[int, _Port] = {}
            for port in sw.ports:
                if fabric.node_kind(port.peer) == "switch":
                    usid = fabric.switch(port.peer).usid
                else:
                    usid = fabric.host(port.peer).nic(sw.plane).usid
                table[usid] = self._ports[(sw.name, port.number)]
            self._routes[sw.name] = table
        # ECMP (docs/p4-pipeline.md): a leaf hashes a NIC of its plane in another rack over its
        # uplinks; a spine routes every NIC of its plane down to the NIC's leaf
        self._ecmp: dict[str, tuple[frozenset[int], tuple[_Port, ...]]] = {}
        for sw in fabric.switches:
            uplinks = tuple(self._ports[(sw.name, p.number)] for p in fabric.uplinks(sw))
            nics = fabric.plane_nics(sw.plane)
            if uplinks:
                remote = frozenset(n.usid for n in nics if n.switch != sw.name)
                self._ecmp[sw.name] = (remote, uplinks)
            else:
                for nic in nics:
                    self._routes[sw.name].setdefault(
                        nic.usid, self._ports[(sw.name, sw.port_to(nic.switch).number)]
                    )
        switches: dict[str, _Switch] = {}
        for sw in fabric.switches:
            node = switches[sw.name] = _Switch(sw.name, sw.usid, self._routes[sw.name])
            if sw.name in self._ecmp:
                node.ecmp_remote, node.ecmp_ports = self._ecmp[sw.name]
        for egress in self._ports.values():
            egress.peer_switch = switches.get(egress.peer)

    @classmethod
    def build(cls, spec: SimFabric, *, seed: int = 0) -> SimNet:
        """The network of a :class:`sim.fabric.SimFabric`: real units, its queue policy and
        switch latency."""
        policy: QueuePolicy = spec.queues
        queues = None if policy.discipline == "threshold" else spec.port_queue()
        return cls(
            Fabric(spec.topology()),
            seed=seed,
            trim=policy.trim,
            queues=queues,
            switch_latency_us=spec.switch_latency_us,
        )

    # -- set-up ----------------------------------------------------------------------------------

    def attach(self, ctx: Context) -> None:
        """Connect a host's context to its NICs."""
        self.fabric.host(ctx.host)  # validates the name
        self._hosts[ctx.host] = ctx
        self._host_timer[ctx.host] = None

    @property
    def contexts(self) -> dict[str, Context]:
        """The attached host contexts, by host name."""
        return dict(self._hosts)

    @property
    def port_counters(self) -> dict[str, collections.Counter[str]]:
        """Counters per port name: ``tx`` (frames), ``tx_bytes``, ``trimmed``, ``ecn_marked``,
        ``queue_full``."""
        out: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        for port in self._ports.values():
            counters = collections.Counter(port.counters)
            if port.tx:
                counters["tx"] = port.tx
                counters["tx_bytes"] = port.tx_bytes
            if counters:
                out[port.name] = counters
        return out

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

    # -- faults a scenario applies (times in seconds of simulated time) -------------------------

    def fail_link(self, a: str, b: str, start: float, end: float = float("inf")) -> None:
        """The link between ``a`` and ``b`` drops everything from ``start`` until ``end``."""
        self.faults(a, b).down.append((start, end))

    def flap_link(self, a: str, b: str, start: float, down: float, up: float, count: int) -> None:
        """The link goes down for ``down`` seconds then up for ``up``, ``count`` times."""
        for n in range(count):
            begin = start + n * (down + up)
            self.fail_link(a, b, begin, begin + down)

    def _fail_links(self, links: Iterable[tuple[str, str]], start: float, end: float) -> int:
        count = 0
        for a, b in links:
            self.fail_link(a, b, start, end)
            count += 1
        return count

    def fail_switch(self, name: str, start: float, end: float = float("inf")) -> int:
        """Every link of switch ``name`` is down from ``start`` to ``end`` (a reboot: its
        tables are the controller's and come back with it); returns the links failed."""
        sw = self.fabric.switch(name)
        return self._fail_links(((name, p.peer) for p in sw.ports), start, end)

    def fail_plane(self, plane: int, start: float, end: float = float("inf")) -> int:
        """Every link of ``plane`` is down from ``start`` to ``end``; returns the links failed."""
        links = ((lk.a, lk.b) for lk in self.fabric.links if lk.plane == plane)
        return self._fail_links(links, start, end)

    def fail_nic(self, host: str, plane: int, start: float, end: float = float("inf")) -> None:
        """Host ``host``'s NIC on ``plane`` (its link to its leaf) is down from ``start``."""
        nic = self.fabric.host(host).nic(plane)
        self.fail_link(host, nic.switch, start, end)

    # -- the same faults as a scenario's phase drives them, at the current simulated time
    #    (experiments.faults.FaultTarget) ------------------------------------------------------

    def link_down(self, a: str, b: str) -> None:
        """Fail the link between ``a`` and ``b`` now, until :meth:`link_up`."""
        self.fail_link(a, b, self.now)

    def link_up(self, a: str, b: str) -> None:
        """Repair the link between ``a`` and ``b`` now (ends every failure still open)."""
        faults = self.faults(a, b)
        faults.down = [(s, min(e, self.now)) if s <= self.now else (s, e) for s, e in faults.down]

    def kill_switches(self, names: Iterable[str]) -> None:
        """Stop switches now: every link of each is down until :meth:`start_switches`."""
        for name in names:
            for port in self.fabric.switch(name).ports:
                self.link_down(name, port.peer)

    def start_switches(self, names: Iterable[str]) -> None:
        """Start switches again now (their forwarding is the fabric's: nothing to reinstall)."""
        for name in names:
            for port in self.fabric.switch(name).ports:
                self.link_up(name, port.peer)

    def degrade_link(self, a: str, b: str, share: float) -> None:
        """The link between ``a`` and ``b`` runs at ``share`` of its rate, both directions, its
        queues and ECN thresholds scaled alike (the reference's ``-failed``: a link that still
        carries traffic, slowly)."""
        if not 0 < share <= 1:
            raise ValueError(f"link share {share}: expected 0 < share <= 1")
        self.faults(a, b)  # validates the link
        for port in self._ports.values():
            if {port.node, port.peer} == {a, b}:
                port.byte_time = 8 / (port.rate * share)
                if port.red is not None:
                    red = port.red
                    port.red = PortQueue(
                        size_bytes=int(red.size_bytes * share),
                        ecn_low_bytes=int(red.ecn_low_bytes * share),
                        ecn_high_bytes=int(red.ecn_high_bytes * share),
                        trim=red.trim,
                        packets=red.packets,
                    )

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

    def kick_at(self, host: str, when: float) -> None:
        """Let a host send at simulated time ``when`` (work posted for a later start)."""
        self._push(max(when, self.now), _PUMP, host)

    @property
    def events(self) -> int:
        """Events processed so far (the simulator's unit of work)."""
        return self._processed

    _processed = 0

    def run(
        self,
        until: float,
        stop: Callable[[], bool] | None = None,
        max_events: int = 500_000_000,
        host_stop: Callable[[str], bool] | None = None,
    ) -> float:
        """Process events up to time ``until`` or until ``stop()`` is true (asked after every
        event) or ``host_stop(host)`` is (asked after a host took a frame or ran its timers:
        cheap where ``stop`` would scan every host); returns the time."""
        heap = self._heap
        pop = heapq.heappop
        arrive, tx_done, pump = self._arrive, self._tx_done, self._pump
        timers, hosts = self._host_timer, self._hosts
        count = 0
        try:
            while heap and heap[0][0] <= until:
                when, _, kind, a, b = pop(heap)
                self.now = when
                count += 1
                host: str | None = None
                if kind == _TXDONE:
                    tx_done(a)  # type: ignore[arg-type]
                elif kind == _ARRIVE:
                    host = arrive(a, b)  # type: ignore[arg-type]
                elif kind == _TIMER:
                    if timers.get(a) == b:  # type: ignore[call-overload]
                        host = a  # type: ignore[assignment]
                        timers[host] = None  # type: ignore[index]
                        hosts[host].handle_timer(when)  # type: ignore[index]
                        pump(host)  # type: ignore[arg-type]
                else:
                    pump(a)  # type: ignore[arg-type]
                if count >= max_events:
                    raise RuntimeError(f"simnet: {max_events} events without reaching t={until}")
                if stop is not None and stop():
                    return self.now
                if host is not None and host_stop is not None and host_stop(host):
                    return self.now
        finally:
            self._processed += count
        if until != float("inf"):
            self.now = max(self.now, until)
        return self.now

    def _pump(self, host: str) -> None:
        ctx = self._hosts[host]
        now = self.now
        ports = self._ports
        slots = self.nic_slots
        if slots is None:
            for plane, frame in ctx.frames_to_send(now):
                if not isinstance(frame, bytearray):
                    frame = bytearray(frame)
                self._enqueue(ports[(host, plane)], frame)
        else:
            # a NIC takes a data frame when it has a free slot: the EV is chosen then
            budget: dict[int, int] = {}
            for port in self._host_ports[host]:
                room = slots - len(port.low) - port.busy
                budget[port.number] = room if room > 0 else 0
            for plane, frame in ctx.frames_to_send(now, budget):
                if not isinstance(frame, bytearray):
                    frame = bytearray(frame)
                self._enqueue(ports[(host, plane)], frame)
        t = ctx.next_timer()
        if t is not None:
            t = max(t, now)
            if self._host_timer[host] != t:
                self._host_timer[host] = t
                self._push(t, _TIMER, host, t)

    # -- links and queues ------------------------------------------------------------------------

    def _trim(self, port: _Port, frame: bytearray, ecn: int) -> bool:
        """Cut an MRC data frame to its headers and re-mark it trimmed (False: not one)."""
        cut = _mrc_data_header_len(frame)
        if not cut:
            return False
        del frame[cut:]
        # a port that faces a host trims at the last hop (docs/p4-pipeline.md)
        code = wire.DSCP_TRIMMED_LAST_HOP if port.to_host else wire.DSCP_TRIMMED
        tc = (code << 2) | ecn
        frame[14] = (frame[14] & 0xF0) | (tc >> 4)
        frame[15] = (frame[15] & 0x0F) | ((tc & 0x0F) << 4)
        frame[18:20] = (cut - 54).to_bytes(2, "big")
        udp = _udp_offset(frame)
        frame[udp + 4 : udp + 6] = (cut - udp).to_bytes(2, "big")
        port.counters["trimmed"] += 1
        self.counters["trimmed"] += 1
        return True

    def _enqueue(self, port: _Port, frame: bytearray) -> None:
        if port.red is not None:
            self._enqueue_red(port, port.red, frame)
            return
        # data_depth: the program's port_qdepth + port_arrivals (data packets queued, not yet
        # dequeued); else every packet the port holds
        depth = len(port.low) if self.data_depth else len(port.high) + len(port.low) + port.busy
        tc = ((frame[14] & 0x0F) << 4) | (frame[15] >> 4) if len(frame) >= 54 else 0
        dscp, ecn = tc >> 2, tc & 3
        high = dscp in _HIGH_DSCP
        if port.trim_at is not None and dscp == wire.DSCP_TRIMMABLE and depth >= port.trim_at:
            high = self._trim(port, frame, ecn) or high
        if (len(port.high) if high else depth) >= port.depth:
            port.counters["queue_full"] += 1
            self.counters["drop_queue_full"] += 1
            return
        full = port.ecn_full
        if (
            port.ecn_at is not None
            and ecn in (1, 2)
            and depth >= port.ecn_at
            # RED as the P4 program's: every packet from ecn_full on, below it a probability
            # rising linearly from 0 at the ECN threshold
            and (
                full is None
                or depth >= full
                or self._rng.random() < (depth - port.ecn_at) / (full - port.ecn_at)
            )
        ):
            frame[15] |= 0x30  # ECN bits of the traffic class -> CE
            port.counters["ecn_marked"] += 1
            self.counters["ecn_marked"] += 1
        if high:
            port.high.append(frame)
            port.high_bytes += len(frame)
        else:
            port.low.append(frame)
        if not port.busy:
            self._start(port)

    def _enqueue_red(self, port: _Port, bounds: PortQueue, frame: bytearray) -> None:
        """The reference's composite queue: trim only at a full data queue (the arriving packet
        or the newest queued one, a coin flip), headers and control at high priority."""
        size = len(frame)
        dscp = (((frame[14] & 0x0F) << 4) | (frame[15] >> 4)) >> 2 if size >= 54 else 0
        if dscp not in _HIGH_DSCP:
            if port.low_bytes + size <= bounds.size_bytes or self._rng.random() < 0.5:
                if port.low_bytes + size > bounds.size_bytes:
                    # make room: the newest queued data packet loses its payload
                    if len(port.low) and bounds.trim:
                        booted = port.low.pop()
                        port.low_bytes -= len(booted)
                        if self._trim(port, booted, booted[15] >> 4 & 3):
                            self._enqueue_high(port, bounds, booted)
                        else:
                            self._drop_full(port)
                    elif len(port.low):
                        port.low_bytes -= len(port.low.pop())
                        self._drop_full(port)
                port.low.append(frame)
                port.low_bytes += size
                if not port.busy:
                    self._start(port)
                return
            if not (bounds.trim and dscp == wire.DSCP_TRIMMABLE and self._trim(
                    port, frame, frame[15] >> 4 & 3)):  # fmt: skip
                self._drop_full(port)
                return
        self._enqueue_high(port, bounds, frame)

    def _enqueue_high(self, port: _Port, bounds: PortQueue, frame: bytearray) -> None:
        if port.high_bytes + len(frame) > 2 * bounds.size_bytes:
            self._drop_full(port)
            return
        port.high.append(frame)
        port.high_bytes += len(frame)
        if not port.busy:
            self._start(port)

    def _drop_full(self, port: _Port) -> None:
        port.counters["queue_full"] += 1
        self.counters["drop_queue_full"] += 1

    def _start(self, port: _Port) -> None:
        if port.high:
            frame = port.high.popleft()
            port.high_bytes -= len(frame)
            port.current_low = False
        else:
            frame = port.low.popleft()  # red: counted in low_bytes until it has left
            port.current_low = True
        port.current = frame
        port.busy = True
        self._seq += 1
        heapq.heappush(
            self._heap, (self.now + len(frame) * port.byte_time, self._seq, _TXDONE, port, None)
        )

    def _tx_done(self, port: _Port) -> None:
        frame = port.current
        assert frame is not None
        port.current = None
        port.busy = False
        port.tx += 1
        port.tx_bytes += len(frame)
        red = port.red
        if red is not None and port.current_low:
            # a data packet leaves: RED on the data bytes still queued behind it
            port.low_bytes -= len(frame)
            queued = port.low_bytes
            ecn = frame[15] >> 4 & 3
            if (
                queued > red.ecn_low_bytes
                and ecn
                and ecn != 3
                and (
                    queued > red.ecn_high_bytes
                    or self._rng.random()
                    < (queued - red.ecn_low_bytes) / (red.ecn_high_bytes - red.ecn_low_bytes)
                )
            ):
                frame[15] |= 0x30
                port.counters["ecn_marked"] += 1
                self.counters["ecn_marked"] += 1
        if port.high or port.low:
            self._start(port)
        if port.host and self.nic_slots is not None and len(port.low) < self.nic_slots:
            self._push(self.now, _PUMP, port.node)  # the NIC has a free slot
        faults = port.faults
        now = self.now
        if faults.down and faults.is_down(now):
            self.counters["drop_link_down"] += 1
            return
        if faults.loss or faults.duplicate or faults.reorder:
            self._deliver_faulty(port, frame, faults)
            return
        self._seq += 1
        heapq.heappush(self._heap, (now + port.delay, self._seq, _ARRIVE, port, frame))

    def _deliver_faulty(self, port: _Port, frame: bytearray, faults: LinkFaults) -> None:
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
            self._push(self.now + port.delay + extra, _ARRIVE, port, delivered)

    # -- nodes -----------------------------------------------------------------------------------

    def _arrive(self, port: _Port, frame: bytearray) -> str | None:
        """Deliver a frame at the end of a link; returns the host that took it (None: a
        switch did)."""
        switch = port.peer_switch
        if switch is not None:
            self._switch(switch, frame)
            return None
        node = port.peer
        ctx = self._hosts.get(node)
        if ctx is not None:
            ctx.receive_frame(port.peer_port, frame, self.now)
            self._pump(node)
            return node
        self.counters["drop_no_host"] += 1
        return None

    def _switch(self, switch: _Switch, frame: bytearray) -> None:
        counters = self.counters
        counters["switched"] += 1
        if len(frame) < 54 or frame[12:14] != _IPV6_TYPE:
            counters["drop_not_ipv6"] += 1
            return
        if frame[21] <= 1:
            counters["drop_hop_limit"] += 1
            return
        frame[21] -= 1
        # the destination address in place: the block, the active uSID, the rest (bytes)
        if frame[_DST:_ACTIVE] != self._block_bytes:
            counters["drop_no_route"] += 1
            return
        active = (frame[_ACTIVE] << 8) | frame[_ACTIVE + 1]
        if active == switch.usid:
            if frame[_ARG:_DST_END] != _ARG_ZERO:
                # uN: drop the active uSID, move the rest up, zero-fill
                frame[_ACTIVE:_DST_END] = frame[_ARG:_DST_END] + _USID_ZERO
            elif frame[20] == wire.IPPROTO_ROUTING and len(frame) >= 62 and frame[57] > 0:
                # End: segments left -= 1, the segment it now points at is the destination
                left = frame[57] - 1
                frame[57] = left
                at = 62 + 16 * left
                if frame[58] < left or len(frame) < at + 16:
                    counters["drop_sid_end"] += 1
                    return
                frame[_DST:_DST_END] = frame[at : at + 16]
            else:
                counters["drop_sid_end"] += 1
                return
            active = (frame[_ACTIVE] << 8) | frame[_ACTIVE + 1]
        out: _Port | None
        if active in switch.ecmp_remote:
            ports = switch.ecmp_ports
            out = ports[_ecmp_member(frame, len(ports))]
            counters["ecmp"] += 1
        else:
            out = switch.routes.get(active)
        if out is None:
            counters["drop_no_route"] += 1
            return
        self._enqueue(out, frame)


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
    if frame[udp + 2 : udp + 4] != _ROCE_PORT:
        return 0
    opcode = frame[udp + wire.UDP_LEN]
    if opcode == wire.OP_WRITE_ONLY:
        return wire.DATA_HEADER_LEN + ext
    if opcode == wire.OP_WRITE_ONLY_IMM and len(frame) >= wire.DATA_IMM_HEADER_LEN + ext:
        return wire.DATA_IMM_HEADER_LEN + ext
    return 0
