"""Congestion control: the registry, profiles, and how the earlier ECN + delay window and the
fixed window react (UET NSCC has its own tests, tests/host/test_core_nscc.py)."""

from __future__ import annotations

import pytest

from host.transport import cc
from host.transport.cc.base import CongestionControl

MTU = 4096


def test_registry_lists_and_builds_by_name() -> None:
    assert {"nscc", "uet-1.0-nscc", "ecn-delay", "fixed"} <= set(cc.available())
    assert cc.create("fixed", mtu=MTU, params={"window": 4}).cwnd == 4 * MTU
    profile = cc.CcProfile("ecn-delay", {"max_cwnd": 32})
    assert cc.create(profile, mtu=MTU).max_cwnd == 32 * MTU
    with pytest.raises(ValueError, match="expected one of .*fixed.*nscc"):
        cc.create("reno", mtu=MTU)
    with pytest.raises(ValueError, match="unknown parameter"):
        cc.create("nscc", mtu=MTU, params={"bogus": 1})


def test_an_algorithm_can_register_itself() -> None:
    @cc.register("test-halving")
    class Halving(CongestionControl):
        def on_packet_sent(self, *, nbytes: int, now: float) -> None:
            pass

        def on_ack(self, *, acked_bytes: int, rtt: float | None, ce_count: int, pkt_count: int,
                   now: float) -> None:  # fmt: skip
            pass

        def on_trim(self, *, nbytes: int, now: float, last_hop: bool = False) -> None:
            self.cwnd /= 2

        def on_loss(self, *, nbytes: int, timeout: bool, now: float) -> None:
            pass

    algo = cc.create("test-halving", mtu=MTU)
    algo.on_trim(nbytes=MTU, now=0.0)
    assert algo.cwnd == MTU / 2 and "test-halving" in cc.available()


def test_ecn_delay_grows_without_congestion_and_shrinks_on_ecn_with_delay() -> None:
    algo = cc.create("ecn-delay", mtu=MTU, params={"base_rtt": 100e-6, "target_delay": 50e-6})
    start = algo.cwnd
    for n in range(50):
        algo.on_ack(acked_bytes=4 * MTU, rtt=110e-6, ce_count=0, pkt_count=4, now=n * 1e-4)
    grown = algo.cwnd
    assert grown > start
    algo.on_ack(acked_bytes=4 * MTU, rtt=400e-6, ce_count=4, pkt_count=4, now=1.0)
    assert algo.cwnd < grown
    shrunk = algo.cwnd
    # marks with a short queue are stale: hold
    algo.on_ack(acked_bytes=4 * MTU, rtt=105e-6, ce_count=2, pkt_count=4, now=2.0)
    assert algo.cwnd == shrunk


def test_ecn_delay_trims_decrease_at_most_once_per_rtt_and_respect_bounds() -> None:
    algo = cc.create("ecn-delay", mtu=MTU, params={"base_rtt": 1e-3, "min_cwnd": 2, "max_cwnd": 20})
    before = algo.cwnd
    algo.on_trim(nbytes=MTU, now=0.0)
    once = algo.cwnd
    algo.on_trim(nbytes=MTU, now=0.0001)  # same RTT: no second decrease
    assert once < before and algo.cwnd == once
    for n in range(200):
        algo.on_trim(nbytes=MTU, now=1.0 + n * 0.01)
    assert algo.cwnd == 2 * MTU
    for n in range(5000):
        algo.on_ack(acked_bytes=MTU, rtt=1e-3, ce_count=0, pkt_count=1, now=10.0 + n * 1e-3)
    assert algo.cwnd == 20 * MTU
    algo.on_loss(nbytes=MTU, timeout=False, now=20.0)  # a path failure is not congestion
    assert algo.cwnd == 20 * MTU
    algo.on_loss(nbytes=MTU, timeout=True, now=20.0)
    assert algo.cwnd == 10 * MTU


def test_fixed_window_ignores_everything() -> None:
    algo = cc.create("fixed", mtu=MTU, params={"window": 8})
    algo.on_trim(nbytes=MTU, now=0.0)
    algo.on_loss(nbytes=MTU, timeout=True, now=0.0)
    algo.on_ack(acked_bytes=MTU, rtt=1.0, ce_count=1, pkt_count=1, now=0.0)
    assert algo.cwnd == 8 * MTU
    with pytest.raises(ValueError, match="window"):
        cc.create("fixed", mtu=MTU, params={"window": 0})
