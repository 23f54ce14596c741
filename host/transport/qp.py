"""The queue pair: MRC sender and receiver state machines of one connection (no I/O).

Sender: messages are cut into packets of at most ``mtu`` payload bytes, each with its own PSN,
remote address (RETH) and EV; packets stay outstanding until an ACK (cumulative PSN) or a SACK
bit covers them. Loss detection:

- trim NACK: retransmit at once on another EV, the EV stays GOOD, congestion control sees a trim;
- SACK: a packet is lost when one sent ``reorder_threshold`` packets after it was acknowledged;
- ACK timeout (RTO): srtt + 4 rttvar, at least 1.024 us x 2^t, after the oldest packet in flight
  or the last ACK of new data, doubling on repeats.

SACK and RTO losses are path failures: the EV (and, with ``retire_path``, its whole path) goes
ASSUMED_BAD and is probed every ``probe_interval`` until a probe reply reinstates it. A SACK loss
also needs the packet to be older than its own path's RTT allows (unequal paths reorder). The
ACK timeout follows the smoothed RTT (floor: the MRC timeout) and a tail-loss probe re-sends the
oldest packets after two smoothed RTTs, before it fires.

Spraying: new packets reuse the path of a packet acknowledged without a CE echo (recycled), else
follow the spraying cycle thinned by per-path weights that congestion (CE echo, trim, excess
delay) decreases multiplicatively and clean ACKs restore additively; see docs/host-stack.md.

Receiver: every packet is placed at its RETH address after checking rkey and bounds; PSNs are
tracked as a cumulative PSN plus the set received beyond it; ACKs are coalesced (every
``ack_every`` packets or ``ack_delay``), each trimmed packet gets a NACK echoing its EV, and a
WRITE_IMM completes once every byte of the message is placed.
"""

from __future__ import annotations

import collections
import random
import zlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

from host.transport import wire
from host.transport.cc import CcProfile, CongestionControl, create
from host.transport.config import ACK_TIMEOUT_UNIT, StackConfig
from host.transport.events import (
    STATUS_OK,
    STATUS_REMOTE_ACCESS_ERROR,
    STATUS_RETRY_EXCEEDED,
    Completion,
    Event,
    EvStateChanged,
    PathProbeReplied,
    PathProbeSent,
    PathProbeTimedOut,
    QpError,
    RetransmitTimeout,
    WriteCompleted,
    WriteImmReceived,
)
from host.transport.evs import EvProfile, EvSlot, EvState, EvTable, GeneratedEvProfile, build_slots
from host.transport.policy import Policy
from host.transport.region import RegionTable
from host.transport.stats import Stats

if TYPE_CHECKING:
    from topologies import Path

PSN_MASK = wire.PSN_MASK
PSN_HALF = 1 << 23
# a reply arriving after probe_timeout (slow emulated paths) still reinstates its EV if it comes
# within this many timeouts of the probe
LATE_PROBE_FACTOR = 64
# messages a receiver tracks at once (partly received); packets of more are dropped, unplaced
MAX_RX_MESSAGES = 1 << 16
# wire constants as module globals for the hot paths (one lookup instead of two)
_FLAG_FIRST, _FLAG_LAST, _FLAG_ECN_ECHO = wire.FLAG_FIRST, wire.FLAG_LAST, wire.FLAG_ECN_ECHO
_OP_WRITE_ONLY, _EXT_DATA, _ECN_CE = wire.OP_WRITE_ONLY, wire.EXT_DATA, wire.ECN_CE
_DATA_UDP_BASE = wire.UDP_LEN + wire.BTH_LEN + wire.RETH_LEN + wire.DATA_EXT_LEN
NS = 1_000_000_000
_GOOD = EvState.GOOD
# packets a tail-loss probe re-sends at most
TLP_PACKETS = 4
# recycled EVs kept at most (the newest)
RECYCLE_MAX = 4096
# one packet in this many (a power of two) takes the spraying cycle even when EVs are recycled
EXPLORE_EVERY = 16
EXPLORE_MASK = EXPLORE_EVERY - 1


def _weighted(slot: EvSlot, order: list[EvSlot], rr: int, count: int) -> tuple[EvSlot, int]:
    """Weighted spraying: a path of weight w takes a fraction w of its picks of the cycle, the
    others move on along it (to the next EV, usually of another path)."""
    load = slot.load
    tries = count
    while load.weight < 1.0 and tries:
        credit = load.credit + load.weight
        if credit >= 1.0:
            load.credit = credit - 1.0
            break
        load.credit = credit
        tries -= 1
        rr += 1
        slot = order[rr % count]
        load = slot.load
    return slot, rr


class Shared:
    """What every QP of a context shares: configuration, counters, output queues, regions."""

    def __init__(self, config: StackConfig, regions: RegionTable) -> None:
        self.config = config
        self.regions = regions
        self.stats = Stats()
        self.events: collections.deque[Event] = collections.deque()
        self.outbox: list[tuple[int, bytes | bytearray]] = []
        self.cqs: dict[int, collections.deque[Completion]] = {}

    def complete(self, entry: Completion) -> None:
        """Deliver a completion to its CQ and as an event."""
        queue = self.cqs.get(entry.cq)
        if queue is not None:
            queue.append(entry)
        self.events.append(entry)


class _TxMessage:
    __slots__ = ("msg_id", "wr_id", "imm", "data", "length", "remote_addr", "rkey", "offset",
                 "unacked", "all_sent", "status")  # fmt: skip

    def __init__(
        self, msg_id: int, wr_id: int, imm: int | None, data: memoryview, remote_addr: int,
        rkey: int,
    ) -> None:  # fmt: skip
        self.msg_id = msg_id
        self.wr_id = wr_id
        self.imm = imm
        self.data = data
        self.length = len(data)
        self.remote_addr = remote_addr
        self.rkey = rkey
        self.offset = 0
        self.unacked = 0
        self.all_sent = False
        self.status = STATUS_OK


class _TxPacket:
    __slots__ = ("psn", "msg", "offset", "length", "last", "slot", "sent", "ts32", "tsn", "retx",
                 "in_net")  # fmt: skip

    def __init__(
        self, psn: int, msg: _TxMessage, offset: int, length: int, last: bool, slot: EvSlot,
        sent: float, ts32: int, tsn: int,
    ) -> None:  # fmt: skip
        self.psn = psn
        self.msg = msg
        self.offset = offset
        self.length = length
        self.last = last
        self.slot = slot
        self.sent = sent
        self.ts32 = ts32
        self.tsn = tsn
        self.retx = 0
        self.in_net = True


