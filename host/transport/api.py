"""The public API of the MRC host stack and its driver interface (sans-IO).

A :class:`Context` is one host's transport: its NICs (one per plane), registered memory
regions, completion queues and queue pairs. It mirrors the OCP MRC API concepts (context, QP,
CQ, post WRITE / WRITE_IMM, poll; EV profiles, EV states, probes, CC profiles) and is driven
like aioquic's connection: the driver passes frames and the time in, and takes frames, timers
and events out. Nothing here opens a socket or reads a clock. See docs/host-stack.md.

Time dilation happens here and only here: the driver passes its own clock, the context runs
the core on protocol time = driver time / ``config.dilation`` (real-fabric seconds, the unit of
every timer in :class:`host.transport.config.StackConfig` and of the congestion control's
parameters), and every time it hands back (timers, event and completion times, RTTs in
statistics) is in the driver's clock again.
"""

from __future__ import annotations

import collections
import dataclasses
import heapq
import random
from collections.abc import Iterable, Sequence
from typing import Any, Protocol, TypeVar

from host.transport import wire
from host.transport.cc import DEFAULT_CC, CcProfile
from host.transport.config import StackConfig
from host.transport.endpoint import Endpoint, EpBatch, EpRequest, SpineRoutes
from host.transport.events import Completion, EndpointResponse, Event
from host.transport.evs import (
    EvProfile,
    EvProfileError,
    EvState,
    GeneratedEvProfile,
    ProfileStates,
)
from host.transport.policy import get_policy
from host.transport.qp import QueuePair, Shared
from host.transport.region import MemoryRegion, RegionBuffer, RegionTable
from topologies import Path

__all__ = [
    "OPERATOR_STATES",
    "CompletionQueue",
    "Context",
    "MemoryRegion",
    "NicLike",
    "QueuePair",
    "operator_state",
]

FIRST_QPN = 0x100
_decode_data = wire.decode_data
_decode_ack = wire.decode_ack
_OPCODE_AT = wire.OFF_BTH
_SRC_AT = wire.OFF_IPV6 + 8  # the IPv6 source address: a QP takes packets from its peer only
_SRC_END = _SRC_AT + 16
_OP_ACK = wire.OP_ACKNOWLEDGE


class NicLike(Protocol):
    """What the context needs to know of a NIC (``topologies.Nic`` fits)."""

    @property
    def plane(self) -> int: ...  # noqa: D102

    @property
    def mac(self) -> str: ...  # noqa: D102

    @property
    def gateway_mac(self) -> str: ...  # noqa: D102

    @property
    def address(self) -> Any: ...  # noqa: D102


#: the EV states an operator sets (ASSUMED_BAD is the transport's own verdict)
OPERATOR_STATES = (EvState.GOOD, EvState.DENIED, EvState.UNKNOWN)


def operator_state(state: EvState | str) -> EvState:
    """``state`` as an EV state an operator may set (ValueError naming the field else)."""
    try:
        chosen = EvState(state)
    except ValueError:
        chosen = None
    if chosen not in OPERATOR_STATES:
        names = ", ".join(s.name for s in OPERATOR_STATES)
        raise ValueError(f"field 'state': expected {names}, got {state!r}")
    return chosen


#: event fields that are times or durations: protocol time inside the core, driver time outside
_TIME_FIELDS = ("time", "rtt")


_E = TypeVar("_E", bound=Event)


def _to_driver(event: _E, dilation: float) -> _E:
    """``event`` with its times in the driver's clock (a copy; the same object if undilated)."""
    if dilation == 1.0:
        return event
    changes = {
        f.name: getattr(event, f.name) * dilation
        for f in dataclasses.fields(event)
        if f.name in _TIME_FIELDS
    }
    return dataclasses.replace(event, **changes)


