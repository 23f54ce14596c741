"""The state a queue pair's parts share: records of messages and packets in flight, constants of
the hot paths, and :class:`QpState`, the attributes of a QP declared once for its parts
(:mod:`host.transport.sender`, :mod:`host.transport.receiver`, :mod:`host.transport.loss`,
:mod:`host.transport.paths`)."""

from __future__ import annotations

import collections
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from host.transport import wire
from host.transport.balancers import Balancer
from host.transport.cc import CongestionControl
from host.transport.config import StackConfig
from host.transport.events import (
    STATUS_OK,
    Completion,
    Event,
)
from host.transport.evs import EvFormat, EvSlot, EvState, EvTable, PathLoad, ProfileStates
from host.transport.policy import Policy
from host.transport.region import MemoryRegion, RegionTable
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
#: mrc_qp_attr.retry.exp_cnt value meaning "no limit" (mrc.h)
RETRY_EXP_UNLIMITED = 25
# recycled EVs kept at most (the newest)
RECYCLE_MAX = 4096
#: recycled paths looked at beyond the first when its NIC is full: one whose NIC has room and
#: whose path is at full weight (no congestion of late) goes first, so that a NIC never idles
#: behind another's; a congested path's turn stays in the queue
RECYCLE_SCAN = 8
# one packet in this many (a power of two) takes the spraying cycle even when EVs are recycled
EXPLORE_EVERY = 16
EXPLORE_MASK = EXPLORE_EVERY - 1
# a SACK-inferred loss needs this many later packets of the packet's own path acknowledged
# (paths deliver in order; other paths' packets overtake freely)
SAME_PATH_REORDER = 3
# ... and without such evidence, the packet's age must exceed its path's srtt + 4 rttvar by this
# factor (on a queue that is growing, delivered packets are older than the smoothed RTT)
LATE_FACTOR = 1.5


def _weighted(slot: EvSlot, cycle: list[EvSlot], rr: int, count: int) -> EvSlot:
    """Weighted spraying: a path of weight w takes a fraction w of its picks of its plane's
    cycle, the others move on along it (to the plane's next EV, usually of another path)."""
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
        slot = cycle[rr % count]
        load = slot.load
    return slot


class Shared:
    """What every QP of a context shares: configuration, counters, output queues, regions."""

    def __init__(self, config: StackConfig, regions: RegionTable) -> None:
        self.config = config
        self.regions = regions
        self.stats = Stats()
        self.events: collections.deque[Event] = collections.deque()
        self.outbox: list[tuple[int, bytes | bytearray]] = []
        self.cqs: dict[int, collections.deque[Completion]] = {}
        self.ports_down: set[int] = set()  #: planes whose NIC is down (no probes sent there)
        #: QPs entered since the context last looked (:func:`entry_point`), by number: the
        #: only ones whose frames waiting or next timer can have changed
        self.touched: dict[int, QpState] = {}

    def complete(self, entry: Completion) -> None:
        """Deliver a completion to its CQ and as an event."""
        queue = self.cqs.get(entry.cq)
        if queue is not None:
            queue.append(entry)
        self.events.append(entry)


_Method = TypeVar("_Method", bound=Callable[..., Any])