class _RxMessage:
    __slots__ = ("length", "received", "imm", "base", "failed")

    def __init__(self, length: int, base: int) -> None:
        self.length = length
        self.received = 0
        self.imm: int | None = None
        self.base = base
        self.failed = False


def _addr_bytes(address: object) -> bytes:
    packed = getattr(address, "packed", None)
    if not isinstance(packed, bytes) or len(packed) != 16:
        raise ValueError(f"address {address!r}: expected an IPv6 address")
    return packed


class QueuePair:
    """One reliable connection to a QP of a remote host, over many EVs."""

    def __init__(
        self,
        shared: Shared,
        qpn: int,
        remote_host: str,
        paths: Sequence[Path],
        *,
        cq: int,
        policy: Policy,
        cc: str | CcProfile,
        ev_profile: EvProfile | None,
        remote_qpn: int | None,
        rng: random.Random,
    ) -> None:
        cfg = shared.config
        self._shared = shared
        self._regions = shared.regions.by_rkey
        self._cfg = cfg
        self._rx_window = cfg.rx_window
        self._ack_every = cfg.ack_every
        self._ack_delay = cfg.ack_delay
        self._steer = cfg.ecn_steering and policy.spray
        self._steer_skip = False
        self._steer_hold = cfg.ack_delay * 10
        self._weights = cfg.steering == "weights"
        self._w_dec = 1.0 - cfg.path_weight_decrease
        self._w_inc = cfg.path_weight_increase
        self._w_min = cfg.path_weight_min
        self._w_excess = 1.0 + cfg.path_delay_excess
        # EVs of packets acknowledged without a CE echo, reused first (recycled spraying)
        self._recycle: collections.deque[EvSlot] | None = (
            collections.deque(maxlen=RECYCLE_MAX) if cfg.ev_recycle and policy.spray else None
        )
        self._stats = shared.stats
        self.qpn = qpn
        self.remote_host = remote_host
        self.paths = list(paths)
        self.cq = cq
        self.policy = policy
        self.remote_qpn = remote_qpn
        self.cc: CongestionControl = create(cc, mtu=cfg.mtu)
        self.error: str | None = None
        slots = build_slots(self.paths, ev_profile or GeneratedEvProfile(), cfg.ev_count)
        dscp = wire.DSCP_TRIMMABLE if policy.trimmable else wire.DSCP_DEFAULT
        for slot in slots:
            slot.prefix = self._prefix(slot.path, dscp, wire.ECN_ECT0, slot.wire)
            slot.head, slot.mid = wire.split_prefix(slot.prefix)
        self.ev_table = EvTable(slots, rng)
        if not policy.spray:
            if policy.single_ev == "hash":
                salt = rng.getrandbits(32)
                key = zlib.crc32(f"{qpn}/{remote_host}".encode()) ^ salt
                chosen = slots[key % len(slots)]
            else:
                chosen = slots[0]
            self.ev_table.pin(chosen)
        # replies (ACK, NACK, probe reply) go back on the mirror path: same plane and spine
        self._reply: dict[tuple[int, int], tuple[int, bytes]] = {}
        self._reply_plane: dict[int, tuple[int, bytes]] = {}
        for path in self.paths:
            spine = 0xFF if path.spine is None else path.spine
            entry = (path.plane, self._prefix(path, wire.DSCP_CONTROL, wire.ECN_NOT_ECT, 0))
            self._reply.setdefault((path.plane, spine), entry)
            self._reply_plane.setdefault(path.plane, entry)
        self._reply_any = next(iter(self._reply.values()))
        # probe groups: a path (retire_path) or a single EV
        self._groups: dict[int, list[EvSlot]] = collections.defaultdict(list)
        for slot in slots:
            self._groups[self._group_of(slot)].append(slot)
        self._probe_due: dict[int, float] = {}
        self._probes: dict[int, tuple[EvSlot, float]] = {}  # waiting for a reply
        self._late_probes: dict[int, tuple[EvSlot, float]] = {}  # timed out, reply still welcome
        self._next_probe_id = 1
        # sender
        self._send_queue: collections.deque[_TxMessage] = collections.deque()
        self._outstanding: dict[int, _TxPacket] = {}
        self._retx: collections.deque[_TxPacket] = collections.deque()
        self._next_psn = 0
        self._snd_una = 0
        self._psn_origin = 0
        self._next_msg_id = 1
        self._tsn = 0
        self._highest_acked_tsn = -1
        self.inflight = 0
        self._backoff = 0
        self._pending_messages = 0
        # RTT estimate (RFC 6298) for the adaptive ACK timeout and the tail-loss probe
        self._srtt: float | None = None
        self._rttvar = 0.0
        self._tlp_next = 0.0  # no tail-loss probe before this time (one per smoothed RTT)
        self._last_ack = 0.0  # the last ACK that acknowledged data (restarts the ACK timeout)
        self._rto_floor = cfg.ack_timeout if cfg.rto_min is None else cfg.rto_min
        self._rto_max = ACK_TIMEOUT_UNIT * (1 << cfg.max_backoff_exp)
        # receiver
        self._rcv_cum = 0
        self._rcv_origin = 0
        self._rcv_set: set[int] = set()
        self._rcv_max = -1
        self._rx_msgs: dict[int, _RxMessage] = {}
        self._msn = 0
        self._ack_pending = 0
        self._ack_deadline: float | None = None
        self._ack_ce = 0
        self._ack_ce_ev = 0  # EV of the latest CE-marked packet since the previous ACK
        self._ack_echo = (0, 0, 0, 0xFF)  # EV, timestamp, plane, spine
        self._ack_lo = 1 << 62  # lowest out-of-order PSN received since the last ACK

    # -- construction helpers --------------------------------------------------------------------

    def _prefix(self, path: Path, dscp: int, ecn: int, ev: int) -> bytes:
        nic = path.src_nic
        return wire.frame_prefix(
            src_mac=wire.mac_bytes(nic.mac),
            dst_mac=wire.mac_bytes(nic.gateway_mac),
            src=_addr_bytes(nic.address),
            dst=_addr_bytes(path.carrier),
            dscp=dscp,
            ecn=ecn,
            ev=ev,
            hop_limit=self._cfg.hop_limit,
        )

    def _group_of(self, slot: EvSlot) -> int:
        return slot.path_index if self._cfg.retire_path else -1 - slot.index

    # -- public API ------------------------------------------------------------------------------

    def connect(self, remote_qpn: int, *, send_psn: int = 0, expect_psn: int = 0) -> None:
        """Bind this QP to the remote QP number (exchanged out of band).

        ``send_psn`` is the first PSN this QP sends, ``expect_psn`` the first it expects (the
        peer's ``send_psn``); both default to 0, as in RDMA's sq_psn / rq_psn.
        """
        if not 0 < remote_qpn <= wire.QPN_MASK:
            raise ValueError(f"remote QP number {remote_qpn}: expected 1..{wire.QPN_MASK}")
        for name, value in (("send_psn", send_psn), ("expect_psn", expect_psn)):
            if not 0 <= value <= wire.PSN_MASK:
                raise ValueError(f"{name} {value}: expected a 24-bit PSN")
        if self._next_psn != self._psn_origin or self._rcv_cum != self._rcv_origin:
            raise RuntimeError(f"QP {self.qpn} already carried traffic: connect it before posting")
        self.remote_qpn = remote_qpn
        self._next_psn = self._snd_una = self._psn_origin = send_psn
        self._rcv_cum = self._rcv_origin = expect_psn

    def post_write(
        self, data: bytes | bytearray | memoryview, remote_addr: int, rkey: int, wr_id: int = 0
    ) -> int:
        """Post an RDMA WRITE of ``data`` to ``remote_addr`` (rkey ``rkey``); returns the message id."""
        return self._post(data, remote_addr, rkey, None, wr_id)

    def post_write_imm(
        self,
        data: bytes | bytearray | memoryview,
        remote_addr: int,
        rkey: int,
        imm: int,
        wr_id: int = 0,
    ) -> int:
        """Post an RDMA WRITE with immediate ``imm`` (32 bits); returns the message id."""
        if not 0 <= imm < 1 << 32:
            raise ValueError(f"immediate {imm}: expected a 32-bit unsigned value")
        return self._post(data, remote_addr, rkey, imm, wr_id)

    def _post(
        self, data: bytes | bytearray | memoryview, remote_addr: int, rkey: int, imm: int | None,
        wr_id: int,
    ) -> int:  # fmt: skip
        if self.remote_qpn is None:
            raise RuntimeError(f"QP {self.qpn} is not connected: call connect(remote_qpn) first")
        if self.error is not None:
            raise RuntimeError(f"QP {self.qpn} is in error ({self.error}): create a new QP")
        view = memoryview(data).cast("B")
        if not len(view) < 1 << 32:
            raise ValueError(f"message of {len(view)} bytes: expected less than 4 GiB")
        if not remote_addr >= 0 and remote_addr + len(view) <= 1 << 64:
            raise ValueError(f"remote address {remote_addr:#x}: expected a 64-bit address")
        if not 0 <= rkey < 1 << 32:
            raise ValueError(f"rkey {rkey}: expected a 32-bit value")
        msg_id = self._next_msg_id
        self._next_msg_id = (msg_id + 1) & 0xFFFFFFFF or 1
        self._send_queue.append(_TxMessage(msg_id, wr_id, imm, view, remote_addr, rkey))
        self._pending_messages += 1
        self._stats.messages_sent += 1
        return msg_id

    @property
    def outstanding(self) -> int:
        """Packets sent and not yet acknowledged."""
        return len(self._outstanding)

    @property
    def pending_messages(self) -> int:
        """Messages posted and not yet completed."""
        return self._pending_messages

    def describe(self) -> dict[str, object]:
        """State for the statistics dict."""
        return {
            "remote_host": self.remote_host,
            "remote_qpn": self.remote_qpn,
            "policy": self.policy.name,
            "cwnd": self.cc.cwnd,
            "outstanding": len(self._outstanding),
            "pending_messages": self._pending_messages,
            "error": self.error,
            "evs": self.ev_table.counts(),
        }

    # -- EV state --------------------------------------------------------------------------------

    def set_ev_state(self, slot: EvSlot, new: EvState, reason: str, now: float) -> None:
        """Change an EV's state, with event and statistics; schedules probing when needed."""
        old = self.ev_table.set_state(slot, new, now)
        if old is None:
            return
        event = EvStateChanged(
            self.qpn, slot.ev, slot.path.label, old.value, new.value, reason, now
        )
        self._shared.events.append(event)
        self._stats.ev_transitions.append(
            {"time": now, "qpn": self.qpn, "ev": slot.ev, "path": slot.path.label,
             "old": old.value, "new": new.value, "reason": reason}
        )  # fmt: skip
        if new is EvState.GOOD and self._recycle is not None:
            self._recycle.clear()  # a path is back: spray over the whole cycle again
        if new in (EvState.ASSUMED_BAD, EvState.UNKNOWN):
            key = self._group_of(slot)
            if key not in self._probe_due:
                self._probe_due[key] = now

    def _retire(self, slot: EvSlot, reason: str, now: float) -> None:
        if slot.state is not EvState.GOOD:
            return
        group = [slot]
        if self._cfg.retire_path:
            group += [s for s in self._groups[self._group_of(slot)]
                      if s is not slot and s.state is EvState.GOOD]  # fmt: skip
        allowed = self.ev_table.good_count() - self._cfg.ev_min_active
        for n, member in enumerate(group):
            if n >= allowed:
                self._stats.retire_suppressed += 1
                break
            self.set_ev_state(member, EvState.ASSUMED_BAD, reason if n == 0 else "path", now)

    def probe(self, slot: EvSlot, now: float) -> int:
        """Send a connectionless probe on ``slot``'s path; returns the probe id."""
        probe_id = self._next_probe_id
        self._next_probe_id = (probe_id + 1) & 0xFFFFFFFF or 1
        if self.remote_qpn is None:
            return probe_id
        prefix = self._prefix(slot.path, wire.DSCP_CONTROL, wire.ECN_NOT_ECT, slot.wire)
        frame = wire.encode_probe(
            prefix, self.remote_qpn, False, slot.plane, slot.spine_hint, slot.wire,
            int(now * NS), probe_id, self.qpn,
        )  # fmt: skip
        self._shared.outbox.append((slot.plane, frame))
        self._probes[probe_id] = (slot, now)
        stats = self._stats
        stats.probes_sent += 1
        stats.packets_sent += 1
        stats.bytes_sent += len(frame)
        self._shared.events.append(PathProbeSent(self.qpn, slot.ev, probe_id, now))
        return probe_id

    def on_probe_reply(self, pkt: wire.ProbePacket, now: float) -> None:
        """A probe came back: reinstate its EV (and path)."""
        found = self._probes.pop(pkt.probe_id, None) or self._late_probes.pop(pkt.probe_id, None)
        if found is None:
            self._stats.drops["unknown_probe"] += 1
            return
        slot, sent = found
        self._stats.probe_replies_received += 1
        self._shared.events.append(
            PathProbeReplied(self.qpn, slot.ev, pkt.probe_id, now - sent, now)
        )
        if slot.state not in (EvState.ASSUMED_BAD, EvState.UNKNOWN):
            return
        key = self._group_of(slot)
        for member in self._groups[key]:
            if member.state in (EvState.ASSUMED_BAD, EvState.UNKNOWN):
                self.set_ev_state(member, EvState.GOOD, "probe_reply", now)
        self._probe_due.pop(key, None)
        # other probes of the group are moot now: no timeout events for them
        for probe_id, (other, _) in list(self._probes.items()):
            if self._group_of(other) == key:
                self._late_probes[probe_id] = self._probes.pop(probe_id)

    def answer_probe(self, pkt: wire.ProbePacket, now: float) -> None:
        """Answer a peer's probe on the mirror path of the one it probed."""
        plane, prefix = self._reply_path(pkt.plane_hint, pkt.spine_hint)
        frame = wire.encode_probe(
            prefix, pkt.src_qp, True, pkt.plane_hint, pkt.spine_hint, pkt.ev, pkt.timestamp,
            pkt.probe_id, self.qpn,
        )  # fmt: skip
        self._shared.outbox.append((plane, frame))
        stats = self._stats
        stats.probe_replies_sent += 1
        stats.packets_sent += 1
        stats.bytes_sent += len(frame)

    def _run_probes(self, now: float) -> None:
        cfg = self._cfg
        late = self._late_probes
        for probe_id, (_, sent) in list(late.items()):
            if sent + LATE_PROBE_FACTOR * cfg.probe_timeout <= now:
                del late[probe_id]
        for probe_id, (slot, sent) in list(self._probes.items()):
            if sent + cfg.probe_timeout <= now:
                late[probe_id] = self._probes.pop(probe_id)
                self._stats.probes_timed_out += 1
                self._shared.events.append(PathProbeTimedOut(self.qpn, slot.ev, probe_id, now))
        for key, due in list(self._probe_due.items()):
            if due > now:
                continue
            waiting = [s for s in self._groups[key]
                       if s.state in (EvState.ASSUMED_BAD, EvState.UNKNOWN)]  # fmt: skip
            if not waiting:
                del self._probe_due[key]
                continue
            self.probe(waiting[self._next_probe_id % len(waiting)], now)
            self._probe_due[key] = now + cfg.probe_interval

    # -- sender ----------------------------------------------------------------------------------

    def frames(self, now: float, out: list[tuple[int, bytes | bytearray]]) -> None:
        """Append the data frames the window allows now (retransmissions first)."""
        if self.error is not None or self.remote_qpn is None:
            return
        cwnd = self.cc.cwnd
        retx = self._retx
        outstanding = self._outstanding
        table = self.ev_table
        while retx and self.inflight < cwnd:
            rec = retx[0]
            if rec.in_net or outstanding.get(rec.psn) is not rec:
                retx.popleft()
                continue
            slot = table.next_other(rec.slot)
            if slot is None:
                return
            retx.popleft()
            rec.retx += 1
            if rec.retx > self._cfg.max_retransmits:
                self._fail(f"packet PSN {rec.psn} retransmitted {rec.retx - 1} times", now)
                return
            del outstanding[rec.psn]
            outstanding[rec.psn] = rec
            self._transmit(rec, slot, now, out, True)
        queue = self._send_queue
        if not queue:
            return
        # the hot path: new packets, state in locals, one timestamp and one stats update per call
        cfg = self._cfg
        mtu = cfg.mtu
        limit = min(cfg.max_outstanding, cfg.rx_window - 1)
        encode = wire.encode_data_split
        join = b"".join
        pack_len = wire.U16.pack
        pack_tail = wire.DATA_TAIL.pack
        append = out.append
        remote_qpn = self.remote_qpn
        ts32 = int(now * NS) & 0xFFFFFFFF
        inflight = self.inflight
        psn = self._next_psn
        tsn = self._tsn
        psn_limit = self._snd_una + limit
        sent = 0
        sent_bytes = 0
        payload_bytes = 0
        pinned = table.pinned
        order = table.order if pinned is None else [pinned]
        count = len(order)
        rr = table.rr
        steer = self._steer and count > 1
        weights = steer and self._weights
        skip = self._steer_skip
        recycle = self._recycle if pinned is None else None
        while queue and inflight < cwnd and psn < psn_limit and count:
            if recycle and psn & EXPLORE_MASK:
                # a path that just delivered a packet without congestion: each path gets new
                # packets at the rate it delivers them (every EXPLORE_EVERY-th packet follows
                # the cycle instead, so a path with new spare capacity gains share)
                # the path of a packet just delivered, its next EV (inline of next_ev)
                load = recycle.popleft().load
                evs = load.evs
                load.rr = n = load.rr + 1
                slot = evs[n % len(evs)]
                if slot.state is not _GOOD:
                    found = load.next_ev()
                    if found is None:
                        continue
                    slot = found
            else:
                rr += 1
                slot = order[rr % count]
                if weights:
                    slot, rr = _weighted(slot, order, rr, count)
                elif steer and slot.load.marked_until > now:
                    # ECN steering: every other pick of a marked path goes to the next EV
                    # instead, halving that path's share while its queue drains
                    skip = not skip
                    if skip:
                        rr += 1
                        slot = order[rr % count]
            msg = queue[0]
            offset = msg.offset
            length = msg.length - offset
            if length > mtu:
                length = mtu
                last = False
                flags = 0 if offset else _FLAG_FIRST
            else:
                last = True
                flags = _FLAG_LAST if offset else _FLAG_LAST | _FLAG_FIRST
                msg.all_sent = True
                queue.popleft()
            end = offset + length
            msg.offset = end
            msg.unacked += 1
            outstanding[psn] = _TxPacket(psn, msg, offset, length, last, slot, now, ts32, tsn)
            if last and msg.imm is not None:
                frame = encode(
                    slot.head, slot.mid, remote_qpn, psn, True, msg.remote_addr + offset, msg.rkey,
                    msg.imm, flags, slot.plane, slot.spine_hint, slot.wire, msg.msg_id,
                    msg.length, offset, ts32, msg.data[offset:end],
                )  # fmt: skip
            else:
                # inline of wire.encode_data_split for WRITE Only, the common packet
                udp_len = _DATA_UDP_BASE + length
                frame = join((
                    slot.head, pack_len(udp_len), slot.mid,
                    pack_tail(
                        udp_len, 0, _OP_WRITE_ONLY, 0, 0xFFFF, remote_qpn,
                        (0x80000000 | (psn & PSN_MASK)) if last else psn & PSN_MASK,
                        msg.remote_addr + offset, msg.rkey, length, _EXT_DATA, flags,
                        slot.plane, slot.spine_hint, slot.wire, msg.msg_id, msg.length, offset,
                        ts32,
                    ),
                    msg.data[offset:end],
                ))  # fmt: skip
            append((slot.plane, frame))
            psn += 1
            tsn += 1
            inflight += length
            sent += 1
            sent_bytes += len(frame)
            payload_bytes += length
        table.rr = rr
        self._steer_skip = skip
        self.inflight = inflight
        self._next_psn = psn
        self._tsn = tsn
        if sent:
            stats = self._stats
            stats.data_packets_sent += sent
            stats.packets_sent += sent
            stats.bytes_sent += sent_bytes
            self.cc.on_packet_sent(nbytes=payload_bytes, now=now)

    def _transmit(
        self,
        rec: _TxPacket,
        slot: EvSlot,
        now: float,
        out: list[tuple[int, bytes | bytearray]],
        retx: bool,
    ) -> None:
        msg = rec.msg
        ts32 = int(now * NS) & 0xFFFFFFFF
        rec.slot = slot
        rec.sent = now
        rec.ts32 = ts32
        rec.tsn = self._tsn
        self._tsn += 1
        rec.in_net = True
        self.inflight += rec.length
        flags = (wire.FLAG_FIRST if rec.offset == 0 else 0) | (wire.FLAG_RETX if retx else 0)
        if rec.last:
            flags |= wire.FLAG_LAST
        offset = rec.offset
        frame = wire.encode_data(
            slot.prefix, self.remote_qpn or 0, rec.psn, rec.last or retx, msg.remote_addr + offset,
            msg.rkey, msg.imm if rec.last else None, flags, slot.plane, slot.spine_hint,
            slot.wire, msg.msg_id, msg.length, offset, ts32, msg.data[offset : offset + rec.length],
        )  # fmt: skip
        out.append((slot.plane, frame))
        stats = self._stats
        stats.data_packets_sent += 1
        stats.packets_sent += 1
        stats.bytes_sent += len(frame)

    def _lose(self, rec: _TxPacket, cause: str, now: float) -> None:
        rec.in_net = False
        self.inflight -= rec.length
        self._retx.append(rec)
        self._stats.retransmits[cause] += 1
        if self.policy.failover and cause != "nack" and rec.slot.state is EvState.GOOD:
            self._retire(rec.slot, cause, now)
            if rec.slot.state is not EvState.GOOD:
                # the path failed: what is still in flight on its retired EVs is lost with it;
                # resend it now on the paths left rather than one ACK timeout per packet
                for other in list(self._outstanding.values()):
                    if other.in_net and other.slot.state is not EvState.GOOD:
                        other.in_net = False
                        self.inflight -= other.length
                        self._retx.append(other)
                        self._stats.retransmits[cause] += 1

    def _acked(self, rec: _TxPacket, now: float) -> int:
        if rec.in_net:
            self.inflight -= rec.length
        # a retransmitted packet may have been acknowledged by its first copy: its latest send
        # order says nothing about what was delivered, so it does not advance loss detection
        if rec.tsn > self._highest_acked_tsn and rec.retx == 0:
            self._highest_acked_tsn = rec.tsn
        msg = rec.msg
        msg.unacked -= 1
        if msg.all_sent and msg.unacked == 0:
            self._complete(msg, now)
        return rec.length

    def _complete(self, msg: _TxMessage, now: float) -> None:
        self._pending_messages -= 1
        self._stats.messages_completed += 1
        self._shared.complete(
            WriteCompleted(
                self.cq, self.qpn, msg.wr_id, "write" if msg.imm is None else "write_imm",
                msg.status, msg.length, msg.imm, msg.remote_addr, now,
            )
        )  # fmt: skip

    def _fail(self, reason: str, now: float) -> None:
        self.error = reason
        self._shared.events.append(QpError(self.qpn, reason, now))
        done: set[int] = set()
        for rec in self._outstanding.values():
            msg = rec.msg
            if msg.msg_id not in done:
                done.add(msg.msg_id)
                msg.status = STATUS_RETRY_EXCEEDED
                self._complete(msg, now)
        for msg in self._send_queue:
            if msg.msg_id not in done:
                msg.status = STATUS_RETRY_EXCEEDED
                self._complete(msg, now)
        self._outstanding.clear()
        self._send_queue.clear()
        self._retx.clear()
        self.inflight = 0

    def on_ack(self, pkt: wire.AckPacket, now: float) -> None:
        """Process a parsed ACK/SACK (see :meth:`on_ack_fields`)."""
        self.on_ack_fields(
            (pkt.outer.dest_qp, pkt.cum_psn, pkt.sack_base, pkt.sack_bitmap, pkt.ts_echo,
             pkt.ce_count, pkt.pkt_count, pkt.flags, pkt.ev),
            now,
        )  # fmt: skip

    def on_ack_fields(self, fields: wire.AckFields, now: float) -> None:
        """Free acknowledged packets, detect losses, feed congestion control."""
        _, cum_psn, sack_base, bitmap, ts_echo, ce_count, pkt_count, flags, ev = fields
        stats = self._stats
        stats.acks_received += 1
        una = self._snd_una
        d = (cum_psn - una) & PSN_MASK
        if d > self._next_psn - una:
            stats.drops["ack_out_of_window"] += 1
            return
        outstanding = self._outstanding
        pop = outstanding.pop
        freed: list[_TxPacket] = []
        if d:
            for psn in range(una, una + d):
                rec = pop(psn, None)
                if rec is not None:
                    freed.append(rec)
            self._snd_una = una = una + d
        if bitmap:
            base = una + ((sack_base - una) & PSN_MASK)
            if base - una < self._rx_window:
                while bitmap:
                    low = bitmap & -bitmap
                    rec = pop(base + low.bit_length() - 1, None)
                    if rec is not None:
                        freed.append(rec)
                    bitmap ^= low
        acked = 0
        recycle = self._recycle
        if freed and recycle is not None:
            marked_load = None
            if flags & _FLAG_ECN_ECHO:
                marked = self.ev_table.by_wire.get(ev)
                marked_load = marked.load if marked is not None else None
            for rec in freed:
                slot = rec.slot
                if slot.load is not marked_load and rec.retx == 0:
                    recycle.append(slot)
        if freed:
            # inline of _acked: free the packets, complete finished messages
            inflight = self.inflight
            top = self._highest_acked_tsn
            for rec in freed:
                length = rec.length
                acked += length
                if rec.in_net:
                    inflight -= length
                # a retransmitted packet may have been acknowledged by an earlier copy; only
                # when the ACK echoes this copy's timestamp does its send order count
                if rec.tsn > top and (rec.retx == 0 or rec.ts32 == ts_echo):
                    top = rec.tsn
                msg = rec.msg
                msg.unacked -= 1
                if msg.all_sent and msg.unacked == 0:
                    self._complete(msg, now)
            self.inflight = inflight
            self._highest_acked_tsn = top
        rtt: float | None = ((int(now * NS) - ts_echo) & 0xFFFFFFFF) / NS
        if rtt is not None and rtt < 60.0:
            stats.rtt.append(rtt)
            srtt = self._srtt
            if srtt is None:
                self._srtt = rtt
                self._rttvar = rtt / 2
            else:
                self._rttvar = 0.75 * self._rttvar + 0.25 * abs(srtt - rtt)
                self._srtt = 0.875 * srtt + 0.125 * rtt
        else:
            rtt = None
        if ce_count:
            stats.ecn_marked_seen += ce_count
        echoed = self.ev_table.by_wire.get(ev)
        if echoed is not None and rtt is not None:
            echoed.load.sample(rtt)
        if self._steer and echoed is not None:
            if flags & _FLAG_ECN_ECHO:
                # the EV of a CE-marked packet: its path is congested
                self._path_congested(echoed, rtt, now)
            elif self._weights:
                self._path_feedback(echoed, rtt, now)
        if self._weights and rtt is not None:
            # the window answers congestion common to every path: its delay is the fastest
            # path's; a path slower than that is the spraying weights' business
            fastest = self.ev_table.fastest_rtt()
            if fastest and rtt > fastest:
                rtt = fastest
        self.cc.on_ack(acked_bytes=acked, rtt=rtt, ce_count=ce_count, pkt_count=pkt_count, now=now)
        if acked:
            self._backoff = 0
            self._last_ack = now
        limit = self._highest_acked_tsn - self._cfg.reorder_threshold
        lost: list[_TxPacket] = []
        for rec in outstanding.values():
            if rec.tsn > limit:
                break
            if rec.in_net:
                # overtaken by later packets, but on a path with a longer queue than theirs a
                # packet is late, not lost, until it is older than that path's RTT allows
                load = rec.slot.load
                if load.srtt and now - rec.sent < load.srtt + 4.0 * load.rttvar:
                    continue
                lost.append(rec)
        if lost:
            nbytes = 0
            for rec in lost:
                nbytes += rec.length
                self._lose(rec, "sack", now)
            self.cc.on_loss(nbytes=nbytes, timeout=False, now=now)

    def on_nack(self, pkt: wire.NackPacket, now: float) -> None:
        """A trimmed packet (retransmit at once, EV stays GOOD) or a refused one (fail the message)."""
        stats = self._stats
        stats.nacks_received += 1
        una = self._snd_una
        d = (pkt.psn - una) & PSN_MASK
        rec = self._outstanding.get(una + d) if d < self._next_psn - una else None
        if rec is None:
            stats.drops["nack_stale"] += 1
            return
        if pkt.flags & wire.FLAG_ACCESS:
            del self._outstanding[rec.psn]
            rec.msg.status = STATUS_REMOTE_ACCESS_ERROR
            self._acked(rec, now)
            return
        if not rec.in_net or rec.ts32 != pkt.ts_echo:
            stats.drops["nack_stale"] += 1
            return
        stats.trims_seen += 1
        local = False
        if self._steer:
            self._path_congested(rec.slot, self._srtt, now)
            if self._weights:
                # trimmed on a path slower than the fastest: that path's congestion, which
                # the weights steer around; else congestion of every path, the window's
                fastest = self.ev_table.fastest_rtt()
                local = bool(fastest) and rec.slot.load.srtt > fastest * self._w_excess
        self._lose(rec, "nack", now)
        if not local:
            self.cc.on_trim(nbytes=rec.length, now=now)

    def _path_feedback(self, slot: EvSlot, rtt: float | None, now: float) -> None:
        """An unmarked ACK echoing ``slot``: the path's delay decides between decrease (its
        smoothed RTT exceeds the fastest path's by ``path_delay_excess`` of it: its queue is
        longer than the others') and additive recovery of its share."""
        load = slot.load
        if rtt is not None:
            fastest = self.ev_table.fastest_rtt()
            if fastest and load.srtt > fastest * self._w_excess:
                self._path_congested(slot, load.srtt, now)
                return
        if load.weight < 1.0:
            load.weight = min(1.0, load.weight + self._w_inc)

    def _path_congested(self, slot: EvSlot, rtt: float | None, now: float) -> None:
        """A CE echo or a trim from ``slot``'s path: lighten it (congestion, never failure)."""
        load = slot.load
        hold = rtt if rtt is not None else self._steer_hold
        if not self._weights:
            load.marked_until = now + hold
            return
        if now < load.hold_until:
            return
        # multiplicative decrease, at most once per RTT per path
        load.weight = max(self._w_min, load.weight * self._w_dec)
        load.hold_until = now + hold
        self.ev_table.normalise_weights()

    # -- receiver --------------------------------------------------------------------------------

    def _reply_path(self, plane: int, spine: int) -> tuple[int, bytes]:
        entry = self._reply.get((plane, spine))
        if entry is None:
            entry = self._reply_plane.get(plane, self._reply_any)
        return entry

    def on_data(self, pkt: wire.DataPacket, now: float) -> None:
        """Place a parsed data packet (or NACK it when trimmed) and schedule the ACK."""
        out = pkt.outer
        self.on_data_fields(
            (
                out.dest_qp, out.psn, out.ack_req, out.ecn, pkt.opcode, pkt.va, pkt.rkey,
                pkt.dma_len, pkt.imm, pkt.plane_hint, pkt.spine_hint, pkt.ev, pkt.msg_id,
                pkt.msg_len, pkt.msg_offset, pkt.timestamp, pkt.payload, pkt.trimmed,
            ),
            now,
        )  # fmt: skip

    def on_data_fields(self, fields: wire.DataFields, now: float) -> None:
        """The receiver's data path on the fields of :func:`host.transport.wire.decode_data`."""
        (
            _, psn24, ack_req, ecn, _, va, rkey, dma_len, imm, plane, spine, ev, msg_id, msg_len,
            msg_offset, ts, payload, trimmed,
        ) = fields  # fmt: skip
        stats = self._stats
        cum = self._rcv_cum
        d = (psn24 - cum) & PSN_MASK
        if d >= PSN_HALF:
            stats.drops["duplicate"] += 1
            self._note_ack(ev, ts, plane, spine, ecn, now, True)
            return
        if d >= self._rx_window:
            stats.drops["psn_out_of_window"] += 1
            return
        psn = cum + d
        rcv = self._rcv_set
        if psn in rcv:
            stats.drops["duplicate"] += 1
            self._note_ack(ev, ts, plane, spine, ecn, now, True)
            return
        if trimmed:
            stats.trims_seen += 1
            if self.policy.trim_nack:
                self._nack(wire.FLAG_TRIMMED, plane, spine, ev, ts, psn24, now)
            else:
                stats.drops["trimmed_no_nack"] += 1
            return
        msgs = self._rx_msgs
        msg = msgs.get(msg_id)
        if msg is None:
            if len(msgs) >= MAX_RX_MESSAGES:
                stats.drops["too_many_messages"] += 1
                return
            msg = msgs[msg_id] = _RxMessage(msg_len, va - msg_offset)
        elif msg.length != msg_len:
            stats.drops["inconsistent_message"] += 1
            return
        region = self._regions.get(rkey)
        # bounds check, then copy: the only write the receiver ever makes
        if region is not None and region.addr <= va and va + dma_len <= region.end:
            start = va - region.addr
            region.view[start : start + dma_len] = payload
            stats.payload_bytes_placed += dma_len
        else:
            stats.drops["bad_rkey" if region is None else "out_of_region"] += 1
            msg.failed = True
            self._nack(wire.FLAG_ACCESS, plane, spine, ev, ts, psn24, now)
        # the PSN is consumed either way
        if d == 0:
            cum += 1
            while cum in rcv:
                rcv.remove(cum)
                cum += 1
            self._rcv_cum = cum
        else:
            rcv.add(psn)
            if psn > self._rcv_max:
                self._rcv_max = psn
            if psn < self._ack_lo:
                self._ack_lo = psn
        if imm is not None:
            msg.imm = imm
        msg.received += dma_len
        if msg.received >= msg.length:
            del msgs[msg_id]
            self._msn += 1
            if not msg.failed:
                stats.messages_received += 1
                if msg.imm is not None:
                    self._shared.complete(
                        WriteImmReceived(
                            self.cq, self.qpn, 0, "recv_write_imm", STATUS_OK, msg.length,
                            msg.imm, msg.base, now,
                        )
                    )  # fmt: skip
        if ecn == _ECN_CE:
            self._ack_ce += 1
            self._ack_ce_ev = ev
        # inline of _note_ack for the common case
        pending = self._ack_pending + 1
        self._ack_pending = pending
        self._ack_echo = (ev, ts, plane, spine)
        if ack_req or pending >= self._ack_every:
            self._send_ack(now)
        elif self._ack_deadline is None:
            self._ack_deadline = now + self._ack_delay

    def _note_ack(
        self, ev: int, ts: int, plane: int, spine: int, ecn: int, now: float, urgent: bool
    ) -> None:
        self._ack_pending += 1
        self._ack_echo = (ev, ts, plane, spine)
        if urgent or self._ack_pending >= self._cfg.ack_every:
            self._send_ack(now)
        elif self._ack_deadline is None:
            self._ack_deadline = now + self._cfg.ack_delay

    def _send_ack(self, now: float) -> None:
        if self.remote_qpn is None:
            self._stats.drops["not_connected"] += 1
            return
        ev, ts, plane, spine = self._ack_echo
        flags = 0
        if self._ack_ce:
            # echo the EV of a CE-marked packet, so the sender knows which path is loaded
            flags = _FLAG_ECN_ECHO
            ev = self._ack_ce_ev
        cum = self._rcv_cum
        rcv = self._rcv_set
        bitmap = 0
        base = cum
        if rcv:
            # the bitmap covers 64 PSNs: start at the cumulative PSN when that reaches the newest,
            # else at the oldest PSN received since the previous ACK, so each is reported once
            if self._rcv_max - cum >= 64:
                base = max(cum, min(self._ack_lo, self._rcv_max - 63))
            for p in rcv:
                i = p - base
                if 0 <= i < 64:
                    bitmap |= 1 << i
        out_plane, prefix = self._reply_path(plane, spine)
        frame = wire.encode_ack(
            prefix, self.remote_qpn, self._msn, flags, plane, spine, ev, ts, cum, base,
            bitmap, self._ack_ce, self._ack_pending,
        )  # fmt: skip
        self._shared.outbox.append((out_plane, frame))
        stats = self._stats
        stats.acks_sent += 1
        stats.packets_sent += 1
        stats.bytes_sent += len(frame)
        self._ack_pending = 0
        self._ack_ce = 0
        self._ack_deadline = None
        self._ack_lo = 1 << 62

    def _nack(
        self, flags: int, plane: int, spine: int, ev: int, ts: int, psn24: int, now: float
    ) -> None:
        if self.remote_qpn is None:
            self._stats.drops["not_connected"] += 1
            return
        out_plane, prefix = self._reply_path(plane, spine)
        frame = wire.encode_nack(
            prefix, self.remote_qpn, flags, plane, spine, ev, ts, psn24, self._rcv_cum
        )
        self._shared.outbox.append((out_plane, frame))
        stats = self._stats
        stats.nacks_sent += 1
        stats.packets_sent += 1
        stats.bytes_sent += len(frame)

    # -- timers ----------------------------------------------------------------------------------

    def _first_in_net(self) -> _TxPacket | None:
        for rec in self._outstanding.values():
            if rec.in_net:
                return rec
        return None

    def _base_timeout(self) -> float:
        """The ACK timeout before backoff: RFC 6298's srtt + 4 x rttvar, at least ``rto_min``
        (default: the MRC ACK timeout 1.024 us x 2^t, also used before any RTT sample), at most
        1.024 us x 2^max_backoff_exp. Queues that grow the RTT beyond the configured timeout
        (slow emulated links, descheduled agents) stretch it instead of firing it spuriously."""
        srtt = self._srtt
        if srtt is None:
            return self._rto_floor
        rto = srtt + 4.0 * self._rttvar
        if rto < self._rto_floor:
            return self._rto_floor
        return rto if rto < self._rto_max else self._rto_max

    def _timeout(self) -> float:
        return min(self._base_timeout() * (1 << self._backoff), self._rto_max)

    def _tlp_due(self, first: _TxPacket) -> float | None:
        """When the tail-loss probe fires (None without an RTT estimate): when the oldest packet
        in flight has waited two smoothed RTTs (plus the receiver's ACK delay), at most once per
        smoothed RTT."""
        srtt = self._srtt
        if not self._cfg.tlp or srtt is None:
            return None
        due = first.sent + 2.0 * srtt + self._cfg.ack_delay
        return due if due > self._tlp_next else self._tlp_next

    def _send_tlp(self, now: float) -> None:
        """Tail-loss probe: re-send the oldest packets still unacknowledged after the probe
        timeout (at most ``TLP_PACKETS``) on other EVs. Not a loss: no EV is retired, the
        window is unchanged, the originals stay in flight; the copy's ACK (or the duplicate ACK
        it provokes when only ACKs were lost) frees them before the ACK timeout would."""
        srtt = self._srtt or 0.0
        self._tlp_next = now + srtt
        if self.remote_qpn is None:
            return
        due = now - 2.0 * srtt
        out = self._shared.outbox
        stats = self._stats
        count = 0
        for rec in self._outstanding.values():
            if count >= TLP_PACKETS:
                break
            if not rec.in_net or rec.sent > due:
                continue
            slot = self.ev_table.next_other(rec.slot)
            if slot is None:
                return
            msg = rec.msg
            ts32 = int(now * NS) & 0xFFFFFFFF
            rec.ts32 = ts32  # the copy's ACK echoes this; the original's is accepted too
            flags = (wire.FLAG_FIRST if rec.offset == 0 else 0) | wire.FLAG_RETX
            if rec.last:
                flags |= wire.FLAG_LAST
            offset = rec.offset
            frame = wire.encode_data(
                slot.prefix, self.remote_qpn, rec.psn, True, msg.remote_addr + offset, msg.rkey,
                msg.imm if rec.last else None, flags, slot.plane, slot.spine_hint, slot.wire,
                msg.msg_id, msg.length, offset, ts32, msg.data[offset : offset + rec.length],
            )  # fmt: skip
            out.append((slot.plane, frame))
            count += 1
            stats.data_packets_sent += 1
            stats.packets_sent += 1
            stats.bytes_sent += len(frame)
        stats.tail_loss_probes += count

    def next_timer(self) -> float | None:
        """The earliest time this QP needs handle_timer."""
        when: float | None = self._ack_deadline
        first = self._first_in_net()
        if first is not None:
            rto = max(first.sent, self._last_ack) + self._timeout()
            when = rto if when is None else min(when, rto)
            tlp = self._tlp_due(first)
            if tlp is not None and tlp < rto:
                when = tlp if when is None else min(when, tlp)
        if self._probe_due:
            due = min(self._probe_due.values())
            when = due if when is None else min(when, due)
        if self._probes:
            due = min(sent for _, sent in self._probes.values()) + self._cfg.probe_timeout
            when = due if when is None else min(when, due)
        return when

    def handle_timer(self, now: float) -> None:
        """Delayed ACK, ACK timeout, probes."""
        if self._ack_deadline is not None and self._ack_deadline <= now:
            self._send_ack(now)
        first = self._first_in_net()
        if first is not None:
            # the timer restarts on every ACK that acknowledges data (RFC 6298, 5.3)
            expiry = max(first.sent, self._last_ack) + self._timeout()
            tlp = self._tlp_due(first)
            if tlp is not None and tlp <= now < expiry:
                self._send_tlp(now)
            elif expiry <= now:
                # every packet older than the un-backed-off timeout is lost, not just the oldest:
                # else each packet of a lost window would cost one more doubled timeout
                base = self._base_timeout()
                lost = [r for r in self._outstanding.values() if r.in_net and r.sent + base <= now]
                nbytes = 0
                for rec in lost:
                    nbytes += rec.length
                    self._lose(rec, "rto", now)
                self.cc.on_loss(nbytes=nbytes, timeout=True, now=now)
                self._stats.rtos += 1
                self._backoff = min(
                    self._backoff + 1, self._cfg.max_backoff_exp - self._cfg.ack_timeout_exp
                )
                self._shared.events.append(
                    RetransmitTimeout(
                        self.qpn, len(lost), self._cfg.ack_timeout_exp + self._backoff, now
                    )
                )
        if self._probe_due or self._probes:
            self._run_probes(now)
