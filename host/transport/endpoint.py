"""Endpoint requests of a context: connectionless EV probes and port status updates, after the
OCP controller API's ``mrc_ctl_ep_batch_send_wait`` (no I/O).

A request is addressed by source (one of this host's NIC addresses), destination (a NIC
address) and EV, in an EV format: SRV6 sends to the EV's uSID carrier, SRV6+SRH (the EV
``carrier << 128 | segment``) to the carrier with a reduced SRH holding the segment, built as
data frames with an SRH are (:func:`wire.frame_prefix`), STEV and UDP to the destination's
plain address with the EV in the flow label and UDP source port (the switches' ECMP picks the
path). The responder answers from the NIC the request reached, to the requester's plain
address (no SRH, whatever the request carried), with the request's flow label and UDP source
port, and writes into the response the time between the request's arrival and the response's
departure (its service time), which the requester subtracts from the round trip.

A batch (:class:`EpBatch`) collects the responses in arrival order until every request is
answered or its timeout passes; a response to no batch that is waiting is dropped
(``unknown_ep_response``): responses are not buffered between batches.

Port status: when a NIC of this host goes down (the driver calls
:meth:`Endpoint.set_port_state`), every EV of its plane is retired at once and a port status
update (the mask of ports up) is sent to every peer; a peer retires its EVs towards this host on
the ports the mask says are down and probes them again when a later update says they are up.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from host.transport import wire
from host.transport.events import EndpointResponse, PortStatusChanged, PortStatusRefused
from host.transport.evs import EvFormat, EvFormatProfile, EvProfileError, format_profile
from host.transport.qp_state import NS, Shared

if TYPE_CHECKING:
    from host.transport.qp import QueuePair
    from topologies import Path

STEV = EvFormatProfile(EvFormat.STEV)
OPS = {"ev_probe": wire.EP_OP_EV_PROBE, "port_status_update": wire.EP_OP_PORT_STATUS}
OP_NAMES = {v: k for k, v in OPS.items()}
#: request ids the context uses for its own port status updates (a batch may not use them)
INTERNAL_REQ_IDS = range(0xFF00, 0x10000)
#: copies of a port status update sent to each peer at a time (on different planes when it can)
PORT_STATUS_COPIES = 2
#: rounds of copies sent to a peer that has not answered, the gap growing fourfold from
#: ``interval`` (the last of 8 comes about 22,000 intervals after the first)
PORT_STATUS_ROUNDS = 8


class EndpointError(ValueError):
    """A request that cannot be sent (names the request and the field); ``index`` is the
    failing request's place in its batch, when a batch was sent."""

    def __init__(self, message: str, index: int | None = None) -> None:
        super().__init__(message)
        self.index = index


@dataclass(frozen=True)
class SpineRoutes:
    """What a host knows of its SRV6 paths between racks, so that an SRV6 request's response
    comes back through the spine the request went through (the path probed, both ways) instead
    of wherever the responder's leaf hashes a plain address: the spine of each carrier this
    host sends to (the plain carrier and the SRH split's outer one), and this host's carrier to
    each other host's NIC through each spine. Built from the fabric model's paths
    (:meth:`from_paths`); a context without it answers to the plain address."""

    spine_of: dict[bytes, int] = field(default_factory=dict)  #: carrier -> spine
    via: dict[tuple[bytes, int], bytes] = field(default_factory=dict)  #: (NIC, spine) -> carrier
    #: every other host's NIC address -> (host, plane): the destinations a request may name
    #: (empty: any address, on any plane)
    peers: dict[bytes, tuple[str, int]] = field(default_factory=dict)

    @classmethod
    def from_paths(cls, paths: Iterable[Path]) -> SpineRoutes:
        """The table of ``paths`` (every path from this host to the others)."""
        routes = cls()
        for path in paths:
            routes.peers[path.dst_nic.address.packed] = (path.dst, path.dst_nic.plane)
            if path.spine is None:
                continue  # within a rack: one way only
            routes.spine_of[path.carrier.packed] = path.spine
            routes.spine_of[path.srh_carrier.packed] = path.spine
            routes.via[(path.dst_nic.address.packed, path.spine)] = path.carrier.packed
        return routes


