"""UET NSCC ("uet-1.0-nscc"), the default congestion control of MRC, as the UET reference
simulator (uet-htsim, ``uec.cpp``) defines it, configured with the fields of the OCP MRC
controller API's ``struct mrc_ctl_cc_nscc_cfg`` (same names, same units: nanoseconds, bytes).

Per acknowledgement, with ``delay`` = RTT - ``base_rtt`` (the queueing delay) and ``ecn`` =
an acknowledged packet was CE-marked (an ACK echoing a mark counts all the bytes it
acknowledges as marked, as uet-htsim's ``processAck`` does; receivers ACK a marked packet at
once, so the others are at most the few that waited with it):

- quick adapt first (``disable_qa``, ``qa_gate``, ``qa_threshold``): once per base RTT +
  target delay, after a NACK or a loss, or with a delay above ``qa_threshold``, and when what
  was delivered in the last such interval is below ``max_cwnd >> qa_gate``, the window drops to
  what was delivered; the bytes then in flight are ignored by later ECN echoes;
- ECN and delay >= target: multiplicative decrease, at most once per base RTT:
  ``cwnd *= max(1 - gamma * (avg_delay - target_delay) / avg_delay, 1 - max_md_jump)``
  (``avg_delay``: an EWMA of the delay samples);
- no ECN, delay >= target: fair increase, ``fi`` bytes per byte acknowledged, applied later;
- no ECN, delay < target: proportional increase ``alpha * (target_delay - delay)`` per byte
  acknowledged, or fast increase (``fi_scale`` per byte, at once) while the delay stays under
  1 us for a window's worth of bytes;
- ECN, delay < target: no window change (the path is congested, not the flow: the spraying
  steers away from it);
- increases accumulate and are applied in batches, ``cwnd += increase / cwnd``, once
  ``adjust_bytes_threshold`` bytes were acknowledged or ``adjust_period_threshold`` passed;
  ``eta`` is added once per adjustment period, which runs from the last adjustment that
  added it;
- a NACK (trim) takes the NACKed bytes out of the window and triggers quick adapt; the delay
  EWMA takes it as a delay of one network RTT above base. A trim at the receiver's own leaf
  (``last_hop``) is the incast's congestion, not a path's: the window answers it, the path
  choice does not (:mod:`host.transport.sender`);
- the base RTT starts at the configured one (the fabric's unloaded RTT) and the smallest RTT
  measured of a full-size packet replaces it, ``max_cwnd`` following (1.5 BDP); a timeout takes the timed-out
  packets out of the window (both after uet-htsim; the stack profile ``testbed-2026`` keeps the
  testbed's earlier rules: a fixed base RTT, quick adapt on a timeout).

:func:`uet_defaults` derives the reference's defaults (its ``initNsccParams``) from the
fabric's base RTT and link rate; every field can be set. docs/host-stack.md lists each rule
with its source and where the testbed departs.
"""

from __future__ import annotations

from collections.abc import Mapping

from host.transport import wire
from host.transport.cc.base import CongestionControl, register

NS = 1e-9
#: UET's reference network: 100 Gb/s with a 12 us RTT (the scaling factors' denominators)
REFERENCE_BDP = 100e9 / 8 * 12e-6
REFERENCE_RTT = 12e-6
FAST_INCREASE_DELAY = 1e-6  # seconds: queueing delay counted as none for fast increase
DELAY_ALPHA = 0.0125  # the reference's EWMA weight of the delay average
#: the causes of window changes, counted in bytes as the reference prints them per flow
CHANGE_CAUSES = (
    "fair_inc",
    "prop_inc",
    "fast_inc",
    "eta_inc",
    "multi_dec",
    "quick_dec",
    "nack_dec",
)
#: NSCC's four cases, by the signals an acknowledged packet brings (UET's NSCC; uet-htsim
#: uec.cpp, the switch in updateCwndOnAck_NSCC): delay above target without ECN (fair
#: increase), below target without ECN (proportional or fast increase), ECN with delay above
#: target (multiplicative decrease), ECN with delay below target (no window change: the mark is
#: on one path, which the sender steers away from)
NSCC_CASES = ("fair_increase", "proportional_increase", "multiplicative_decrease",
              "ecn_below_target")  # fmt: skip

