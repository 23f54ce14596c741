"""Configuration of the transport core: timers, thresholds and sizes (immutable).

One :class:`StackConfig` is given to a :class:`host.transport.api.Context`; its QPs use it unless
one is created with a config of its own: a copy of the context's (:meth:`StackConfig.with_`
returns one) whose ``CONTEXT_FIELDS`` keep the context's values (:meth:`StackConfig.check_qp`).
A QP's ``LIVE_FIELDS`` (its timers and limits) may also change while it runs.

Every time here is *protocol time*: seconds of the real fabric the testbed stands for (a 100 Gb/s
fabric whose round trip is a few microseconds), never seconds of the emulation. The emulated
fabric runs its links ``dilation`` times slower than the real ones (``dilation`` = nominal link
rate / emulated link rate, :attr:`topologies.Topology.dilation`), so the context runs its
protocol clock that many times slower than its driver's clock: every timer below fires after
``dilation`` x its value of driver time, and every RTT the core measures is in real-fabric
units. The defaults are real-fabric values; docs/host-stack.md ("Time dilation") says where each
comes from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from topologies.operating import LEGACY_PROFILE, UET_PROFILE

ACK_TIMEOUT_UNIT = 1.024e-6  # seconds: the MRC ACK timeout is 1.024 us x 2^t
STEERING_MODES = ("weights", "halve")  # how congestion feedback steers spraying

#: the fields every QP of a context shares: the driver's clock (``dilation``), the fabric's frame
#: sizes and hop limit, the EV profiles' floor of active EVs (profiles are the context's)
CONTEXT_FIELDS = ("mtu", "dilation", "max_frame", "hop_limit", "ev_min_active")
#: the fields a QP's config may change while the QP runs: its timers, retry counts and windows
#: (the others shape its EV table, spraying and congestion control when it is created)
LIVE_FIELDS = (
    "ack_timeout_exp", "max_backoff_exp", "retry_linear_cnt", "retry_exp_cnt", "max_retransmits",
    "reorder_threshold", "ack_every", "ack_delay", "probe_timeout", "probe_interval", "rto_min",
    "tlp", "rx_window", "max_outstanding", "ack_ce_at_once", "ack_requests",
)  # fmt: skip

# The profile names are the fabric's too (topologies.operating): ``uet``, the default, feeds
# NSCC as the UET reference simulator feeds it; ``testbed-2026`` keeps the testbed's earlier rules,
# so that the two can be compared (``StackConfig.profile``, ``mrc-host --stack-profile`` or a
# scenario's ``stack_profile``).
#: each named stack profile: the fields whose values differ from the defaults
STACK_PROFILES: Mapping[str, Mapping[str, Any]] = {
    UET_PROFILE: {},
    LEGACY_PROFILE: {
        "cc_raw_delay": False,
        "cc_learn_base_rtt": False,
        "ack_ce_at_once": False,
        "ack_requests": False,
        "timeout_quick_adapt": True,
        "ev_min_active": 1,
    },
}


class ConfigError(ValueError):
    """A configuration value outside its valid range."""


@dataclass(frozen=True)
class StackConfig:
    """Every tunable of the transport core."""

    mtu: int = 4096  #: payload bytes per data packet
    dilation: float = 1.0  #: driver seconds per protocol second (nominal / emulated link rate)
    ack_timeout_exp: int = 7  #: t (mrc_qp_attr.timeout): ACK timeout = 1.024 us x 2^t (131 us)
    max_backoff_exp: int = 11  #: t never grows beyond this on repeated timeouts (2.1 ms)
    retry_linear_cnt: int = 3  #: ACK timeouts at the fixed interval before backing off (max 7)
    retry_exp_cnt: int = 25  #: backed-off timeouts in a row before the QP fails (25: never)
    #: a packet lost more often fails its message (trims, answered by NACKs, do not count)
    max_retransmits: int = 64
    reorder_threshold: int = 16  #: a packet is lost when one sent this many packets later is acked
    ack_every: int = 4  #: the receiver ACKs after this many data packets...
    ack_delay: float = 10e-9  #: ...or this long after the first unacknowledged one (seconds)
    ack_ce_at_once: bool = True  #: ...or at once for a CE-marked one (uet-htsim processData)
    #: ...or at once for the first packet and for the last one the sender's window lets out
    #: (it sets the ACK request bit), and again once the PSNs before a requested one are in
    #: (uet-htsim sendNewPacket, UecSink::processData)
    ack_requests: bool = True
    probe_timeout: float = 8e-6  #: a probe without reply after this long is lost (seconds)
    probe_interval: float = 8e-6  #: gap between probes of an EV that is not GOOD (seconds)
    ev_count: int = 128  #: EVs per QP for the generated profile (split evenly over planes)
    #: never retire an EV if fewer GOOD ones would remain (None: a quarter of the EV profile's
    #: EVs, as the OCP MRC API's examples set it)
    ev_min_active: int | None = None
    retire_path: bool = True  #: a loss retires every EV of the lost packet's path, not only its EV
    ecn_steering: bool = True  #: steer spraying away from paths that signal congestion
    steering: str = "weights"  #: "weights" (per-path AIMD weights) or "halve" (one RTT)
    ev_recycle: bool = True  #: reuse the EVs of packets acknowledged without a CE mark first
    path_weight_decrease: float = 0.5  #: a path's weight is multiplied by 1 - this on congestion
    path_weight_increase: float = 1 / 32  #: added to a path's weight per clean ACK from it
    path_delay_excess: float = 0.5  #: a path slower than the fastest by this share is congested
    path_weight_min: float = 1 / 32  #: a congested path keeps at least this relative weight
    #: congestion control gets the RTT of the acknowledged packet as it is (uet-htsim
    #: processAck); False: capped at the fastest path's smoothed RTT (with ``steering="weights"``)
    cc_raw_delay: bool = True
    #: a CC's base RTT is where it starts (the fabric's unloaded RTT) and the smallest RTT seen
    #: replaces it (uet-htsim update_base_rtt); False: the fabric's loaded RTT, fixed
    cc_learn_base_rtt: bool = True
    #: a learnt base RTT never falls below this (protocol seconds; 0: no floor). The emulated
    #: targets set the fabric's unloaded RTT: their ports let a frame through at once when idle
    #: (a token bucket's burst), so an RTT measured there lacks the serialisation the real
    #: fabric's includes, and learnt it shrinks ``max_cwnd`` to one MTU (docs/host-stack.md).
    #: It is the floor of a path between racks: a QP whose paths stay in its rack gets it in
    #: proportion to their links (``host.transport.qp``)
    cc_base_rtt_floor: float = 0.0
    #: an ACK timeout triggers NSCC's quick adapt; False: the timed-out packets leave the
    #: window (uet-htsim rtxTimerExpired)
    timeout_quick_adapt: bool = False
    rto_min: float | None = None  #: floor of the adaptive ACK timeout (s); None: the MRC one
    tlp: bool = True  #: a tail-loss probe re-sends the oldest packets before the ACK timeout
    rx_window: int = 1 << 16  #: PSNs a receiver accepts ahead of its cumulative PSN
    max_outstanding: int = 1 << 15  #: packets in flight per QP (also bounded by cwnd)
    max_frame: int = 9600  #: frames longer than this are dropped as oversize
    hop_limit: int = 64  #: IPv6 hop limit of every packet sent

    def __post_init__(self) -> None:
        checks: list[tuple[str, bool, str]] = [
            ("mtu", 64 <= self.mtu <= 9000, "64..9000 bytes"),
            ("dilation", self.dilation > 0, "> 0 (driver seconds per protocol second)"),
            ("ack_timeout_exp", 0 <= self.ack_timeout_exp <= 24, "0..24 (mrc.h)"),
            (
                "max_backoff_exp",
                self.ack_timeout_exp <= self.max_backoff_exp <= 31,
                "ack_timeout_exp..31",
            ),
            ("retry_linear_cnt", 0 <= self.retry_linear_cnt <= 7, "0..7 (mrc.h)"),
            ("retry_exp_cnt", 0 <= self.retry_exp_cnt <= 25, "0..25, 25: no limit (mrc.h)"),
            ("max_retransmits", self.max_retransmits >= 1, ">= 1"),
            ("reorder_threshold", self.reorder_threshold >= 1, ">= 1"),
            ("ack_every", self.ack_every >= 1, ">= 1"),
            ("ack_delay", self.ack_delay >= 0, ">= 0 seconds"),
            ("probe_timeout", self.probe_timeout > 0, "> 0 seconds"),
            ("probe_interval", self.probe_interval > 0, "> 0 seconds"),
            ("ev_count", 1 <= self.ev_count <= 1 << 16, "1..65536"),
            (
                "ev_min_active",
                self.ev_min_active is None or self.ev_min_active >= 0,
                "None (a quarter of the profile's EVs) or >= 0",
            ),
            ("steering", self.steering in STEERING_MODES, f"one of {STEERING_MODES}"),
            ("path_weight_decrease", 0 < self.path_weight_decrease < 1, "0 < x < 1"),
            ("path_weight_increase", 0 < self.path_weight_increase <= 1, "0 < x <= 1"),
            ("path_delay_excess", self.path_delay_excess > 0, "> 0"),
            ("path_weight_min", 0 < self.path_weight_min <= 1, "0 < x <= 1"),
            ("rto_min", self.rto_min is None or self.rto_min > 0, "None or > 0 seconds"),
            ("cc_base_rtt_floor", self.cc_base_rtt_floor >= 0, ">= 0 seconds"),
            ("rx_window", 64 <= self.rx_window <= 1 << 22, "64..4194304 PSNs"),
            ("max_outstanding", 1 <= self.max_outstanding < self.rx_window, "1..rx_window-1"),
            ("max_frame", self.max_frame >= self.mtu + 200, ">= mtu + 200 bytes"),
            ("hop_limit", 1 <= self.hop_limit <= 255, "1..255"),
        ]
        for name, ok, expected in checks:
            if not ok:
                raise ConfigError(
                    f"StackConfig.{name} = {getattr(self, name)!r}: expected {expected}"
                )

    @classmethod
    def profile(cls, name: str, **changes: Any) -> StackConfig:
        """The config of the named stack profile (``STACK_PROFILES``), with ``changes``."""
        try:
            values = STACK_PROFILES[name]
        except KeyError:
            raise ConfigError(
                f"stack profile {name!r}: expected one of {', '.join(STACK_PROFILES)}"
            ) from None
        return cls().with_(**{**values, **changes})

    @property
    def min_active(self) -> int:
        """The GOOD EVs a generated EV profile of ``ev_count`` EVs keeps at least, unless it
        says otherwise: ``ev_min_active``, by default a quarter of them (the OCP MRC API's
        examples set ``ev_min_active = ev_count / 4``)."""
        return self.ev_count // 4 if self.ev_min_active is None else self.ev_min_active

    @property
    def ack_timeout(self) -> float:
        """The initial ACK (retransmission) timeout in protocol seconds: 1.024 us x 2^t."""
        return ACK_TIMEOUT_UNIT * (1 << self.ack_timeout_exp)

    #: the fields that are protocol times (seconds); ``ack_timeout_exp`` and
    #: ``max_backoff_exp`` are times too, as exponents of ``ACK_TIMEOUT_UNIT``
    TIME_FIELDS = ("ack_delay", "probe_timeout", "probe_interval", "rto_min")

    def with_(self, **changes: Any) -> StackConfig:
        """A copy with some fields changed."""
        known = {f.name for f in fields(self)}
        for key in changes:
            if key not in known:
                raise ConfigError(f"StackConfig has no field '{key}' (fields: {sorted(known)})")
        return replace(self, **changes)

    def changed(self, other: StackConfig) -> list[str]:
        """The fields whose value differs in ``other``, in declaration order."""
        return [f.name for f in fields(self) if getattr(self, f.name) != getattr(other, f.name)]

    def check_qp(self, qp_config: StackConfig) -> None:
        """Refuse a QP config (given to a context of this config) that changes a field every QP
        of the context shares (``CONTEXT_FIELDS``)."""
        for name in self.changed(qp_config):
            if name in CONTEXT_FIELDS:
                raise ConfigError(
                    f"StackConfig.{name} = {getattr(qp_config, name)!r}: a QP's config keeps the "
                    f"context's value {getattr(self, name)!r} ({', '.join(CONTEXT_FIELDS)} are "
                    "the context's)"
                )