@dataclass(frozen=True)
class EpRequest:
    """One endpoint request (``mrc_ctl_ep_req``), its fields checked one by one; whether they
    make sense together on this host (the source is one of its NICs, the port is the source's)
    is the context's to check when the request is sent. :meth:`parse` takes addresses as text
    and formats by name. Errors are :class:`EndpointError` naming the field."""

    req_id: int  #: 16-bit id, unique among the requests waiting
    #: this host's NIC address; the unspecified address (``::``) picks the NIC on the
    #: destination's plane
    sgid: ipaddress.IPv6Address
    dgid: ipaddress.IPv6Address  #: the destination NIC's address
    #: the EV: 32-bit (STEV), 16-bit (UDP), the 128-bit uSID carrier (SRV6), or with an SRH the
    #: 256-bit ``carrier << 128 | segment`` (SRV6+SRH)
    ev: int
    ev_fmt: EvFormatProfile = STEV  #: the EV format (``srh`` for SRV6+SRH)
    port: int | None = None  #: mrc_ctl_ev.port (1-based); default the port of ``sgid``
    port_status: int = 0  #: port status updates: the mask of ports up (bit N: port N)

    def __post_init__(self) -> None:
        _check_int("req_id", self.req_id, 0xFFFF)
        for name in ("sgid", "dgid"):
            if not isinstance(getattr(self, name), ipaddress.IPv6Address):
                raise EndpointError(
                    f"field '{name}': expected an IPv6Address (EpRequest.parse takes text)"
                )
        if not isinstance(self.ev_fmt, EvFormatProfile):
            raise EndpointError(
                "field 'ev_fmt': expected an EvFormatProfile (EpRequest.parse takes names)"
            )
        _check_int("ev", self.ev, None)  # its width is the format's, below
        fmt = self.ev_fmt
        if fmt.mode is EvFormat.SRV6:
            if fmt.srh and (self.ev >> 256 or not self.ev >> 128 or not self.ev & ((1 << 128) - 1)):
                raise EndpointError(
                    f"field 'ev': req_id {self.req_id}: an SRV6+SRH EV is a 128-bit carrier and "
                    "a 128-bit SRH segment (carrier << 128 | segment, neither zero)"
                )
            if not fmt.srh and self.ev >> 128:
                raise EndpointError(
                    f"field 'ev': req_id {self.req_id}: an SRV6 EV is a 128-bit carrier"
                )
        else:
            top = 32 if fmt.mode is EvFormat.STEV else 16
            if self.ev >> top:
                raise EndpointError(
                    f"field 'ev': req_id {self.req_id}: a {fmt.mode.value} EV has {top} bits"
                )
        if self.port is not None:
            _check_int("port", self.port, 255, low=1)
        _check_int("port_status", self.port_status, (1 << 32) - 1)

    @classmethod
    def parse(
        cls, req_id: int, sgid: object, dgid: object, ev: int, ev_fmt: object = STEV,
        port: int | None = None, port_status: int = 0,
    ) -> EpRequest:  # fmt: skip
        """A request from addresses given as text, bytes or addresses and a format given by
        name (``srv6``, ``srv6+srh``, ``stev``, ``udp``) or as an EvFormat / EvFormatProfile."""
        try:
            fmt = format_profile(ev_fmt)
        except EvProfileError as exc:
            raise EndpointError(f"field 'ev_fmt': req_id {req_id}: {exc}") from None
        return cls(req_id, _address("sgid", sgid), _address("dgid", dgid), ev, fmt, port,
                   port_status)  # fmt: skip


def _check_int(name: str, value: object, high: int | None, low: int = 0) -> None:
    """Refuse a field that is not an integer in ``low..high`` (``high`` None: no bound)."""
    if (
        isinstance(value, bool) or not isinstance(value, int) or value < low
        or (high is not None and value > high)
    ):  # fmt: skip
        bounds = f"in {low}..{high}" if high is not None else f">= {low}"
        raise EndpointError(f"field '{name}': expected an integer {bounds}, got {value!r}")