#: the fields of struct mrc_ctl_cc_nscc_cfg (mrc_ctl.h) and their units
NSCC_FIELDS: Mapping[str, str] = {
    "disable_qa": "flag (non-zero: quick adapt off)",
    "adjust_bytes_threshold": "bytes",
    "adjust_period_threshold": "ns",
    "base_rtt": "ns",
    "eta": "bytes",
    "fi": "bytes per byte acknowledged",
    "fi_scale": "ratio",
    "gamma": "ratio",
    "max_md_jump": "ratio",
    "max_cwnd": "bytes",
    "qa_gate": "shift",
    "qa_threshold": "ns",
    "target_delay": "ns",
}


def payload_share(mtu: int) -> float:
    """The share of a full-size data frame's bytes on the wire that is payload. The window
    counts the QP's payload bytes (what it sends, acknowledges and NACKs); a BDP counts wire
    bytes, the rate times the RTT, as the reference's windows do (its packets' sizes include
    their headers). ``max_cwnd`` is therefore 1.5 BDP times this share, and the reference's
    scaling factors divide like by like. Frames with an SRH are longer; the share is the
    plain frame's (a testbed choice)."""
    return mtu / (mtu + wire.DATA_HEADER_LEN)


def uet_defaults(
    *, base_rtt: float, link_rate_bps: float, mtu: int, trimming: bool = True
) -> dict[str, float]:
    """The reference simulator's NSCC parameters for a network of ``base_rtt`` seconds and
    ``link_rate_bps``, as ``mrc_ctl_cc_nscc_cfg`` fields (ns, bytes)."""
    if base_rtt <= 0 or link_rate_bps <= 0 or mtu <= 0:
        raise ValueError(
            f"nscc defaults: base_rtt {base_rtt} s, link rate {link_rate_bps} b/s, mtu {mtu}:"
            " expected positive values"
        )
    bdp = base_rtt * link_rate_bps / 8  # wire bytes
    target = base_rtt * (0.75 if trimming else 1.0)
    scale_a = bdp / REFERENCE_BDP
    return {
        "disable_qa": 0,
        "adjust_bytes_threshold": 8 * mtu,
        "adjust_period_threshold": base_rtt / NS,
        "base_rtt": base_rtt / NS,
        "eta": 0.15 * mtu * scale_a,
        "fi": 5 * mtu * scale_a,
        "fi_scale": 0.25 * scale_a,
        "gamma": 0.8,
        "max_md_jump": 0.5,
        "max_cwnd": 1.5 * bdp * payload_share(mtu),  # payload bytes
        "qa_gate": 3,
        "qa_threshold": 4 * target / NS,
        "target_delay": target / NS,
    }