class CompletionQueue:
    """Completions of the QPs bound to it, oldest first."""

    def __init__(
        self, number: int, entries: collections.deque[Completion], dilation: float = 1.0
    ) -> None:
        self.number = number
        self._entries = entries
        self._dilation = dilation

    def poll(self, n: int = 16) -> list[Completion]:
        """Take up to ``n`` completions (times in the driver's clock)."""
        out: list[Completion] = []
        entries = self._entries
        dilation = self._dilation
        while entries and len(out) < n:
            entry = entries.popleft()
            out.append(entry if dilation == 1.0 else _to_driver(entry, dilation))
        return out

    def __len__(self) -> int:
        return len(self._entries)


class Context:
    """One host's MRC transport: regions, CQs, QPs, and the driver interface."""

    def __init__(
        self,
        host: str,
        nics: Sequence[NicLike],
        config: StackConfig | None = None,
        seed: int = 0,
        routes: SpineRoutes | None = None,
    ) -> None:
        """``routes``: this host's SRV6 paths between racks (:meth:`SpineRoutes.from_paths` of
        the fabric model's paths to every other host), so that responses to SRV6 endpoint
        requests go back through the requests' spines; without it they go to the plain address."""
        self.host = host
        self.config = config or StackConfig()
        self.nics = {nic.plane: nic for nic in nics}
        if not self.nics:
            raise ValueError(f"context of {host}: expected at least one NIC")
        self._rng = random.Random(seed)
        self._regions = RegionTable()
        self._shared = Shared(self.config, self._regions)
        self._stats = self._shared.stats
        self._qps: dict[int, QueuePair] = {}
        self._profiles: dict[int, ProfileStates] = {}  #: EV profiles by id
        self._next_profile = 1
        self._admin_down: set[int] = set()  #: planes whose port is administratively disabled
        self._next_qpn = FIRST_QPN
        self._next_cq = 1
        self._now = 0.0  # protocol time
        self._max_frame = self.config.max_frame
        self.dilation = self.config.dilation  #: driver seconds per protocol second
        self._scale = 1.0 / self.dilation
        # the last timer handed out, in both clocks: a driver woken at exactly that driver time
        # must find it due, whatever the rounding of the division
        self._timer = (float("inf"), float("inf"))
        self._endpoint = Endpoint(
            host, self.nics, self._shared, lambda: iter(self._qps.values()),
            self.config.hop_limit, self.config.probe_interval, routes,
        )  # fmt: skip
        self._turn = 0  # the QP that sends first from a budget (frames_to_send)
        # What the context knows of its QPs between events, so that an event costs the QPs it
        # touched (qp_state.entry_point), not every QP: those with frames waiting (a send queue
        # or retransmissions), each QP's next timer, and a heap of those timers (entries whose
        # time is no longer the QP's are dropped when they reach the top)
        self._touched = self._shared.touched
        self._waiting: dict[int, QueuePair] = {}
        self._due: dict[int, float] = {}
        self._timers: list[tuple[float, int]] = []
        self._position: dict[int, int] | None = None  # QP number -> place in creation order

    # -- memory, CQs, QPs ---------------------------------------------------------------------

    def register_region(
        self, addr: int, length: int, buffer: RegionBuffer | None = None, domain: int = 0
    ) -> MemoryRegion:
        """Make ``[addr, addr + length)`` remotely writable; the region's ``rkey`` (a secret,
        never handed out twice) names it.

        ``buffer`` backs the region: a bytearray, or any :class:`host.transport.region.PlacementTarget`
        a driver provides (e.g. another process's memory); default a new zeroed bytearray.
        Only QPs of protection ``domain`` (:meth:`create_qp`) may write it."""
        # the seeded generator advances as it did when it drew rkeys, so that a seeded
        # context's QPs still choose the EVs they chose (simulations replay)
        self._rng.getrandbits(32)
        return self._regions.register(addr, length, buffer, domain)

    def deregister_region(self, rkey: int) -> None:
        """Withdraw a region: later writes naming ``rkey`` are refused."""
        self._regions.deregister(rkey)

    def region(self, rkey: int) -> MemoryRegion:
        """The region registered under ``rkey``."""
        found = self._regions.get(rkey)
        if found is None:
            raise KeyError(f"rkey {rkey:#x}: no region of {self.host}")
        return found

    def create_cq(self) -> CompletionQueue:
        """A new completion queue."""
        number = self._next_cq
        self._next_cq += 1
        entries: collections.deque[Completion] = collections.deque()
        self._shared.cqs[number] = entries
        return CompletionQueue(number, entries, self.dilation)

    def create_qp(
        self,
        remote_host: str,
        paths: Sequence[Path],
        *,
        cq: CompletionQueue,
        policy: str = "mrc",
        cc: str | CcProfile = DEFAULT_CC,
        ev_profile: EvProfile | int | None = None,
        remote_qpn: int | None = None,
        qpn: int | None = None,
        config: StackConfig | None = None,
        domain: int = 0,
    ) -> QueuePair:
        """A QP to ``remote_host`` over ``paths`` (from ``Fabric.paths(self.host, remote_host)``).

        ``ev_profile`` is the id of a profile made with :meth:`create_ev_profile` (its EV states
        are shared with every other QP using it), or a profile of this QP's own (default: a
        generated one of ``config.ev_count`` EVs).
        ``qpn`` picks the local QP number (1..2^24-1, unused), e.g. one both peers can derive
        without exchanging it; by default numbers are allocated from 0x100 upwards.
        ``config`` is the QP's own (ACK timeout, retry counts, windows, ...): a copy of the
        context's ``config`` with some fields changed (``config.with_(...)``); the fields every
        QP shares (``host.transport.config.CONTEXT_FIELDS``: dilation, MTU, ...) must keep the
        context's values, else :class:`~host.transport.config.ConfigError`. Its times are
        protocol times, dilated by the context's ``dilation`` as the context's are.
        ``domain`` is the QP's protection domain: its peer may write the regions of that
        domain only. The QP takes packets only from the peer's NIC addresses (its paths'
        destinations and, when the context knows the fabric's hosts, every NIC of the peer).
        """
        if config is not None:
            self.config.check_qp(config)
        for path in paths:
            if path.src != self.host or path.dst != remote_host:
                raise ValueError(
                    f"path {path.label} goes {path.src} -> {path.dst}: expected "
                    f"{self.host} -> {remote_host}"
                )
            if path.plane not in self.nics:
                raise ValueError(
                    f"path {path.label} uses plane {path.plane}: {self.host} has no NIC there"
                )
        if qpn is None:
            while self._next_qpn in self._qps:
                self._next_qpn += 1
            qpn = self._next_qpn
            self._next_qpn += 1
        elif not 0 < qpn <= wire.QPN_MASK or qpn in self._qps:
            raise ValueError(f"QP number {qpn}: expected an unused value in 1..{wire.QPN_MASK}")
        if isinstance(ev_profile, int):
            profile = self.ev_profile(ev_profile)
        else:
            profile = self._new_profile(ev_profile, None)
        qp = QueuePair(
            self._shared, qpn, remote_host, paths, cq=cq.number, policy=get_policy(policy), cc=cc,
            ev_profile=None, remote_qpn=None, rng=random.Random(self._rng.getrandbits(64)),
            profile=profile, config=config,
        )  # fmt: skip
        qp.domain = domain
        qp.peer_addresses |= {
            address
            for address, (host, _) in self._endpoint.routes.peers.items()
            if host == remote_host
        }
        if remote_qpn is not None:
            qp.connect(remote_qpn)
        self._qps[qpn] = qp
        self._position = None
        self._touched[qpn] = qp
        for plane in sorted(self._admin_down):
            self._set_plane_states(qp, plane, EvState.DENIED, None)
        return qp

    def qp(self, qpn: int) -> QueuePair:
        """The QP numbered ``qpn``."""
        try:
            return self._qps[qpn]
        except KeyError:
            raise KeyError(f"QP {qpn}: no such QP on {self.host}") from None

    def configure_qp(self, qpn: int, config: StackConfig) -> None:
        """Give QP ``qpn`` a new config while it runs: a copy of its current one
        (``qp.config.with_(...)``) whose changes are timers, retry counts and windows
        (``host.transport.config.LIVE_FIELDS``); they take effect at once (see
        :meth:`QueuePair.reconfigure`). The driver asks :meth:`next_timer` again afterwards."""
        qp = self.qp(qpn)
        self.config.check_qp(config)
        qp.reconfigure(config)

    def destroy_qp(self, qpn: int) -> None:
        """Forget QP ``qpn``: its pending messages are dropped, later packets for it are
        counted as ``unknown_qp``; its number may be used again."""
        qp = self._qps.pop(qpn, None)
        if qp is None:
            raise KeyError(f"QP {qpn}: no such QP on {self.host}")
        qp.ev_profile.detach(qp.ev_table)
        self._position = None
        self._waiting.pop(qpn, None)
        self._due.pop(qpn, None)
        self._touched.pop(qpn, None)

    @property
    def qps(self) -> list[QueuePair]:
        """Every QP of this context."""
        return list(self._qps.values())

    # -- host-controller side -------------------------------------------------------------------

    def _new_profile(self, profile: EvProfile | None, profile_id: int | None) -> ProfileStates:
        chosen = profile or GeneratedEvProfile()
        if profile_id is None:
            while self._next_profile in self._profiles:
                self._next_profile += 1
            profile_id = self._next_profile
            self._next_profile += 1
        elif profile_id in self._profiles or not 0 <= profile_id < 1 << 64:
            raise EvProfileError(f"EV profile id {profile_id}: expected an unused 64-bit id")
        min_active = chosen.min_active
        states = ProfileStates(
            profile_id, chosen, self.config.ev_min_active if min_active is None else min_active
        )
        self._profiles[profile_id] = states
        return states

    def create_ev_profile(self, profile: EvProfile, profile_id: int | None = None) -> int:
        """Make an EV profile QPs can share (``create_qp(ev_profile=id)``); returns its id."""
        return self._new_profile(profile, profile_id).profile_id

    def ev_profile(self, profile_id: int) -> ProfileStates:
        """The EV profile ``profile_id`` (its states, its QPs' tables)."""
        try:
            return self._profiles[profile_id]
        except KeyError:
            raise KeyError(f"EV profile {profile_id}: no such profile on {self.host}") from None

    def destroy_ev_profile(self, profile_id: int) -> None:
        """Forget EV profile ``profile_id`` (refused while a QP uses it)."""
        profile = self.ev_profile(profile_id)
        if profile.tables:
            raise ValueError(f"EV profile {profile_id}: {len(profile.tables)} QPs still use it")
        del self._profiles[profile_id]

    @property
    def ev_profiles(self) -> dict[int, ProfileStates]:
        """Every EV profile of this context, by id (QPs' own profiles included)."""
        return dict(self._profiles)

    def set_ev_state(self, qpn: int, ev: int, state: EvState, now: float | None = None) -> None:
        """Operator action on one EV of QP ``qpn`` (:meth:`set_ev_states`)."""
        self.set_ev_states(qpn, [ev], state, now)

    def set_ev_states(
        self, qpn: int, evs: Iterable[int], state: EvState, now: float | None = None,
        reason: str = "operator",
    ) -> int:  # fmt: skip
        """Operator action on EVs of QP ``qpn``: DENIED (stop using them), UNKNOWN (probe them
        back) or GOOD (:data:`OPERATOR_STATES`). Every EV is checked before any changes (an EV
        not of the QP: KeyError naming it). The states are the EV profile's: every QP using
        the profile sees them. Returns the number of EVs set."""
        qp = self.qp(qpn)
        chosen = operator_state(state)
        slots = [qp.ev_table.slot(ev) for ev in evs]
        at = self._at(now)
        for slot in slots:
            qp.set_ev_state(slot, chosen, reason, at)
        return len(slots)

    def set_profile_ev_state(
        self, profile_id: int, ev: int, state: EvState, now: float | None = None,
        reason: str = "operator", wire: int | None = None,
    ) -> None:  # fmt: skip
        """Set the state of EV ``ev`` of a profile (``MRC_CTL_EV_OP_MODIFY_EV_STATE``): as
        :meth:`set_ev_states` on a QP using the profile; an EV no QP of the profile has yet is
        set in the profile by its 32-bit ``wire`` form, when given (KeyError else)."""
        profile = self.ev_profile(profile_id)
        chosen = operator_state(state)
        for qp in self._qps.values():
            if qp.ev_profile is not profile:
                continue
            try:
                self.set_ev_states(qp.qpn, [ev], chosen, now, reason)
            except KeyError:  # not in this QP's EVs (explicit SRV6 EVs differ per peer)
                continue
            return
        if wire is None:
            raise KeyError(f"EV {ev:#x}: not in EV profile {profile_id} (or no QP uses it)")
        profile.set_state(wire, chosen, self._at(now))

    def set_port_admin(self, plane: int, enabled: bool, now: float | None = None) -> int:
        """The administrative state of this host's port of ``plane`` (``mrc_ctl_modify_port``):
        a disabled port carries nothing -- every EV of its plane on every QP is DENIED, and so
        are those of QPs created while it stays disabled; enabling it releases them to
        UNKNOWN (probed back to GOOD). Returns the number of EVs set."""
        if plane not in self.nics:
            raise ValueError(f"field 'plane': {self.host} has no port on plane {plane}")
        if (plane not in self._admin_down) == enabled:
            return 0
        (self._admin_down.discard if enabled else self._admin_down.add)(plane)
        state = EvState.UNKNOWN if enabled else EvState.DENIED
        return sum(self._set_plane_states(qp, plane, state, now) for qp in self._qps.values())

    def port_admin(self, plane: int) -> bool:
        """True unless the port of ``plane`` is administratively disabled."""
        return plane not in self._admin_down

    def _set_plane_states(
        self, qp: QueuePair, plane: int, state: EvState, now: float | None
    ) -> int:
        evs = [info.ev for info in qp.ev_table.evs() if info.plane == plane]
        return self.set_ev_states(qp.qpn, evs, state, now)

    def probe_ev(self, qpn: int, ev: int, now: float | None = None) -> int:
        """Send a probe on EV ``ev`` of QP ``qpn`` now; returns the probe id."""
        qp = self.qp(qpn)
        return qp.probe(qp.ev_table.slot(ev), self._at(now))

    # -- endpoint requests and port status (mrc_ctl_ep_batch_send_wait) ---------------------------

    def ep_batch_send(
        self, op: str, requests: Sequence[EpRequest], *, dscp: int = wire.DSCP_CONTROL,
        timeout: float = 2e-3, now: float | None = None,
    ) -> EpBatch:  # fmt: skip
        """Send a batch of endpoint requests of one operation (``"ev_probe"`` or
        ``"port_status_update"``) in traffic class ``dscp``; responses collect in the batch's
        ``responses`` (arrival order, RTTs less the responder's service time) until every
        request is answered or ``timeout`` (protocol seconds) passes: the driver waits until
        ``batch.complete()`` or its clock reaches ``batch.deadline_driver``, then calls
        :meth:`ep_batch_end`."""
        return self._endpoint.batch(op, requests, dscp, timeout, self._at(now), self.dilation)

    def ep_batch_end(self, batch: EpBatch) -> list[EndpointResponse]:
        """Stop waiting for ``batch`` (later responses are dropped); its responses, with their
        times and RTTs in the driver's clock."""
        self._endpoint.expire(batch)
        return [_to_driver(r, self.dilation) for r in batch.responses]

    def set_port_state(self, plane: int, up: bool, now: float | None = None) -> int:
        """This host's NIC of ``plane`` went down or came up (the driver saw its link): its EVs
        are retired at once or probed back, and every peer gets a port status update. Returns
        the EVs whose state changed."""
        return self._endpoint.set_port_state(plane, up, self._at(now))

    @property
    def ports_up(self) -> list[int]:
        """The planes whose NIC is up."""
        return sorted(self._endpoint.ports_up)

    def _at(self, now: float | None) -> float:
        if now is not None:
            proto = self._protocol_time(now)
            self._now = max(self._now, proto)
            return proto
        return self._now

    def _protocol_time(self, now: float) -> float:
        """The protocol time at the driver's ``now``."""
        if self._scale == 1.0:
            return now
        proto = now * self._scale
        wall, due = self._timer
        if now >= wall and proto < due:
            proto = due
        return proto

    # -- driver interface ---------------------------------------------------------------------

    def receive_frame(self, plane: int, frame: bytes | bytearray | memoryview, now: float) -> None:
        """Process one frame received on ``plane``'s NIC; bad frames are dropped and counted."""
        if self._scale != 1.0:
            now = self._protocol_time(now)
        self._now = now
        stats = self._stats
        size = len(frame)
        stats.packets_received += 1
        stats.bytes_received += size
        try:
            if size <= self._max_frame and size > _OPCODE_AT:
                opcode = frame[_OPCODE_AT]
                if opcode == _OP_ACK:
                    ack = _decode_ack(frame)
                    if ack is not None:
                        qp = self._qps.get(ack[0])
                        if qp is None:
                            stats.drops["unknown_qp"] += 1
                            return
                        if bytes(frame[_SRC_AT:_SRC_END]) not in qp.peer_addresses:
                            stats.drops["not_from_peer"] += 1
                            return
                        qp.on_ack_fields(ack, now)
                        return
                else:
                    fields = _decode_data(frame)
                    if fields is not None:
                        qp = self._qps.get(fields[0])
                        if qp is None:
                            stats.drops["unknown_qp"] += 1
                            return
                        if bytes(frame[_SRC_AT:_SRC_END]) not in qp.peer_addresses:
                            stats.drops["not_from_peer"] += 1
                            return
                        stats.data_packets_received += 1
                        qp.on_data_fields(fields, now)
                        return
            pkt = wire.parse(frame, self._max_frame)
            if type(pkt) is wire.EndpointPacket:
                self._endpoint.on_packet(pkt, plane, now)
                return
            qp = self._qps.get(pkt.outer.dest_qp)
            if qp is None:
                stats.drops["unknown_qp"] += 1
                return
            if pkt.outer.src not in qp.peer_addresses:
                stats.drops["not_from_peer"] += 1
                return
            if type(pkt) is wire.DataPacket:
                stats.data_packets_received += 1
                qp.on_data(pkt, now)
            elif type(pkt) is wire.AckPacket:
                qp.on_ack(pkt, now)
            elif type(pkt) is wire.NackPacket:
                qp.on_nack(pkt, now)
            elif type(pkt) is wire.ProbePacket:
                if pkt.reply:
                    qp.on_probe_reply(pkt, now)
                else:
                    qp.answer_probe(pkt, now)
        except wire.WireError as exc:
            stats.drops[exc.reason] += 1
        except Exception:  # noqa: BLE001 -- a frame must never take the host down
            stats.drops["internal_error"] += 1

    def frames_to_send(
        self, now: float, budget: dict[int, int] | None = None
    ) -> list[tuple[int, bytes | bytearray]]:
        """Every frame to send now, as ``(plane, frame)``: control first, then data.

        ``budget`` (plane -> data frames that plane's NIC takes now) lets a driver that paces
        its NICs keep the choice of EV until a NIC has room, as a NIC's transmit scheduler does;
        it is used up in place. None: every frame the windows allow. The QPs take turns at the
        budget, one call starting where the previous left off."""
        if self._scale != 1.0:
            now = self._protocol_time(now)
        self._now = now
        self._endpoint.departing(now)
        self._refresh()
        shared = self._shared
        out = shared.outbox
        shared.outbox = []
        turn = 0
        if budget is not None and len(self._qps) > 1:
            turn = self._turn = (self._turn + 1) % len(self._qps)
        waiting = self._waiting
        if not waiting:
            return out
        qpns: list[int] = list(waiting)
        if len(qpns) > 1:
            # creation order, starting from the turn's place (those with nothing waiting pass)
            place = self._places()
            qpns.sort(key=place.__getitem__)
            if turn:
                cut = next((i for i, q in enumerate(qpns) if place[q] >= turn), len(qpns))
                qpns = qpns[cut:] + qpns[:cut]
        for qpn in qpns:
            qp = waiting[qpn]
            if qp._send_queue or qp._retx:
                qp.frames(now, out, budget)
            if not (qp._send_queue or qp._retx):
                del waiting[qpn]
        return out

    def _places(self) -> dict[int, int]:
        """Each QP's place in creation order (the order QPs are asked for frames and timers)."""
        if self._position is None:
            self._position = {qpn: n for n, qpn in enumerate(self._qps)}
        return self._position

    def _refresh(self) -> None:
        """Look again at the QPs touched since the last look: frames waiting, next timer."""
        touched = self._touched
        if not touched:
            return
        qps, waiting, due, timers = self._qps, self._waiting, self._due, self._timers
        for qpn, qp in touched.items():
            if qps.get(qpn) is not qp:
                continue  # destroyed
            if qp._send_queue or qp._retx:
                waiting[qpn] = qp
            t = qp.next_timer()
            if t is None:
                due.pop(qpn, None)
            elif due.get(qpn) != t:
                due[qpn] = t
                heapq.heappush(timers, (t, qpn))
        touched.clear()
        if len(timers) > 2 * len(due) + 64:  # stale entries: keep the heap the size of the QPs
            self._timers = [(t, qpn) for qpn, t in due.items()]
            heapq.heapify(self._timers)

    def _first_due(self) -> float | None:
        """The earliest of the QPs' timers (stale heap entries dropped on the way)."""
        timers, due = self._timers, self._due
        while timers:
            t, qpn = timers[0]
            if due.get(qpn) == t:
                return t
            heapq.heappop(timers)
        return None

    def next_timer(self) -> float | None:
        """The driver time at which :meth:`handle_timer` must be called (None: no timer)."""
        self._refresh()
        when = self._first_due()
        t = self._endpoint.next_timer()
        if t is not None and (when is None or t < when):
            when = t
        if when is None or self._scale == 1.0:
            return when
        wall = when * self.dilation
        self._timer = (wall, when)
        return wall

    def handle_timer(self, now: float) -> None:
        """Run every timer that is due (delayed ACKs, ACK timeouts, probes)."""
        if self._scale != 1.0:
            now = self._protocol_time(now)
        self._now = now
        self._refresh()
        timers, due = self._timers, self._due
        ready: list[int] = []
        while timers and timers[0][0] <= now:
            t, qpn = heapq.heappop(timers)
            if due.get(qpn) == t:
                del due[qpn]  # the QP's handle_timer touches it: its next timer is asked again
                ready.append(qpn)
        if len(ready) > 1:
            ready.sort(key=self._places().__getitem__)
        for qpn in ready:
            self._qps[qpn].handle_timer(now)
        self._endpoint.handle_timer(now)

    def next_event(self) -> Event | None:
        """The oldest event not yet taken, or None."""
        events = self._shared.events
        if not events:
            return None
        return _to_driver(events.popleft(), self.dilation)

    def counters(self) -> dict[str, int]:
        """The integer counters of :meth:`stats` alone (no per-QP descriptions, RTT summary or
        EV transitions): what a sampler reads every interval, at a fraction of the cost."""
        stats = self._stats
        out = {
            k: v for k, v in vars(stats).items() if isinstance(v, int) and not isinstance(v, bool)
        }
        out["ev_transitions_total"] = stats.ev_transitions.total
        return out

    def stats(self) -> dict[str, Any]:
        """The statistics dict (see docs/host-stack.md): times in the driver's clock, and the
        RTT summary also in protocol (real-fabric) time as ``rtt_protocol``."""
        out = self._shared.stats.as_dict()
        out["qps"] = {qpn: qp.describe() for qpn, qp in self._qps.items()}
        out["dilation"] = self.dilation
        out["ports_up"] = self.ports_up
        rtt = out["rtt"]
        out["rtt_protocol"] = dict(rtt)
        if self.dilation != 1.0:
            d = self.dilation
            out["rtt"] = {k: (v if k == "count" else v * d) for k, v in rtt.items()}
            out["ev_transitions"] = [{**tr, "time": tr["time"] * d} for tr in out["ev_transitions"]]
        return out