def _address(name: str, value: object) -> ipaddress.IPv6Address:
    """An address given as an address, 16 bytes or text (EndpointError naming ``name``)."""
    if isinstance(value, ipaddress.IPv6Address):
        return value
    try:
        if isinstance(value, bytes | bytearray):
            return ipaddress.IPv6Address(bytes(value))
        return ipaddress.IPv6Address(str(value))
    except ValueError:
        raise EndpointError(f"field '{name}': {value!r}: expected an IPv6 address") from None


@dataclass
class EpBatch:
    """A batch of requests of one operation and the responses that came back, in order."""

    op: str
    requests: tuple[EpRequest, ...]
    sent: float  #: protocol time
    deadline: float  #: protocol time
    dilation: float
    responses: list[EndpointResponse] = field(default_factory=list)

    @property
    def deadline_driver(self) -> float:
        """The timeout in the driver's clock."""
        return self.deadline * self.dilation

    def complete(self) -> bool:
        """Every request answered."""
        return len(self.responses) >= len(self.requests)


class Endpoint:
    """Endpoint requests and responses, and port status, of one context."""

    def __init__(
        self, host: str, nics: dict[int, Any], shared: Shared,
        qps: Callable[[], Iterator[QueuePair]], hop_limit: int, interval: float = 8e-6,
        routes: SpineRoutes | None = None,
    ) -> None:  # fmt: skip
        self.host = host
        self.routes = routes or SpineRoutes()
        self.nics = nics
        self._shared = shared
        self._qps = qps
        self._hop_limit = hop_limit
        self._by_address = {_packed(nic.address): plane for plane, nic in nics.items()}
        #: per plane: the NIC's address, its MAC and its gateway's (what every prefix starts with)
        self._nic_bytes = {
            plane: (_packed(nic.address), wire.mac_bytes(nic.mac), wire.mac_bytes(nic.gateway_mac))
            for plane, nic in nics.items()
        }
        self.ports_up: set[int] = set(nics)
        #: (req_id) -> (batch or None for the context's own updates, request, sent)
        self._waiting: dict[int, tuple[EpBatch | None, int, float]] = {}
        self._responses: list[tuple[bytearray, float]] = []  # sent, service time to write
        self._next_internal = INTERNAL_REQ_IDS.start
        self._interval = interval
        #: peer host -> (rounds sent, next round due) of the port status update not yet answered
        self._status_due: dict[str, tuple[int, float]] = {}
        self._status_peer: dict[int, str] = {}  # internal request id -> peer host

    # -- requests --------------------------------------------------------------------------------

    def batch(
        self, op: str, requests: Sequence[EpRequest], dscp: int, timeout: float, now: float,
        dilation: float,
    ) -> EpBatch:  # fmt: skip
        """Send ``requests`` (all of operation ``op``) now; see :class:`EpBatch`."""
        if op not in OPS:
            raise EndpointError(f"endpoint operation {op!r}: expected one of {', '.join(OPS)}")
        if not 0 <= dscp < 64:
            raise EndpointError(f"request DSCP {dscp}: expected 0..63")
        if not requests:
            raise EndpointError("an endpoint batch needs at least one request")
        seen: set[int] = set()
        for i, r in enumerate(requests):
            if r.req_id >= INTERNAL_REQ_IDS.start or r.req_id in self._waiting:
                raise EndpointError(
                    f"request id {r.req_id}: expected 0..{INTERNAL_REQ_IDS.start - 1}, unique "
                    "among the requests waiting",
                    index=i,
                )
            if r.req_id in seen:
                raise EndpointError(
                    f"request ids must be unique in a batch ({r.req_id} twice)", index=i
                )
            seen.add(r.req_id)
        frames = []
        for i, r in enumerate(requests):
            try:
                frames.append(self._request_frame(self.resolve(r, op), OPS[op], dscp, now))
            except EndpointError as exc:
                raise EndpointError(str(exc), index=i) from None
        batch = EpBatch(op, tuple(requests), now, now + timeout, dilation)
        for r, (plane, frame) in zip(requests, frames, strict=True):
            self._shared.outbox.append((plane, frame))
            self._waiting[r.req_id] = (batch, OPS[op], now)
        self._count_sent(*(frame for _, frame in frames))
        return batch

    def resolve(self, r: EpRequest, op: str = "ev_probe") -> EpRequest:
        """``r`` checked against this host: its source is one of the host's NICs (the
        unspecified address: the NIC on the destination's plane), its port the source's, its
        destination another host's NIC on the same plane (when the fabric's hosts are known:
        planes are disjoint), a port status update's mask only of this host's ports."""
        dst = r.dgid.packed
        peer = self.routes.peers.get(dst)
        if self.routes.peers and (peer is None or peer[0] == self.host):
            raise EndpointError(
                f"req_id {r.req_id}: dgid {r.dgid} is not another testbed host's NIC"
            )
        if not r.sgid.packed.strip(b"\0"):
            if peer is None:
                raise EndpointError(f"req_id {r.req_id}: sgid :: needs a known destination")
            r = dataclasses.replace(r, sgid=_address("sgid", self.nics[peer[1]].address))
        plane = self._by_address.get(r.sgid.packed)
        if plane is None:
            raise EndpointError(f"req_id {r.req_id}: sgid {r.sgid} is no NIC of {self.host}")
        if peer is not None and peer[1] != plane:
            raise EndpointError(
                f"req_id {r.req_id}: sgid is on port {plane + 1}, dgid on port {peer[1] + 1} "
                "(planes are disjoint)"
            )
        if r.port is not None and r.port != plane + 1:
            raise EndpointError(
                f"req_id {r.req_id}: port {r.port} is not sgid's (port {plane + 1})"
            )
        if op == "port_status_update" and r.port_status & ~self._all_ports():
            raise EndpointError(
                f"req_id {r.req_id}: port_status {r.port_status:#x}: {self.host} has ports "
                f"1..{len(self.nics)}"
            )
        return r

    def _all_ports(self) -> int:
        return sum(1 << (plane + 1) for plane in self.nics)

    def _request_frame(self, r: EpRequest, op: int, dscp: int, now: float) -> tuple[int, bytearray]:
        fmt = r.ev_fmt
        mode = fmt.mode
        plane = self._by_address[r.sgid.packed]
        segment: bytes | None = None
        if mode is EvFormat.SRV6:
            # the carrier, with an SRH followed by the segment; the low 32 bits are the wire EV
            raw = r.ev.to_bytes(32 if fmt.srh else 16, "big")
            dst, segment = raw[:16], (raw[16:] or None)
            wire_ev = r.ev & 0xFFFFFFFF
            outer = wire.ev_outer(wire_ev, wire.EV_MODE_SRV6)
        else:
            dst = r.dgid.packed
            wire_ev = r.ev
            outer = wire.ev_outer(r.ev, mode.value)
        prefix = self._prefix(plane, dst, dscp, outer, segment)
        spine = self.routes.spine_of.get(dst, wire.NO_SPINE) if mode is EvFormat.SRV6 else None
        frame = wire.encode_endpoint(
            prefix, False, op, plane, wire_ev, int(now * NS), r.req_id, r.port_status,
            spine_hint=wire.NO_SPINE if spine is None else spine,
        )  # fmt: skip
        return plane, frame

    def _prefix(
        self, plane: int, dst: bytes, dscp: int, outer: tuple[int, int],
        srh: bytes | None = None,
    ) -> bytes:  # fmt: skip
        """The frame prefix from ``plane``'s NIC to ``dst``, with a reduced SRH holding the
        segment ``srh`` when given (as a data frame on an SRV6+SRH EV has)."""
        src, src_mac, gateway_mac = self._nic_bytes[plane]
        return wire.frame_prefix(
            src_mac=src_mac, dst_mac=gateway_mac, src=src, dst=dst, dscp=dscp,
            ecn=wire.ECN_NOT_ECT, ev=0, hop_limit=self._hop_limit, outer=outer, srh=srh,
        )  # fmt: skip

    def _count_sent(self, *frames: bytes | bytearray) -> None:
        stats = self._shared.stats
        stats.ep_requests_sent += len(frames)
        stats.packets_sent += len(frames)
        stats.bytes_sent += sum(len(frame) for frame in frames)

    # -- the wire ----------------------------------------------------------------------------------

    def on_packet(self, pkt: wire.EndpointPacket, plane: int, now: float) -> None:
        """An endpoint request (answer it) or response (match it to its batch)."""
        if pkt.response:
            self._on_response(pkt, plane, now)
            return
        out = pkt.outer
        # an SRV6 request says which spine it came through: back through the same one
        back = self.routes.via.get((out.src, pkt.spine_hint), out.src)
        prefix = self._prefix(plane, back, wire.DSCP_CONTROL, (out.flow_label, out.udp_sport))
        frame = wire.encode_endpoint(
            prefix, True, pkt.op, pkt.plane_hint, pkt.ev, pkt.timestamp, pkt.req_id,
            self.port_mask(),
        )  # fmt: skip
        self._shared.outbox.append((plane, frame))
        self._responses.append((frame, now))
        stats = self._shared.stats
        stats.ep_requests_answered += 1
        stats.packets_sent += 1
        stats.bytes_sent += len(frame)
        if pkt.op == wire.EP_OP_PORT_STATUS:
            self._peer_status(out.src, pkt.port_status, plane, now)

    def departing(self, now: float) -> None:
        """Write the service time into the responses leaving now (``frames_to_send``)."""
        if not self._responses:
            return
        for frame, arrived in self._responses:
            wire.set_service_time(frame, int((now - arrived) * NS))
        self._responses.clear()

    def _on_response(self, pkt: wire.EndpointPacket, plane: int, now: float) -> None:
        found = self._waiting.get(pkt.req_id)
        if found is None or found[1] != pkt.op:
            self._shared.stats.drops["unknown_ep_response"] += 1
            return
        batch, op, sent = found
        del self._waiting[pkt.req_id]
        peer = self._status_peer.pop(pkt.req_id, None)
        if peer is not None:
            self._status_due.pop(peer, None)  # the peer has the update
        self._shared.stats.ep_responses_received += 1
        adjusted = bool(pkt.flags & wire.EP_FLAG_SVC_TIME)
        rtt = max(0.0, now - sent - (pkt.service_ns / NS if adjusted else 0.0))
        event = EndpointResponse(
            pkt.req_id, OP_NAMES[op], plane + 1, rtt, int(rtt * NS), adjusted, now
        )
        if batch is not None:
            batch.responses.append(event)
        self._shared.events.append(event)

    def expire(self, batch: EpBatch) -> None:
        """Forget the requests of ``batch`` still waiting (its timeout passed)."""
        for r in batch.requests:
            found = self._waiting.get(r.req_id)
            if found is not None and found[0] is batch:
                del self._waiting[r.req_id]

    # -- port status ------------------------------------------------------------------------------

    def port_mask(self) -> int:
        """The ports (1-based) of this host that are up, as a mask (bit N: port N)."""
        mask = 0
        for plane in self.ports_up:
            mask |= 1 << (plane + 1)
        return mask

    def set_port_state(self, plane: int, up: bool, now: float) -> int:
        """A NIC went down or came up: retire (or probe again) its plane's EVs of every QP
        that retires EVs, and tell every peer. Returns the EVs changed."""
        if plane not in self.nics:
            raise EndpointError(f"plane {plane}: {self.host} has no NIC there")
        if (plane in self.ports_up) == up:
            return 0
        (self.ports_up.add if up else self.ports_up.discard)(plane)
        (self._shared.ports_down.discard if up else self._shared.ports_down.add)(plane)
        changed = 0
        for qp in self._qps():
            if qp.policy.failover:
                changed += qp.set_plane(plane, up, "port_up" if up else "port_down", now)
        self._shared.events.append(PortStatusChanged(self.host, plane, up, changed, now))
        for req_id in list(self._status_peer):  # an earlier update is moot
            self._waiting.pop(req_id, None)
        self._status_peer.clear()
        self._status_due = dict.fromkeys(self._peers(), (0, now))
        self.handle_timer(now)
        return changed

    def _peers(self) -> dict[str, QueuePair]:
        """The peers this host talks to: those of QPs that carried traffic (an agent has QPs
        to every host of the fabric, running or not)."""
        peers: dict[str, QueuePair] = {}
        for qp in self._qps():
            if qp.carried_traffic:
                peers.setdefault(qp.remote_host, qp)
        return peers

    def next_timer(self) -> float | None:
        """When the next round of unanswered port status updates is due (protocol time)."""
        if not self._status_due:
            return None
        return min((due for _, due in self._status_due.values()), default=None)

    def handle_timer(self, now: float) -> None:
        """Send the port status update again to every peer that has not answered (each round
        on new EVs, so that ECMP hashes it onto other paths; the gap growing fourfold from
        ``interval``), at most PORT_STATUS_ROUNDS rounds."""
        if not self._status_due:
            return
        peers = self._peers()
        for peer, (rounds, due) in list(self._status_due.items()):
            if due > now:
                continue
            qp = peers.get(peer)
            if qp is None or rounds >= PORT_STATUS_ROUNDS:
                del self._status_due[peer]
                continue
            self._send_status(qp, now)
            # backing off: a peer that is gone (no agent) costs a few rounds, not a timer
            # every probe_interval
            self._status_due[peer] = (rounds + 1, now + self._interval * (4**rounds))

    def _send_status(self, qp: QueuePair, now: float) -> None:
        """A round of port status updates to ``qp``'s peer: PORT_STATUS_COPIES copies on
        planes that are up, each on an EV of its own (internal request ids)."""
        mask = self.port_mask()
        sent = 0
        last = -1
        for path in qp.paths:
            if sent >= PORT_STATUS_COPIES:
                break
            if path.plane not in self.ports_up or (sent and path.plane == last):
                continue
            last = path.plane
            req_id = self._next_internal
            self._next_internal += 1
            if self._next_internal >= INTERNAL_REQ_IDS.stop:
                self._next_internal = INTERNAL_REQ_IDS.start
            ev = 0x5000_0000 | (req_id & 0xFFFF)  # an EV per copy: ECMP hashes each its way
            r = EpRequest.parse(req_id, path.src_nic.address, path.dst_nic.address, ev,
                                port_status=mask)  # fmt: skip
            plane, frame = self._request_frame(r, wire.EP_OP_PORT_STATUS, wire.DSCP_CONTROL, now)
            self._shared.outbox.append((plane, frame))
            self._waiting[req_id] = (None, wire.EP_OP_PORT_STATUS, now)
            self._status_peer[req_id] = qp.remote_host
            self._count_sent(frame)
            sent += 1

    def _peer_status(self, address: bytes, mask: int, arrived: int, now: float) -> None:
        """A peer's port status: its ports that are down carry nothing of ours; those up again
        are probed back. Only the QPs whose peer has the update's source address take it (a
        source that is no QP's peer is counted, ``port_status_not_from_peer``), and an update
        whose mask says the port it ``arrived`` on is down is refused whole (a peer sends its
        updates on ports that are up; such a mask would take every EV away): counted,
        ``port_status_refused``, and reported (:class:`PortStatusRefused`, which the agent
        logs for the operator)."""
        text = str(ipaddress.IPv6Address(address))
        qps = [qp for qp in self._qps() if address in qp.peer_addresses]
        drops = self._shared.stats.drops
        if not qps:
            drops["port_status_not_from_peer"] += 1
            return
        if not mask >> (arrived + 1) & 1:
            drops["port_status_refused"] += 1
            self._shared.events.append(
                PortStatusRefused(text, mask, arrived, "arrival_port_down", now)
            )
            return
        for qp in qps:
            if not qp.policy.failover:
                continue
            for plane in sorted({p.plane for p in qp.paths}):
                up = bool(mask >> (plane + 1) & 1)
                changed = qp.set_plane(plane, up, "peer_port_up" if up else "peer_port_down", now)
                if changed:
                    self._shared.events.append(PortStatusChanged(text, plane, up, changed, now))

    def plane_down(self, plane: int) -> bool:
        """True while this host's NIC of ``plane`` is down."""
        return plane not in self.ports_up

    def waiting(self) -> int:
        """Requests waiting for a response."""
        return len(self._waiting)


def _packed(address: object) -> bytes:
    if isinstance(address, bytes) and len(address) == 16:
        return address
    return _address("address", address).packed