def entry_point(method: _Method) -> _Method:
    """Mark a QP method that a driver, a peer's packet or the application calls: afterwards the
    QP is in its context's ``touched`` set, so that the context (:mod:`host.transport.api`)
    looks again at its frames waiting and its next timer -- and at no other QP's. A context of
    a thousand QPs (a receiver of a 1,023-to-1 incast) then pays per event for the QPs the
    event touched, not for all of them."""

    @functools.wraps(method)
    def entered(self: QpState, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        finally:
            self._shared.touched[self.qpn] = self

    return cast(_Method, entered)


class TxMessage:
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


class TxPacket:
    __slots__ = ("psn", "msg", "offset", "length", "last", "slot", "sent", "ts32", "tsn", "retx",
                 "losses", "in_net", "path_sn")  # fmt: skip

    def __init__(
        self, psn: int, msg: TxMessage, offset: int, length: int, last: bool, slot: EvSlot,
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
        self.tsn = tsn  #: the QP's send order of the latest copy
        self.retx = 0  #: times sent again
        #: times lost other than trimmed (timeouts, SACK and late losses, a retired EV): the
        #: count max_retransmits bounds. A trim NACK proves the peer alive and its path up
        self.losses = 0
        self.in_net = True
        #: the send order of the latest copy among the packets of its path (``PathLoad.sent``)
        self.path_sn = slot.load.sent
        slot.load.sent += 1


class RxMessage:
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


class QpState:
    """The state of a queue pair that its parts share (sender, receiver, loss recovery, path
    choice), declared once; :class:`host.transport.qp.QueuePair` sets it up."""

    _shared: Shared
    _regions: dict[int, MemoryRegion]
    _cfg: StackConfig
    _rx_window: int
    _ack_every: int
    _ack_delay: float
    _ack_ce_now: bool
    _steer: bool
    _steer_skip: bool
    _steer_hold: float
    _weights: bool
    _w_dec: float
    _w_inc: float
    _w_min: float
    _w_excess: float
    _cap_delay: bool
    _recycle: collections.deque[EvSlot] | None
    _balancer: Balancer | None
    _stats: Stats
    qpn: int
    remote_host: str
    paths: list[Path]
    #: the peer's NIC addresses (every plane): the only sources of packets this QP takes
    peer_addresses: frozenset[bytes]
    domain: int  #: protection domain: the regions this QP's peer may write
    rx_fault: str | None  #: the protection fault that stopped the receiver, if any
    cq: int
    policy: Policy
    remote_qpn: int | None
    cc: CongestionControl
    error: str | None
    ev_table: EvTable
    ev_profile: ProfileStates
    _ev_mode: EvFormat
    _reply_ev: dict[tuple[int, int], tuple[int, bytes]]
    _plane_path: dict[int, Path]
    _reply: dict[tuple[int, int], tuple[int, bytes]]
    _reply_plane: dict[int, tuple[int, bytes]]
    _reply_any: tuple[int, bytes]
    _groups: dict[int, list[EvSlot]]
    _probe_due: dict[int, float]
    _probe_misses: dict[int, int]
    _probes: dict[int, tuple[EvSlot, float]]
    _late_probes: dict[int, tuple[EvSlot, float]]
    _next_probe_id: int
    _probes_backed_off: bool
    _send_queue: collections.deque[TxMessage]
    _outstanding: dict[int, TxPacket]
    _probed: dict[int, TxPacket]
    _retx: collections.deque[TxPacket]
    _next_psn: int
    _snd_una: int
    _psn_origin: int
    _next_msg_id: int
    _tsn: int
    _highest_acked_tsn: int
    inflight: int
    _backoff: int
    _timeouts: int  # ACK timeouts in a row (since data was last acknowledged)
    _stall_since: float | None  # since when work waits with no GOOD EV to go on (None: not)
    _last_hop_trim: float  # when a NACK last said the receiver's own leaf trimmed a packet
    _pending_messages: int
    _srtt: float | None
    _rttvar: float
    _tlp_next: float
    _last_ack: float
    _rto_floor: float
    _rto_max: float
    _rcv_cum: int
    _rcv_origin: int
    _rcv_set: set[int]
    _rcv_max: int
    _rx_msgs: dict[int, RxMessage]
    _msn: int
    _ack_pending: int
    _ack_deadline: float | None
    #: an ACK request arrived while PSNs were missing: ACK again once they are all in
    _ack_requested: bool
    _ack_requests: bool  #: StackConfig.ack_requests
    #: a data packet was placed (the first one is acknowledged at once)
    _rx_started: bool
    _ack_ce: int
    _ack_ce_ev: int
    _ack_echo: tuple[int, int, int, int]
    _ack_lo: int
    _ack_hi: int

    # -- what one part calls of another (defined by that part) ---------------------------------

    def _prefix(
        self, path: Path, dscp: int, ecn: int, ev: int, dst: object = None,
        mode: EvFormat = EvFormat.SRV6,
    ) -> bytes:  # fmt: skip
        """The frame prefix of ``path`` (:class:`host.transport.qp.QueuePair`)."""
        raise NotImplementedError

    def _slot_prefix(self, slot: EvSlot, dscp: int, ecn: int) -> bytes:
        """The frame prefix of an EV (:class:`host.transport.qp.QueuePair`)."""
        raise NotImplementedError

    def _lose(self, rec: TxPacket, cause: str, now: float, reason: str | None = None) -> None:
        """Declare a packet lost (:class:`host.transport.loss.LossRecovery`)."""
        raise NotImplementedError

    def _late_bound(self, load: PathLoad) -> float:
        """How long a packet of a path may stay unacknowledged before it is late
        (:class:`host.transport.loss.LossRecovery`)."""
        raise NotImplementedError

    def _repaired_by_probe(self, freed: list[TxPacket], ts_echo: int, now: float) -> None:
        """Judge packets acknowledged through their tail-loss probe's copy
        (:class:`host.transport.loss.LossRecovery`)."""
        raise NotImplementedError

    def _fail(self, reason: str, now: float) -> None:
        """Give up: fail every message of the QP (:class:`host.transport.sender.Sender`)."""
        raise NotImplementedError

    def _send_ack(self, now: float) -> None:
        """Send the pending ACK (:class:`host.transport.receiver.Receiver`)."""
        raise NotImplementedError

    def _retire(self, slot: EvSlot, reason: str, now: float) -> None:
        """Retire an EV, or its path (:class:`host.transport.paths.PathChoice`)."""
        raise NotImplementedError

    def _run_probes(self, now: float) -> None:
        """Send the probes that are due (:class:`host.transport.paths.PathChoice`)."""
        raise NotImplementedError

    def _wake_probes(self, now: float) -> None:
        """Work again: backed-off probes come forward (:class:`host.transport.paths.PathChoice`)."""
        raise NotImplementedError

    def _path_feedback(self, slot: EvSlot, rtt: float | None, now: float) -> None:
        """An unmarked ACK from ``slot``'s path (:class:`host.transport.paths.PathChoice`)."""
        raise NotImplementedError

    def _path_congested(self, slot: EvSlot, rtt: float | None, now: float) -> None:
        """Congestion on ``slot``'s path (:class:`host.transport.paths.PathChoice`)."""
        raise NotImplementedError

    @property
    def first_psn(self) -> int:
        """The first PSN this QP sends (``connect``'s ``send_psn``, RDMA's sq_psn)."""
        return self._psn_origin

    @property
    def carried_traffic(self) -> bool:
        """The QP has sent or received data (:class:`host.transport.qp.QueuePair`)."""
        raise NotImplementedError

    def set_ev_state(self, slot: EvSlot, new: EvState, reason: str, now: float) -> None:
        """Change an EV's state (:class:`host.transport.paths.PathChoice`)."""
        raise NotImplementedError

    def _reply_path(self, plane: int, spine: int, ev: int = 0) -> tuple[int, bytes]:
        """The mirror path of a reply (:class:`host.transport.paths.PathChoice`)."""
        raise NotImplementedError
