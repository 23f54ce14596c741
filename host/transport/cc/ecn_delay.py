"""``ecn-delay``: the testbed's first ECN + delay window (kept to compare with UET NSCC).

Each ACK brings an RTT sample and the share of CE-marked packets. With ``qdelay = rtt -
base_rtt`` (``base_rtt`` is configured, or the smallest RTT seen when 0):

- ECN marks and ``qdelay >= target_delay``: congestion -- multiplicative decrease by
  ``beta x`` the CE share (at least ``min_decrease``), at most once per RTT;
- no marks and ``qdelay < target_delay``: proportional increase, faster the further the delay
  is below target (``gain``);
- no marks but ``qdelay >= target_delay``: a small fair increase (another flow's queue);
- marks but low delay: hold (the marks are stale).

A trim NACK counts as congestion (decrease, once per RTT). A timeout halves the window; a
SACK-inferred loss is a path failure in MRC and leaves the window alone. The window stays within
``[min_cwnd, max_cwnd]`` (in packets of ``mtu`` bytes).
"""

from __future__ import annotations

from collections.abc import Mapping

from host.transport.cc.base import CongestionControl, register


@register("ecn-delay")
class EcnDelay(CongestionControl):
    """Window-based ECN + delay congestion control."""

    defaults: Mapping[str, float] = {
        "base_rtt": 0.0,  # seconds; 0 = learn the smallest RTT seen
        "target_delay": 0.0,  # queueing delay tolerated (seconds); 0 = base_rtt / 2
        "init_cwnd": 16,  # packets
        "min_cwnd": 1,  # packets
        "max_cwnd": 256,  # packets
        "beta": 0.5,  # decrease factor per unit of CE share
        "min_decrease": 0.1,  # smallest multiplicative decrease on congestion
        "gain": 4.0,  # proportional increase gain
        "fair_increase": 0.25,  # increase share when delay is high but unmarked
    }

    def setup(self) -> None:
        """Check the parameters and start the window."""
        mtu = self.mtu
        p = self.params
        if not 1 <= p["min_cwnd"] <= p["init_cwnd"] <= p["max_cwnd"]:
            raise ValueError(
                f"nscc windows min {p['min_cwnd']} / init {p['init_cwnd']} / max {p['max_cwnd']}:"
                " expected 1 <= min <= init <= max packets"
            )
        self.min_cwnd = p["min_cwnd"] * mtu
        self.max_cwnd = p["max_cwnd"] * mtu
        self.cwnd = float(p["init_cwnd"] * mtu)
        self.base_rtt = p["base_rtt"] or 0.0
        self._learn_base = p["base_rtt"] <= 0
        self._srtt: float | None = None
        self._hold_until = 0.0
        self._beta = p["beta"]
        self._min_dec = p["min_decrease"]
        self._gain = p["gain"]
        self._fair = p["fair_increase"]

    @property
    def target_delay(self) -> float:
        """The queueing delay above base_rtt considered congestion."""
        return self.params["target_delay"] or self.base_rtt / 2

    def _decrease(self, factor: float, now: float) -> None:
        if now < self._hold_until:
            return
        self.cwnd = max(self.min_cwnd, self.cwnd * (1.0 - factor))
        self._hold_until = now + (self._srtt if self._srtt is not None else self.base_rtt)

    def on_packet_sent(self, *, nbytes: int, now: float) -> None:
        """Nothing per packet: the window is driven by ACKs."""

    def on_rtt(self, *, rtt: float, now: float) -> None:
        """Track the smallest RTT (base) and a smoothed RTT (decrease hold time)."""
        base = max(rtt, self.config.cc_base_rtt_floor)
        if self._learn_base and (self.base_rtt == 0.0 or base < self.base_rtt):
            self.base_rtt = base
        self._srtt = rtt if self._srtt is None else 0.875 * self._srtt + 0.125 * rtt

    def on_ack(
        self, *, acked_bytes: int, rtt: float | None, ce_count: int, pkt_count: int, now: float
    ) -> None:
        """Adjust the window from the ECN share and the queueing delay."""
        if rtt is not None:
            self.on_rtt(rtt=rtt, now=now)
        qdelay = 0.0 if rtt is None else max(0.0, rtt - self.base_rtt)
        target = self.target_delay
        cwnd = self.cwnd
        if ce_count:
            if qdelay >= target:
                share = ce_count / max(1, pkt_count)
                self._decrease(max(self._min_dec, self._beta * share), now)
            return
        if qdelay < target and target > 0:
            scale = 1.0 + self._gain * (target - qdelay) / target
        elif target > 0:
            scale = self._fair
        else:
            scale = 1.0
        self.cwnd = min(self.max_cwnd, cwnd + scale * acked_bytes * self.mtu / cwnd)

    def on_trim(self, *, nbytes: int, now: float, last_hop: bool = False) -> None:
        """A trim is congestion: decrease (once per RTT)."""
        self._decrease(self._min_dec * 2, now)

    def on_loss(self, *, nbytes: int, timeout: bool, now: float) -> None:
        """A timeout halves the window; a SACK loss (path failure) leaves it."""
        if timeout:
            self.cwnd = max(self.min_cwnd, self.cwnd / 2)
