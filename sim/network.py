"""The simulated network: links, switches and faults between host contexts, in virtual time.

The network is built from a :class:`topologies.Fabric`: every link of the fabric becomes two
directed ports with a rate, a propagation delay and a bounded two-class queue (control and
trimmed packets first). Switches decide every frame as the P4 program does (docs/p4-pipeline.md),
on the tables the controller installs (:class:`sim.switch.SwitchTables`, built from the fabric
model): frames the program's parser refuses are dropped (PARSE_ERROR, SRH_INVALID, NOT_IPV6), as
is a hop limit of 1; a switch whose uN SID matches shifts the carrier, or, when the carrier is
exhausted there (or the End SID matched) and an SRH has segments left, performs End (the next
segment becomes the destination); then ``ipv6_ecmp`` or ``ipv6_lpm`` on the new destination
picks the egress port and the MACs written. A packet addressed to a host NIC's plain address
(STEV and UDP EVs) is spread by a leaf over its uplinks with the switches' ECMP hash
(:func:`p4src.contract.member_index`: CRC-32 over source, destination, flow label and UDP
source port, members in spine order) and routed down by the spine. Only MRC data packets
marked trimmable (DSCP 10) are trimmed: cut to their headers, re-marked DSCP 12 (13 at the
receiver's own leaf) and queued at high priority; only ECT packets that were not trimmed are
ECN-marked; control packets (DSCP 48) go at high priority, everything else (a header trimmed
by an earlier switch too) in the data queue.

Two queue disciplines (:class:`sim.queues.QueuePolicy`):

- ``threshold``, the P4 program's and the emulated switches': trim above a queue depth, ECN
  above another, both decided at enqueue, a full queue drops (a fabric port's high-priority
  queue holds the reference's bytes of control-size packets:
  ``topologies.operating.header_queue_depth``); a host NIC's queue marks ECN but never trims or
  drops. ``SimNet(fabric, trim_threshold=, ecn_threshold=, queue_depth=)``.
- ``red``, UET's reference simulator's, in real units: byte-bounded queues of one BDP, RED ECN
  decided at dequeue, trim only at a full queue, a switch latency, host NICs that hand the
  transport one frame slot at a time (the EV is chosen when the NIC can send, as a NIC's
  transmit scheduler does). ``SimNet.build(SimFabric(...))`` (:mod:`sim.fabric`).

Faults (all seeded): per-link loss, duplication and reordering (random extra delay), links that
fail (drop everything) between two times, degraded links (a share of their rate), and failures
of a switch, a plane or a host NIC (every link of it). A discrete-event loop delivers frames
to the hosts' :class:`host.transport.api.Context` objects and runs their timers, so a run is a
pure function of its seed.

:class:`SwitchBench` is one switch of the same kind between test ports, its tables installed
from entries (:meth:`sim.switch.SwitchTables.of_entries`): the data-plane case table runs
against it (``tests/dataplane/targets_sim.py``). Both are a :class:`Network`: ports, switches,
host contexts and the event loop.

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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from host.transport import wire
from host.transport.api import Context
from p4src.contract import (
    ETHERTYPE_IPV6,
    HIGH_PRIORITY_DSCPS,
    ROCEV2_UDP_PORT,
    SRH_MAX_SEGMENTS,
    SRH_ROUTING_TYPE,
    DropReason,
    PortQosParams,
    member_index,
)
from sim.queues import PortQueue, QueuePolicy
from sim.switch import DROP_COUNTERS, NO_ROUTE, UN, Hop, SwitchTables
from topologies import Fabric
from topologies.config import control_queue_depth
from topologies.operating import HEADER_QUEUE_BYTES_FACTOR
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
_ROUTING = wire.IPPROTO_ROUTING
_INDEX_BITS = BLOCK_BITS + USID_BITS  # my_sid by the /48: the block and the first uSID
_INDEX_SHIFT = 128 - _INDEX_BITS
#: a frame at least this long, IPv6 without an SRH, holds every header the parser looks for
_WHOLE_HEADERS = wire.DATA_IMM_HEADER_LEN
_NOT_IPV6 = DROP_COUNTERS[DropReason.NOT_IPV6]
_PARSE_ERROR = DROP_COUNTERS[DropReason.PARSE_ERROR]
_SRH_INVALID = DROP_COUNTERS[DropReason.SRH_INVALID]
#: the bench's links: fast enough that an unshaped port sends at once
BENCH_RATE = 1e12
#: packets a port of the bench queues per class (no case fills it)
BENCH_QUEUE = 1024


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
    ecn_step: float = 0.0  #: ...and below it, the marking probability per packet above ecn_at
    #: threshold discipline: packets the high-priority queue holds (0: ``depth``)
    high_depth: int = 0

    def __post_init__(self) -> None:
        self.byte_time = 8 / self.rate
        if not self.high_depth:
            self.high_depth = self.depth
        self.name = f"{self.node}-eth{self.number}" if self.number else self.node


#: a next hop as the per-frame path reads it: the egress port (None: drop) and the MACs written
_Route = tuple["_Port | None", bytes]


class _Switch:
    """A switch's tables (:class:`sim.switch.SwitchTables`) as the per-frame path reads them,
    next hops with their egress ports resolved: the LPM probes of each table, and, when every
    prefix is a ``/48`` of one block (``my_sid`` also ``/128`` s: End SIDs) and no default
    entry is set -- the controller's tables -- the same tables by the active uSID alone."""

    __slots__ = ("name", "sids", "sid_default", "ecmp", "routes", "default_route", "block",
                 "sid16", "ecmp16", "routes16")  # fmt: skip

    def __init__(
        self, name: str, tables: SwitchTables, port_of: Callable[[int], _Port | None]
    ) -> None:
        def route(hop: Hop) -> _Route:
            return (port_of(hop.port) if hop.port >= 0 else None, hop.macs)

        self.name = name
        self.sids = tables.my_sid.probes
        self.sid_default = tables.my_sid_default
        groups = tables.ipv6_ecmp.map(lambda hops: tuple(route(h) for h in hops))
        routes = tables.ipv6_lpm.map(route)
        self.ecmp = groups.probes
        self.routes = routes.probes
        self.default_route = route(tables.ipv6_lpm_default)
        #: the block every prefix is in (None: the LPM probes decide every frame)
        self.block: bytes | None = None
        #: active uSID -> my_sid: the action of its /48 (0: none), and its /128s (End SIDs):
        #: (the bytes after the active uSID, action), compared in turn (few: one per switch)
        self.sid16: dict[int, tuple[int, tuple[tuple[bytes, int], ...]]] = {}
        self.ecmp16: dict[int, tuple[_Route, ...]] = {}
        self.routes16: dict[int, _Route] = {}
        sids, by_group, by_route = (
            tables.my_sid.by_length, groups.by_length, routes.by_length
        )  # fmt: skip
        if (
            set(sids) - {_INDEX_BITS, 128}
            or set(by_group) - {_INDEX_BITS}
            or set(by_route) - {_INDEX_BITS}
            or tables.my_sid_default
            or tables.ipv6_lpm_default != NO_ROUTE
        ):
            return
        full = sids.get(128, {})
        sid48 = sids.get(_INDEX_BITS, {})
        group48 = by_group.get(_INDEX_BITS, {})
        route48 = by_route.get(_INDEX_BITS, {})
        blocks = {key >> USID_BITS for key in (*sid48, *group48, *route48)}
        blocks |= {key >> (128 - BLOCK_BITS) for key in full}
        if len(blocks) != 1:
            return
        (block,) = blocks
        self.block = block.to_bytes(BLOCK_BITS // 8, "big")
        usid = (1 << USID_BITS) - 1
        ends: dict[int, dict[bytes, int]] = {}
        for key, action in full.items():
            rest = (key & ((1 << _INDEX_SHIFT) - 1)).to_bytes(_DST_END - _ARG, "big")
            ends.setdefault((key >> _INDEX_SHIFT) & usid, {})[rest] = action
        actives = {key & usid: action for key, action in sid48.items()}
        self.sid16 = {
            a: (actives.get(a, 0), tuple(ends.get(a, {}).items())) for a in {*actives, *ends}
        }
        self.ecmp16 = {key & usid: group for key, group in group48.items()}
        self.routes16 = {key & usid: hop for key, hop in route48.items()}


def _set_qos(port: _Port, qos: PortQosParams | None) -> None:
    """Give a switch port the thresholds of ``port_qos`` (None: ``NoAction``)."""
    if qos is None:
        port.trim_at = port.ecn_at = port.ecn_full = None
        port.to_host = False
        return
    port.trim_at, port.ecn_at = qos.trim_threshold, qos.ecn_threshold
    _set_red(port, qos.ecn_max_threshold, qos.ecn_slope)
    port.to_host = bool(qos.last_hop)


def _set_red(port: _Port, full: int | None, slope: int | None) -> None:
    """RED between the port's ECN threshold and ``full`` (None, or not above it: a fixed
    threshold), with probability ``slope`` / 65536 per packet above the threshold (None: one
    that reaches 1 at ``full``), as the program's ``ecn_max_threshold`` and ``ecn_slope``."""
    low = port.ecn_at
    if full is None or low is None or full <= low:
        port.ecn_full, port.ecn_step = None, 0.0
        return
    port.ecn_full = full
    port.ecn_step = 1 / (full - low) if slope is None else slope / 65536


class Network:
    """Ports, switches and host contexts in virtual time: the event loop, the queues and the
    switches' per-frame decisions, whatever built them (:class:`SimNet` from a fabric,
    :class:`SwitchBench` one switch between test ports)."""

    def __init__(
        self,
        *,
        seed: int = 0,
        queues: PortQueue | None = None,
        data_depth: bool = False,
        nic_slots: int | None = None,
        name: str = "the network",
    ) -> None:
        self.now = 0.0
        self._rng = random.Random(seed)
        self._heap: list[tuple[float, int, int, object, object]] = []
        self._seq = 0
        self._name = name
        #: the red discipline's port bounds (None: the threshold discipline)
        self.queues = queues
        #: data frames a host NIC holds (None: every frame the window allows, EVs chosen then)
        self.nic_slots = nic_slots
        #: threshold discipline: trim and ECN judge the data queue's depth alone (the P4
        #: program on BMv2's priority queues)
        self.data_depth = data_depth
        self._hosts: dict[str, Context] = {}
        self._host_timer: dict[str, float | None] = {}
        self._host_ports: dict[str, list[_Port]] = collections.defaultdict(list)
        self._ports: dict[tuple[str, int], _Port] = {}
        self._faults: dict[frozenset[str], LinkFaults] = {}
        #: nodes that are neither switch nor host: the frames that reach them wait here
        self._taps: dict[str, collections.deque[bytearray]] = {}
        self.counters: collections.Counter[str] = collections.Counter()

    # -- set-up ----------------------------------------------------------------------------------

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
            raise KeyError(f"no link between {a} and {b} in {self._name}") from None

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

    # -- the same faults as a scenario's phase drives them, at the current simulated time
    #    (experiments.faults.FaultTarget) ------------------------------------------------------

    def link_down(self, a: str, b: str) -> None:
        """Fail the link between ``a`` and ``b`` now, until :meth:`link_up`."""
        self.fail_link(a, b, self.now)

    def link_up(self, a: str, b: str) -> None:
        """Repair the link between ``a`` and ``b`` now (ends every failure still open)."""
        faults = self.faults(a, b)
        faults.down = [(s, min(e, self.now)) if s <= self.now else (s, e) for s, e in faults.down]

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
                        trim_bytes=red.trim_bytes,
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
        tc = _traffic_class(frame)
        dscp, ecn = tc >> 2, tc & 3
        # the program's priority: control and trimmed headers high (trimmed here or by an
        # earlier switch), the rest to the data queue
        high = dscp in HIGH_PRIORITY_DSCPS
        full = port.ecn_full
        if (
            port.trim_at is not None
            and dscp == wire.DSCP_TRIMMABLE
            and depth >= port.trim_at
            and self._trim(port, frame, ecn)
        ):
            high = True
        elif (
            port.ecn_at is not None
            and ecn in (1, 2)
            and depth >= port.ecn_at
            # RED as the P4 program's: every packet from ecn_full on, below it a probability
            # rising by ecn_step per packet of depth above the ECN threshold
            and (
                full is None
                or depth >= full
                or self._rng.random() < (depth - port.ecn_at) * port.ecn_step
            )
        ):
            frame[15] |= 0x30  # ECN bits of the traffic class -> CE
            port.counters["ecn_marked"] += 1
            self.counters["ecn_marked"] += 1
        if (len(port.high) >= port.high_depth) if high else (depth >= port.depth):
            port.counters["queue_full"] += 1
            self.counters["drop_queue_full"] += 1
            return
        if high:
            port.high.append(frame)
            port.high_bytes += len(frame)
        else:
            port.low.append(frame)
        if not port.busy:
            self._start(port)

    def _enqueue_plain(self, port: _Port, frame: bytearray) -> None:
        """Queue a frame ``ipv6_lpm``'s default action forwards: the program returns before
        priority, trimming and ECN, so it goes into the data queue as it came."""
        if port.red is not None:
            self._enqueue_red(port, port.red, frame)
            return
        depth = len(port.low) if self.data_depth else len(port.high) + len(port.low) + port.busy
        if depth >= port.depth:
            self._drop_full(port)
            return
        port.low.append(frame)
        if not port.busy:
            self._start(port)

    def _enqueue_red(self, port: _Port, bounds: PortQueue, frame: bytearray) -> None:
        """The reference's composite queue: trim only at a full data queue (the arriving packet
        or the newest queued one, a coin flip), headers and control at high priority."""
        size = len(frame)
        dscp = _traffic_class(frame) >> 2
        if dscp not in HIGH_PRIORITY_DSCPS:
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
        size = _wire_len(bounds, frame)
        if port.high_bytes + size > HEADER_QUEUE_BYTES_FACTOR * bounds.size_bytes:
            self._drop_full(port)
            return
        port.high.append(frame)
        port.high_bytes += size
        if not port.busy:
            self._start(port)

    def _drop_full(self, port: _Port) -> None:
        port.counters["queue_full"] += 1
        self.counters["drop_queue_full"] += 1

    def _start(self, port: _Port) -> None:
        if port.high:
            frame = port.high.popleft()
            size = _wire_len(port.red, frame)
            port.high_bytes -= size
            port.current_low = False
        else:
            frame = port.low.popleft()  # red: counted in low_bytes until it has left
            size = len(frame)
            port.current_low = True
        port.current = frame
        port.busy = True
        self._seq += 1
        heapq.heappush(
            self._heap, (self.now + size * port.byte_time, self._seq, _TXDONE, port, None)
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
        tap = self._taps.get(node)
        if tap is not None:
            tap.append(frame)
            return None
        self.counters["drop_no_host"] += 1
        return None

    def _switch(self, switch: _Switch, frame: bytearray) -> None:
        """One frame through a switch, as the P4 program's ingress decides it
        (docs/p4-pipeline.md), then into the chosen port's queue (:meth:`_enqueue`)."""
        counters = self.counters
        counters["switched"] += 1
        if len(frame) < _WHOLE_HEADERS or frame[12:14] != _IPV6_TYPE or frame[20] == _ROUTING:
            problem = _parse_problem(frame)
            if problem is not None:
                counters[problem] += 1
                return
        if frame[21] <= 1:
            counters["drop_hop_limit"] += 1
            return
        frame[21] -= 1
        block = switch.block
        if block is None or frame[_DST:_ACTIVE] != block:
            self._switch_lpm(switch, frame)
            return
        # the controller's tables, by the active uSID: my_sid (uN; End when the carrier is
        # exhausted here or the End SID matched), then ipv6_ecmp, else ipv6_lpm
        active = (frame[_ACTIVE] << 8) | frame[_ACTIVE + 1]
        sid = switch.sid16.get(active)
        if sid is not None:
            action, ends = sid
            rest = frame[_ARG:_DST_END]  # the carrier after the active uSID
            for end, end_action in ends:
                if rest == end:
                    action = end_action
                    break
        else:
            action = 0
        if action:
            if action == UN and rest != _ARG_ZERO:
                # uN: drop the active uSID, move the rest up, zero-fill (the bytes, in place)
                frame[_ACTIVE:_DST_END] = rest + _USID_ZERO
            elif frame[20] == _ROUTING and frame[57]:
                self._end(frame)
                if frame[_DST:_ACTIVE] != block:
                    self._forward_lpm(switch, frame, int.from_bytes(frame[_DST:_DST_END], "big"))
                    return
            else:
                counters["drop_sid_end"] += 1
                return
            active = (frame[_ACTIVE] << 8) | frame[_ACTIVE + 1]
        group = switch.ecmp16.get(active)
        if group is not None:
            route = group[_ecmp_member(frame, len(group))]
            counters["ecmp"] += 1
        else:
            found = switch.routes16.get(active)
            if found is None:
                self._forward_default(switch, frame)
                return
            route = found
        out, macs = route
        if out is None:
            counters["drop_no_route" if not macs else "drop_no_port"] += 1
            return
        frame[0:12] = macs
        self._enqueue(out, frame)

    @staticmethod
    def _end(frame: bytearray) -> None:
        """End, on a frame whose SRH passed the parser's checks and has segments left:
        segments left -= 1, the segment it now points at is the destination."""
        left = frame[57] - 1
        frame[57] = left
        at = 62 + 16 * left
        frame[_DST:_DST_END] = frame[at : at + 16]

    def _switch_lpm(self, switch: _Switch, frame: bytearray) -> None:
        """The rest of :meth:`_switch` by longest-prefix match, for any tables."""
        addr = int.from_bytes(frame[_DST:_DST_END], "big")
        for shift, sids in switch.sids:
            action = sids.get(addr >> shift)
            if action is not None:
                break
        else:
            action = switch.sid_default
        if action:
            if action == UN and frame[_ARG:_DST_END] != _ARG_ZERO:
                frame[_ACTIVE:_DST_END] = frame[_ARG:_DST_END] + _USID_ZERO
            elif frame[20] == _ROUTING and frame[57]:
                self._end(frame)
            else:
                self.counters["drop_sid_end"] += 1
                return
            addr = int.from_bytes(frame[_DST:_DST_END], "big")
        self._forward_lpm(switch, frame, addr)

    def _forward_lpm(self, switch: _Switch, frame: bytearray, addr: int) -> None:
        """ipv6_ecmp (a group's member by the hash), else ipv6_lpm, by longest-prefix match on
        the destination ``addr``; then into the egress port's queue."""
        route: _Route | None = None
        for shift, groups in switch.ecmp:
            group = groups.get(addr >> shift)
            if group is not None:
                route = group[_ecmp_member(frame, len(group))]
                self.counters["ecmp"] += 1
                break
        else:
            for shift, routes in switch.routes:
                route = routes.get(addr >> shift)
                if route is not None:
                    break
        if route is None:
            self._forward_default(switch, frame)
            return
        out, macs = route
        if out is None:
            self.counters["drop_no_route" if not macs else "drop_no_port"] += 1
            return
        frame[0:12] = macs
        self._enqueue(out, frame)

    def _forward_default(self, switch: _Switch, frame: bytearray) -> None:
        """A miss in ``ipv6_lpm``: its default action (``drop_no_route``, unless set)."""
        out, macs = switch.default_route
        if out is None:
            self.counters["drop_no_route" if not macs else "drop_no_port"] += 1
            return
        frame[0:12] = macs
        self._enqueue_plain(out, frame)


class SimNet(Network):
    """A fabric of trimming switches and links between the attached host contexts.

    Thresholds (the threshold discipline) are every switch port's: trim at ``trim_threshold``
    (None: half the queue; ``trim`` False: never), ECN at ``ecn_threshold`` (None: a quarter of
    it), RED up to ``ecn_max_threshold`` with ``ecn_slope`` (the program's ``set_port_qos``
    parameters; None: a fixed threshold, and a probability that reaches 1 there)."""

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
        ecn_slope: int | None = None,
    ) -> None:
        topo = fabric.topology
        super().__init__(
            seed=seed,
            queues=queues,
            data_depth=data_depth,
            nic_slots=nic_slots or (NIC_SLOTS if queues is not None else None),
            name=topo.name,
        )
        self.fabric = fabric
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
        # headers, ACKs and NACKs are small: their queue holds the reference's bytes
        high_depth = control_queue_depth(depth, topo.link_mtu)
        trim_at = (trim_threshold if trim_threshold is not None else depth // 2) if trim else None
        ecn_at = ecn_threshold if ecn_threshold is not None else max(1, depth // 4)
        if queues is not None:
            trim_at = None if not queues.trim else 0
        hosts = frozenset(h.name for h in fabric.hosts)
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
                high_depth=0 if a_host else high_depth,
            )  # fmt: skip
            if not a_host:
                _set_red(port_a, ecn_max_threshold, ecn_slope)
            self._ports[(link.a, a_key)] = port_a
            if a_host:
                self._host_ports[link.a].append(port_a)
            b_peer_port = link.plane if a_host else link.a_port
            self._ports[(link.b, link.b_port)] = _Port(
                link.b, link.b_port, link.a, b_peer_port, rate, b_delay, depth, trim_at, ecn_at,
                faults, queues, False, a_host, high_depth=high_depth,
            )  # fmt: skip
            _set_red(self._ports[(link.b, link.b_port)], ecn_max_threshold, ecn_slope)
        # what each switch forwards by: the controller's tables, from the fabric model
        switches: dict[str, _Switch] = {}
        for sw in fabric.switches:
            ports = {p.number: self._ports[(sw.name, p.number)] for p in sw.ports}
            switches[sw.name] = _Switch(sw.name, SwitchTables.of_fabric(fabric, sw), ports.get)
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

    # -- faults of the fabric's nodes (times in seconds of simulated time) ------------------------

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


class SwitchBench(Network):
    """One switch of the sim between test ports, its tables installed from entries: the switch
    as a data-plane test drives it (``tests/dataplane/targets_sim.py``).

    Switch port ``n`` (of ``ports``) links to a test port: a frame sent in on ``n`` crosses that
    link into the switch; one the switch sends out of ``n`` waits at the test port until taken.
    Links have no delay; a port of ``rates`` (bit/s) sends at that rate, the others at
    :data:`BENCH_RATE` (at once). The queues are the threshold discipline's as the program
    reads them (``data_depth``), each class holding ``queue_depth`` packets. Time is
    simulated: :meth:`take` runs the network until a frame reaches the test port or nothing is
    left to happen.
    """

    SWITCH = "switch"

    def __init__(
        self,
        ports: Sequence[int],
        *,
        rates: Mapping[int, float] | None = None,
        queue_depth: int = BENCH_QUEUE,
        seed: int = 0,
    ) -> None:
        super().__init__(seed=seed, data_depth=True, name="the switch bench")
        rates = dict(rates or {})
        for n, rate in rates.items():
            if n not in ports or rate <= 0:
                raise ValueError(
                    f"rate of port {n}: {rate}; expected one of ports {list(ports)}, > 0"
                )
        self._stand_ins: dict[int, bytearray] = {}  # id -> a packet that only fills a queue
        self._stand_ins_sent: collections.Counter[int] = collections.Counter()
        for n in ports:
            if not 0 < n < 512:
                raise ValueError(f"switch port {n}: expected 1..511 (a bit<9> port number)")
            tester = self._tester(n)
            faults = self._faults.setdefault(frozenset((self.SWITCH, tester)), LinkFaults())
            self._ports[(self.SWITCH, n)] = _Port(
                self.SWITCH, n, tester, 0, rates.get(n, BENCH_RATE), 0.0, queue_depth,
                None, None, faults, None, False, False,
            )  # fmt: skip
            self._ports[(tester, 0)] = _Port(
                tester, 0, self.SWITCH, n, BENCH_RATE, 0.0, HOST_QUEUE, None, None, faults, None,
                False, False,
            )  # fmt: skip
            self._taps[tester] = collections.deque()
        self.ports = tuple(ports)
        self.install(SwitchTables())

    @staticmethod
    def _tester(port: int) -> str:
        return f"test{port}"

    def _port(self, port: int) -> _Port:
        try:
            return self._ports[(self.SWITCH, port)]
        except KeyError:
            raise KeyError(f"the switch bench has no port {port} (ports {self.ports})") from None

    def install(self, tables: SwitchTables) -> None:
        """Make ``tables`` the switch's: its forwarding, and its ports' ``port_qos``."""
        node = _Switch(self.SWITCH, tables, lambda n: self._ports.get((self.SWITCH, n)))
        for n in self.ports:
            _set_qos(self._port(n), tables.qos(n))
            self._ports[(self._tester(n), 0)].peer_switch = node

    def send(self, port: int, frame: bytes | bytearray) -> None:
        """Send ``frame`` into the switch on ``port`` (it arrives once the network runs)."""
        self._port(port)
        self._enqueue(self._ports[(self._tester(port), 0)], bytearray(frame))

    def take(self, port: int) -> bytes | None:
        """The next frame the switch sent out of ``port``: run the network until one reaches
        the test port (None: none will, nothing is left to happen)."""
        self._port(port)
        waiting = self._taps[self._tester(port)]
        while True:
            if not waiting:
                self.run(float("inf"), stop=lambda: bool(waiting))
            if not waiting:
                return None
            frame = waiting.popleft()
            if self._stand_ins.pop(id(frame), None) is None:
                return bytes(frame)
            self._stand_ins_sent[port] += 1

    def hold(self, port: int, packets: int) -> None:
        """Make the data queue of the idle ``port`` hold ``packets`` stand-in packets, which
        leave (and are never taken) before anything queued after them: the depth the
        program's ``port_qdepth`` and ``port_arrivals`` registers say when written."""
        out = self._port(port)
        if out.busy or out.high or any(id(f) not in self._stand_ins for f in out.low):
            raise RuntimeError(f"port {port} of the switch bench is busy: hold() needs it idle")
        if packets < 0:
            raise ValueError(f"{packets} packets: expected a depth >= 0")
        while len(out.low) > packets:
            del self._stand_ins[id(out.low.pop())]
        while len(out.low) < packets:
            stand_in = bytearray(64)
            self._stand_ins[id(stand_in)] = stand_in
            out.low.append(stand_in)

    def held(self, port: int) -> int:
        """Stand-in packets still in ``port``'s queue."""
        return sum(id(f) in self._stand_ins for f in self._port(port).low)

    def counts(self, port: int) -> dict[str, int]:
        """What switch port ``port`` counted: ``in`` (frames that arrived on it), ``out``
        (frames it sent, stand-ins not counted), ``trimmed``, ``ecn_marked``, ``queue_full``."""
        out = self._port(port)
        return {
            "in": self._ports[(self._tester(port), 0)].tx,
            "out": out.tx - self._stand_ins_sent[port],
            "trimmed": out.counters["trimmed"],
            "ecn_marked": out.counters["ecn_marked"],
            "queue_full": out.counters["queue_full"],
        }


_ARRIVE, _TXDONE, _TIMER, _PUMP = range(4)


def _ecmp_member(frame: bytearray, members: int) -> int:
    """The uplink (0-based, spine order) the switches' ECMP hash gives this IPv6 frame."""
    flow = int.from_bytes(frame[15:18], "big") & 0xFFFFF
    src = int.from_bytes(frame[22:38], "big")
    dst = int.from_bytes(frame[38:54], "big")
    udp = _udp_offset(frame)
    sport = int.from_bytes(frame[udp : udp + 2], "big") if udp >= 0 else 0
    return member_index(src, dst, flow, sport, members)


def _parse_problem(frame: bytearray) -> str | None:
    """The drop counter of a frame the program's parser refuses or finds not IPv6 (None: it
    parses): Ethernet, IPv6, the SRH (routing type 4, at most four segments, its length and
    segments left consistent, RFC 8754's reduced SRH allowed), UDP, and for UDP port 4791 the
    BTH, and the RETH (ImmDt) and MRC data extension of a WRITE. A header cut short is a
    PARSE_ERROR."""
    n = len(frame)
    if n < 14:
        return _PARSE_ERROR
    if frame[12:14] != _IPV6_TYPE:
        return _NOT_IPV6
    if n < wire.OFF_UDP:
        return _PARSE_ERROR
    nh, off = frame[20], wire.OFF_UDP
    if nh == _ROUTING:
        if n < off + 8:
            return _PARSE_ERROR
        ext_len, rtype, left, last = frame[off + 1], frame[off + 2], frame[off + 3], frame[off + 4]
        if (
            rtype != SRH_ROUTING_TYPE
            or last >= SRH_MAX_SEGMENTS
            or ext_len != 2 * (last + 1)
            or left > last + 1
        ):
            return _SRH_INVALID
        nh, off = frame[off], off + 8 + 16 * (last + 1)
        if n < off:
            return _PARSE_ERROR
    if nh == wire.IPPROTO_UDP:
        if n < off + wire.UDP_LEN:
            return _PARSE_ERROR
        if frame[off + 2 : off + 4] == _ROCE_PORT:
            ext = off - wire.OFF_UDP
            if n < wire.OFF_BTH + ext + wire.BTH_LEN:
                return _PARSE_ERROR
            opcode = frame[wire.OFF_BTH + ext]
            if (opcode == wire.OP_WRITE_ONLY and n < wire.DATA_HEADER_LEN + ext) or (
                opcode == wire.OP_WRITE_ONLY_IMM and n < wire.DATA_IMM_HEADER_LEN + ext
            ):
                return _PARSE_ERROR
    return None


def _udp_offset(frame: bytearray) -> int:
    """Offset of the UDP header of an IPv6 frame (after the SRH if there is one; -1 when the
    frame holds no UDP)."""
    nh, off = frame[20], wire.OFF_UDP
    if nh == wire.IPPROTO_ROUTING and len(frame) >= off + 8:
        nh, off = frame[off], off + 8 + frame[off + 1] * 8
    return off if nh == wire.IPPROTO_UDP else -1


_TRIMMED_DSCPS = frozenset((wire.DSCP_TRIMMED, wire.DSCP_TRIMMED_LAST_HOP))


def _traffic_class(frame: bytearray) -> int:
    """The IPv6 traffic class of ``frame`` (DSCP << 2 | ECN); 0 for a frame too short to hold an
    IPv6 header."""
    return ((frame[14] & 0x0F) << 4) | (frame[15] >> 4) if len(frame) >= 54 else 0


def _wire_len(bounds: PortQueue | None, frame: bytearray) -> int:
    """Bytes ``frame`` takes on the wire and in a high-priority queue: its length, or for a
    trimmed header the queue model's ``trim_bytes`` when it sets one."""
    if bounds is None or bounds.trim_bytes is None:
        return len(frame)
    if _traffic_class(frame) >> 2 in _TRIMMED_DSCPS:
        return bounds.trim_bytes
    return len(frame)


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
