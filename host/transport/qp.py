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

Every timer, retry count and window above is read from the QP's config (:attr:`QueuePair.config`):
its context's, or one of its own given at creation; :meth:`QueuePair.reconfigure` changes the
timers and limits of a running QP.
"""

from __future__ import annotations

import collections
import math
import random
import zlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

from host.transport import wire
from host.transport.balancers import Balancer, make_balancer
from host.transport.cc import CcProfile, CongestionControl, create
from host.transport.config import ACK_TIMEOUT_UNIT, LIVE_FIELDS, ConfigError, StackConfig
from host.transport.evs import (
    EvFormat,
    EvProfile,
    EvSlot,
    EvTable,
    GeneratedEvProfile,
    ProfileStates,
    build_slots,
)
from host.transport.policy import Policy
from host.transport.qp_state import (
    RECYCLE_MAX,
    RxMessage,
    Shared,
    TxMessage,
    TxPacket,
    _addr_bytes,
    entry_point,
)
from topologies.config import BASE_RTT_LINKS, path_rtt

if TYPE_CHECKING:
    from topologies import Path

from host.transport.loss import LossRecovery
from host.transport.paths import PathChoice
from host.transport.receiver import Receiver
from host.transport.sender import Sender


class QueuePair(Sender, Receiver, LossRecovery, PathChoice):
    """One reliable connection to a QP of a remote host, over many EVs: the sender, the receiver,
    loss recovery and path choice (:mod:`host.transport.qp_state` declares what they share)."""

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
        profile: ProfileStates | None = None,
        config: StackConfig | None = None,
    ) -> None:
        # the QP's own config (its timers, retry counts, windows...), else its context's
        cfg = shared.config if config is None else config
        self._shared = shared
        self._regions = shared.regions.by_rkey
        self._cfg = cfg
        # MRC's spraying (a UET balancer, when the policy names one, replaces all of it)
        mrc_spray = policy.spray and policy.balancer is None
        self._steer = cfg.ecn_steering and mrc_spray
        self._steer_skip = False
        self._weights = cfg.steering == "weights"
        self._w_dec = 1.0 - cfg.path_weight_decrease
        self._w_inc = cfg.path_weight_increase
        self._w_min = cfg.path_weight_min
        self._w_excess = 1.0 + cfg.path_delay_excess
        # the window's delay: the acknowledged packet's RTT, or capped at the fastest path's
        self._cap_delay = self._weights and not cfg.cc_raw_delay
        # EVs of packets acknowledged without a CE echo, reused first (recycled spraying)
        self._recycle: collections.deque[EvSlot] | None = (
            collections.deque(maxlen=RECYCLE_MAX) if cfg.ev_recycle and mrc_spray else None
        )
        self._stats = shared.stats
        self.qpn = qpn
        self.remote_host = remote_host
        self.paths = list(paths)
        self.peer_addresses = frozenset(path.dst_nic.address.packed for path in self.paths)
        self.domain = 0
        self.rx_fault: str | None = None
        self.cq = cq
        self.policy = policy
        self.remote_qpn = remote_qpn
        self.cc: CongestionControl = create(cc, mtu=cfg.mtu, config=_cc_config(cfg, self.paths))
        self.error: str | None = None
        if profile is None:
            chosen_profile = ev_profile or GeneratedEvProfile()
            min_active = chosen_profile.min_active
            profile = ProfileStates(
                0, chosen_profile, cfg.ev_min_active if min_active is None else min_active
            )
        self.ev_profile = profile  #: the EV profile (its states are shared with its other QPs)
        self._ev_mode = profile.mode
        slots = build_slots(self.paths, profile.profile, cfg.ev_count, rng)
        dscp = wire.DSCP_TRIMMABLE if policy.trimmable else wire.DSCP_DEFAULT
        for slot in slots:
            slot.prefix = self._slot_prefix(slot, dscp, wire.ECN_ECT0)
            slot.head, slot.mid = wire.split_prefix(slot.prefix)
            slot.ext_len = wire.ext_len(slot.prefix)
        self.ev_table = EvTable(slots, rng)
        #: UET's load balancer over the table's EVs (the ``uet-*`` policies), else None
        self._balancer: Balancer | None = (
            None if policy.balancer is None else make_balancer(policy.balancer, len(slots), rng)
        )
        profile.attach(self.ev_table)
        if not policy.spray:
            if policy.single_ev == "hash":
                salt = rng.getrandbits(32)
                key = zlib.crc32(f"{qpn}/{remote_host}".encode()) ^ salt
                chosen = slots[key % len(slots)]
            else:
                chosen = slots[0]
            self.ev_table.pin(chosen)
        # replies (ACK, NACK, probe reply) go back on the mirror path: same plane and spine
        # (as the QP's own EVs are sent: with an SRH when its format has one)
        self._reply: dict[tuple[int, int], tuple[int, bytes]] = {}
        self._reply_plane: dict[int, tuple[int, bytes]] = {}
        srh = profile.profile.fmt.srh
        for path in self.paths:
            spine = 0xFF if path.spine is None else path.spine
            reply = self._prefix(
                path, wire.DSCP_CONTROL, wire.ECN_NOT_ECT, 0,
                dst=path.srh_carrier if srh else None, srh=path.srh_segment if srh else None,
            )  # fmt: skip
            entry = (path.plane, reply)
            self._reply.setdefault((path.plane, spine), entry)
            self._reply_plane.setdefault(path.plane, entry)
        self._reply_any = next(iter(self._reply.values()))
        # STEV / UDP: replies go to the peer NIC's plain address carrying the echoed EV (ECMP
        # spreads them as it spreads the data); prefixes cached per (plane, EV)
        self._reply_ev: dict[tuple[int, int], tuple[int, bytes]] = {}
        self._plane_path = {path.plane: path for path in reversed(self.paths)}
        # probe groups: a path (retire_path) or a single EV
        self._groups: dict[int, list[EvSlot]] = collections.defaultdict(list)
        for slot in slots:
            self._groups[self._group_of(slot)].append(slot)
        self._probe_due: dict[int, float] = {}
        self._probe_misses: dict[int, int] = {}  # probe group -> probes that timed out in a row
        self._probes: dict[int, tuple[EvSlot, float]] = {}  # waiting for a reply
        self._late_probes: dict[int, tuple[EvSlot, float]] = {}  # timed out, reply still welcome
        self._next_probe_id = 1
        self._probes_backed_off = False  # a probe is due later than probe_interval (idle QP)
        # sender
        self._send_queue: collections.deque[TxMessage] = collections.deque()
        self._outstanding: dict[int, TxPacket] = {}
        self._probed: dict[int, TxPacket] = {}  # PSN -> packet whose tail-loss probe is out
        self._retx: collections.deque[TxPacket] = collections.deque()
        self._next_psn = 0
        self._snd_una = 0
        self._psn_origin = 0
        self._next_msg_id = 1
        self._tsn = 0
        self._highest_acked_tsn = -1
        self.inflight = 0
        self._backoff = 0
        self._timeouts = 0
        self._stall_since: float | None = None
        self._last_hop_trim = -math.inf  # when a NACK last said the receiver's leaf trimmed
        self._pending_messages = 0
        # RTT estimate (RFC 6298) for the adaptive ACK timeout and the tail-loss probe
        self._srtt: float | None = None
        self._rttvar = 0.0
        self._tlp_next = 0.0  # no tail-loss probe before this time (one per smoothed RTT)
        self._last_ack = 0.0  # the last ACK that acknowledged data (restarts the ACK timeout)
        self._apply_limits(cfg)
        # receiver
        self._rcv_cum = 0
        self._rcv_origin = 0
        self._rcv_set: set[int] = set()
        self._rcv_max = -1
        self._rx_msgs: dict[int, RxMessage] = {}
        self._msn = 0
        self._ack_pending = 0
        self._ack_deadline: float | None = None
        self._ack_requested = False
        self._rx_started = False
        self._ack_ce = 0
        self._ack_ce_ev = 0  # EV of the latest CE-marked packet since the previous ACK
        self._ack_echo = (0, 0, 0, 0xFF)  # EV, timestamp, plane, spine
        self._ack_lo = 1 << 62  # lowest out-of-order PSN received since the last ACK
        self._ack_hi = -1  # highest out-of-order PSN received since the last ACK

    # -- configuration -----------------------------------------------------------------------------

    @property
    def config(self) -> StackConfig:
        """The config this QP runs with: its own, or its context's."""
        return self._cfg

    @entry_point
    def reconfigure(self, config: StackConfig) -> None:
        """Run with ``config`` from now on; it may differ from the current one only in
        ``LIVE_FIELDS`` (timers, retry counts, windows), else :class:`ConfigError`.

        Effects are immediate: the next ACK timeout is computed from the new ``ack_timeout_exp``
        (the driver asks :meth:`next_timer` again), the retry counts apply to the timeouts
        already counted (a QP already past its new limit fails at its next timeout), the
        backoff is capped anew, and the windows bound the next packets sent and received."""
        fixed = [name for name in self._cfg.changed(config) if name not in LIVE_FIELDS]
        if fixed:
            raise ConfigError(
                f"QP {self.qpn}: StackConfig.{fixed[0]} is fixed when the QP is created (a "
                f"running QP changes only {', '.join(LIVE_FIELDS)})"
            )
        self._cfg = config
        self._apply_limits(config)

    def _apply_limits(self, cfg: StackConfig) -> None:
        """Derive the QP's cached timers and windows from ``cfg``'s ``LIVE_FIELDS``."""
        self._rx_window = cfg.rx_window
        self._ack_every = cfg.ack_every
        self._ack_ce_now = cfg.ack_ce_at_once
        self._ack_requests = cfg.ack_requests
        self._ack_delay = cfg.ack_delay
        self._steer_hold = cfg.ack_delay * 10
        self._rto_floor = cfg.ack_timeout if cfg.rto_min is None else cfg.rto_min
        self._rto_max = ACK_TIMEOUT_UNIT * (1 << cfg.max_backoff_exp)
        self._backoff = min(self._backoff, cfg.max_backoff_exp - cfg.ack_timeout_exp)

    # -- construction helpers --------------------------------------------------------------------

    def _prefix(
        self, path: Path, dscp: int, ecn: int, ev: int, dst: object = None,
        mode: EvFormat = EvFormat.SRV6, srh: object = None,
    ) -> bytes:  # fmt: skip
        """The frame prefix towards ``dst`` (default: the path's carrier), with a
        single-segment SRH holding ``srh`` when given."""
        nic = path.src_nic
        return wire.frame_prefix(
            src_mac=wire.mac_bytes(nic.mac),
            dst_mac=wire.mac_bytes(nic.gateway_mac),
            src=_addr_bytes(nic.address),
            dst=_addr_bytes(path.carrier if dst is None else dst),
            dscp=dscp,
            ecn=ecn,
            ev=ev,
            hop_limit=self._cfg.hop_limit,
            mode=mode.value,
            srh=None if srh is None else _addr_bytes(srh),
        )

    def _slot_prefix(self, slot: EvSlot, dscp: int, ecn: int) -> bytes:
        """The frame prefix of packets sent on ``slot``: its destination (carrier or NIC
        address), its SRH if it has one, and its EV in the flow label and UDP source port as
        its format says."""
        return self._prefix(slot.path, dscp, ecn, slot.wire, slot.dst, slot.mode, slot.srh)

    @entry_point
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

    @property
    def carried_traffic(self) -> bool:
        """True once the QP has sent or received data (it talks to a peer that exists)."""
        return (
            self._next_psn != self._psn_origin or self._rcv_cum != self._rcv_origin
            or bool(self._rcv_set)
        )  # fmt: skip

    def describe(self) -> dict[str, object]:
        """State for the statistics dict."""
        return {
            "remote_host": self.remote_host,
            "remote_qpn": self.remote_qpn,
            "policy": self.policy.name,
            "cwnd": self.cc.cwnd,
            "outstanding": len(self._outstanding),
            "psns_in_flight": self._next_psn - self._snd_una,
            "pending_messages": self._pending_messages,
            "error": self.error,
            "ev_profile": self.ev_profile.profile_id,
            "ev_format": self._ev_mode.value,
            "evs": self.ev_table.counts(),
            # RTT estimates in protocol seconds: the QP's, and each path's (SRV6) or plane's
            # (STEV / UDP EVs share their plane's), which judge a packet "late"
            "srtt": self._srtt,
            "rttvar": self._rttvar,
            "path_rtt": {
                s.label: [s.load.srtt, s.load.rttvar] for s in self.ev_table.slots if s.load.srtt
            },
        }

    # -- EV state --------------------------------------------------------------------------------


def _cc_config(cfg: StackConfig, paths: Sequence[Path]) -> StackConfig:
    """The config of a QP's congestion control: ``cfg``, with ``cc_base_rtt_floor`` (the
    unloaded RTT between racks) brought down to the unloaded RTT of the QP's own paths when they
    are all shorter (a peer in the same rack: ``topologies.config.path_rtt``). Without this a
    flow within a rack learnt no base RTT below the one between racks, saw its delay 4.7 us
    short on the emulated fabrics and took more than its share of an incast
    (docs/validation.md, "The emulation beside the sim")."""
    floor = cfg.cc_base_rtt_floor
    if not floor or not paths:
        return cfg
    links = max(path.links for path in paths)
    if links >= BASE_RTT_LINKS:
        return cfg
    return cfg.with_(cc_base_rtt_floor=path_rtt(floor, links))
