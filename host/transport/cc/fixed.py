"""A fixed congestion window: no reaction to anything (for tests and controlled experiments)."""

from __future__ import annotations

from collections.abc import Mapping

from host.transport.cc.base import CongestionControl, register


@register("fixed")
class FixedWindow(CongestionControl):
    """``window`` packets of ``mtu`` bytes in flight, always."""

    defaults: Mapping[str, float] = {"window": 64}

    def setup(self) -> None:
        """Check the parameters and start the window."""
        if self.params["window"] < 1:
            raise ValueError(f"fixed window {self.params['window']}: expected >= 1 packet")
        self.cwnd = float(self.params["window"] * self.mtu)

    def on_packet_sent(self, *, nbytes: int, now: float) -> None:
        """Nothing to do."""

    def on_ack(
        self, *, acked_bytes: int, rtt: float | None, ce_count: int, pkt_count: int, now: float
    ) -> None:
        """Nothing to do."""

    def on_trim(self, *, nbytes: int, now: float, last_hop: bool = False) -> None:
        """Nothing to do."""

    def on_loss(self, *, nbytes: int, timeout: bool, now: float) -> None:
        """Nothing to do."""