@register("nscc")
@register("uet-1.0-nscc")
class Nscc(CongestionControl):
    """UET NSCC (see the module docstring). With no ``base_rtt`` given, the smallest RTT seen
    is the base RTT and the other defaults follow from it and ``max_cwnd`` (a testbed choice for
    callers that know nothing of the network)."""

    defaults: Mapping[str, float] = {
        "disable_qa": 0,
        "adjust_bytes_threshold": 0,  # 0: 8 MTUs
        "adjust_period_threshold": 0,  # 0: the base RTT
        "base_rtt": 0,  # 0: learn it (the smallest RTT seen)
        "eta": -1,  # < 0: the reference's scaling of the base BDP (for eta, fi, fi_scale)
        "fi": -1,
        "fi_scale": -1,
        "gamma": 0.8,
        "max_md_jump": 0.5,
        "max_cwnd": 0,  # 0: 64 MTUs
        "qa_gate": 3,
        "qa_threshold": 0,  # 0: 4 target delays
        "target_delay": 0,  # 0: 0.75 base RTT
    }

    def setup(self) -> None:
        """Check the parameters and start the window."""
        mtu = self.mtu
        p = self.params
        for name in ("gamma", "max_md_jump"):
            if not 0 <= p[name] <= 1:
                raise ValueError(f"nscc {name} {p[name]}: expected 0..1")
        for name in ("adjust_bytes_threshold", "adjust_period_threshold", "base_rtt",
                     "max_cwnd", "qa_threshold", "target_delay", "qa_gate"):  # fmt: skip
            if p[name] < 0:
                raise ValueError(f"nscc {name} {p[name]}: expected >= 0 ({NSCC_FIELDS[name]})")
        self.min_cwnd = float(mtu)
        self.max_cwnd = float(p["max_cwnd"] or 64 * mtu)
        if self.max_cwnd < mtu:
            raise ValueError(f"nscc max_cwnd {self.max_cwnd:g}: expected at least one MTU ({mtu})")
        self.cwnd = self.max_cwnd  # the reference starts at max_cwnd (1.5 BDP)
        self._learn = p["base_rtt"] <= 0
        self.base_rtt = p["base_rtt"] * NS
        # a configured base RTT (the fabric's unloaded RTT) is where uet-htsim starts
        # (initNscc), and a smaller sample replaces it, max_cwnd following (update_base_rtt);
        # with cc_learn_base_rtt off (stack profile testbed-2026) it stays fixed
        self._lower_base = not self._learn and self.config.cc_learn_base_rtt
        self._configured = (self.base_rtt, self.max_cwnd)
        self._derive()
        self.avg_delay = 0.0
        self.inflight = 0.0  # bytes sent and not yet acknowledged, lost or NACKed
        self._inc_bytes = 0.0  # increases waiting for the next adjustment
        self._received_bytes = 0.0  # acknowledged since the last adjustment
        self._last_adjust = 0.0  # the last adjustment that added eta
        self._last_decrease = float("-inf")
        self._fi_count = 0.0
        self._increasing = False
        self._achieved_bytes = 0.0  # delivered in the current quick-adapt interval
        self._qa_end = 0.0  # end of that interval (0: not started)
        self._trigger_qa = False
        self._bytes_to_ignore = 0.0
        self._bytes_ignored = 0.0
        self.quick_adapts = 0
        self.decreases = 0
        #: bytes of window change by cause (:data:`CHANGE_CAUSES`), counted as the reference
        #: counts them: fair and proportional increases divided by the window at adjustment
        self.changes = dict.fromkeys(CHANGE_CAUSES, 0.0)
        #: acknowledged bytes that met each of NSCC's four cases (:data:`NSCC_CASES`), and when
        #: each case and the first NACK (a trim) first happened (protocol seconds)
        self.cases = dict.fromkeys(NSCC_CASES, 0.0)
        self.first: dict[str, float] = {}
        self._pending_fair = 0.0
        self._pending_prop = 0.0

    def _derive(self) -> None:
        """The parameters that follow from the base RTT (given or learnt) and max_cwnd."""
        p, mtu, rtt = self.params, self.mtu, self.base_rtt
        self.target_delay = p["target_delay"] * NS or 0.75 * rtt
        self.qa_threshold = p["qa_threshold"] * NS or 4 * self.target_delay
        self.adjust_period = p["adjust_period_threshold"] * NS or rtt
        self.adjust_bytes = p["adjust_bytes_threshold"] or 8 * mtu
        scale_a = (self.max_cwnd / 1.5) / (REFERENCE_BDP * payload_share(mtu))
        scale_b = self.target_delay / REFERENCE_RTT
        self.eta = p["eta"] if p["eta"] >= 0 else 0.15 * mtu * scale_a
        self.fi = p["fi"] if p["fi"] >= 0 else 5 * mtu * scale_a
        self.fi_scale = p["fi_scale"] if p["fi_scale"] >= 0 else 0.25 * scale_a
        # alpha: increase per byte acknowledged per second of delay below target
        self.alpha = (
            4.0 * mtu * scale_a * scale_b / self.target_delay if self.target_delay > 0 else 0.0
        )
        self.gamma = p["gamma"]
        self.md_floor = 1.0 - p["max_md_jump"]
        self.qa_gate = int(p["qa_gate"])
        self.qa_enabled = not p["disable_qa"]

    # -- the hooks the QP calls ---------------------------------------------------------------

    def on_packet_sent(self, *, nbytes: int, now: float) -> None:
        """Data left: it is in flight."""
        self.inflight += nbytes

    def on_rtt(self, *, rtt: float, now: float) -> None:
        """Learn the base RTT: the smallest RTT seen. With none configured every parameter
        follows it; from a configured one (uet-htsim update_base_rtt) only ``max_cwnd`` does
        (1.5 BDP at the new base RTT), the others keep the network's."""
        if rtt <= 0.0:
            return
        rtt = max(rtt, self.config.cc_base_rtt_floor)
        if self._learn and (self.base_rtt == 0.0 or rtt < self.base_rtt):
            self.base_rtt = rtt
            self._derive()
        elif self._lower_base and rtt < self.base_rtt:
            base, max_cwnd = self._configured
            self.base_rtt = rtt
            self.max_cwnd = max(self.min_cwnd, max_cwnd * rtt / base)

    def on_ack(
        self, *, acked_bytes: int, rtt: float | None, ce_count: int, pkt_count: int, now: float
    ) -> None:
        """The four cases of NSCC, after quick adapt, then the batched adjustment."""
        self.inflight = max(0.0, self.inflight - acked_bytes)
        if rtt is not None and acked_bytes >= pkt_count * self.mtu:
            # only full-size packets tell the base RTT (uet-htsim's update_base_rtt took
            # packet_size == mtu only; all its packets but a flow's last are full-size): a short
            # packet's RTT lacks most of the serialisation, and taken as the base it shrinks
            # max_cwnd to a few MTUs (to one on a fabric without link latency)
            self.on_rtt(rtt=rtt, now=now)
        if self.base_rtt <= 0.0 or acked_bytes <= 0:
            return
        ecn = ce_count > 0
        if rtt is None:
            # no delay of its own (an ACK whose packet an earlier ACK acknowledged): the
            # average stands in, and is not updated (uet-htsim processAck, get_avg_delay)
            delay = self.avg_delay
        else:
            delay = max(0.0, rtt - self.base_rtt)
            self._update_delay(delay, ecn=ecn)
        self._on_bytes(ecn, delay, acked_bytes, now)

    def on_trim(self, *, nbytes: int, now: float, last_hop: bool = False) -> None:
        """A NACK: quick adapt is triggered, and the NACKed bytes leave the window."""
        self.inflight = max(0.0, self.inflight - nbytes)
        self._bytes_ignored += nbytes
        self.changes["nack_dec"] += nbytes
        self.first.setdefault("nack", now)
        # the reference takes a NACK as a delay sample of one network RTT above base
        self._update_delay(self.base_rtt, ecn=True)
        self._trigger_qa = True
        if not self._quick_adapt(True, True, 0.0, now):
            self.cwnd = max(self.min_cwnd, self.cwnd - nbytes)

    def on_loss(self, *, nbytes: int, timeout: bool, now: float) -> None:
        """Lost packets leave flight. A timeout takes the timed-out packets out of the window
        too (uet-htsim rtxTimerExpired, mark_packet_for_retransmission), or, with
        ``timeout_quick_adapt`` (stack profile testbed-2026), triggers quick adapt. A SACK loss
        is a path failure in MRC: the window keeps it."""
        self.inflight = max(0.0, self.inflight - nbytes)
        if not timeout:
            return
        if self.config.timeout_quick_adapt:
            self._trigger_qa = True
            self._quick_adapt(True, False, 0.0, now)
        else:
            self.cwnd = max(self.min_cwnd, self.cwnd - nbytes)

    def describe(self) -> dict[str, float]:
        """Window, base RTT, average delay and the effective parameters."""
        return {
            "cwnd": self.cwnd,
            "max_cwnd": self.max_cwnd,
            "base_rtt_s": self.base_rtt,
            "target_delay_s": self.target_delay,
            "avg_delay_s": self.avg_delay,
            "quick_adapts": self.quick_adapts,
            "decreases": self.decreases,
            **self.params,
        }

    # -- the reference's steps ------------------------------------------------------------------

    def _update_delay(self, delay: float, *, ecn: bool) -> None:
        """The delay EWMA: an unmarked sample above target counts as a quarter base RTT (delay
        alone does not decrease the window)."""
        sample = 0.25 * self.base_rtt if not ecn and delay > self.target_delay else delay
        self.avg_delay = DELAY_ALPHA * sample + (1 - DELAY_ALPHA) * self.avg_delay

    def _on_bytes(self, ecn: bool, delay: float, nbytes: float, now: float) -> None:
        self._achieved_bytes += nbytes
        self._received_bytes += nbytes
        # the bytes in flight at a quick adapt are ignored once that many were acknowledged or
        # NACKed (uet-htsim processAck counts acknowledged bytes into _bytes_ignored)
        self._bytes_ignored += nbytes
        if self._quick_adapt(False, ecn, delay, now):
            return
        target = self.target_delay
        if not ecn and delay >= target:
            case = "fair_increase"
            self._inc_bytes += self.fi * nbytes
            self._pending_fair += self.fi * nbytes
        elif not ecn:
            case = "proportional_increase"
            self._proportional_increase(nbytes, delay)
        elif delay >= target:
            case = "multiplicative_decrease"
            self._multiplicative_decrease(now)
        else:
            case = "ecn_below_target"  # no window change (switch paths)
        self.cases[case] += nbytes
        if case not in self.first:
            self.first[case] = now
        self._bound()
        if self._received_bytes > self.adjust_bytes or now - self._last_adjust > self.adjust_period:
            self._fulfill(now)
        self._bound()

    def _proportional_increase(self, nbytes: float, delay: float) -> None:
        if delay < FAST_INCREASE_DELAY:
            self._fi_count += nbytes
            if self._fi_count > self.cwnd or self._increasing:
                self.cwnd += nbytes * self.fi_scale
                self.changes["fast_inc"] += nbytes * self.fi_scale
                self._increasing = True
                return
        else:
            self._fi_count = 0.0
        self._increasing = False
        self._inc_bytes += self.alpha * nbytes * (self.target_delay - delay)
        self._pending_prop += self.alpha * nbytes * (self.target_delay - delay)

    def _multiplicative_decrease(self, now: float) -> None:
        self._increasing = False
        self._fi_count = 0.0
        avg = self.avg_delay
        if avg > self.target_delay and now - self._last_decrease > self.base_rtt:
            factor = max(1.0 - self.gamma * (avg - self.target_delay) / avg, self.md_floor)
            before = self.cwnd
            self.cwnd = max(self.min_cwnd, self.cwnd * factor)
            self.changes["multi_dec"] += before - self.cwnd
            self._last_decrease = now
            self.decreases += 1

    def _fulfill(self, now: float) -> None:
        self.cwnd += self._inc_bytes / self.cwnd
        self.changes["fair_inc"] += self._pending_fair / self.cwnd
        self.changes["prop_inc"] += self._pending_prop / self.cwnd
        self._pending_fair = self._pending_prop = 0.0
        # the period runs from the last adjustment that added eta: past it, every ACK adjusts
        # (uet-htsim fulfill_adjustment, _last_adjust_time)
        if now - self._last_adjust >= self.adjust_period:
            self.cwnd += self.eta
            self.changes["eta_inc"] += self.eta
            self._last_adjust = now
        self._inc_bytes = 0.0
        self._received_bytes = 0.0

    def _quick_adapt(self, loss: bool, ecn: bool, delay: float, now: float) -> bool:
        """The reference's quick adapt: True when it acted (or the ACK is one to ignore)."""
        if not self.qa_enabled:
            return False
        done = False
        if self._bytes_ignored < self._bytes_to_ignore and ecn:
            done = True
        elif now > self._qa_end:
            if (
                self._qa_end != 0.0
                and (self._trigger_qa or loss or delay > self.qa_threshold)
                and self._achieved_bytes < self.max_cwnd / (1 << self.qa_gate)
            ):
                before = self.cwnd
                self.cwnd = max(self._achieved_bytes, self.min_cwnd)
                self.changes["quick_dec"] += before - self.cwnd
                self._bytes_to_ignore = self.inflight
                self._bytes_ignored = 0.0
                self._trigger_qa = False
                self.quick_adapts += 1
                done = True
            self._achieved_bytes = 0.0
            self._qa_end = now + self.base_rtt + self.target_delay
        if done:
            self._inc_bytes = 0.0
            self._received_bytes = 0.0
        return done

    def _bound(self) -> None:
        self.cwnd = min(self.max_cwnd, max(self.min_cwnd, self.cwnd))
