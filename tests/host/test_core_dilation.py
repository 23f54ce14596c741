"""Time dilation: the transport core runs on protocol (real-fabric) time.

The same fabric emulated eight times slower (links at an eighth of the rate, eight times the
delay, faults eight times later) must give the very same run in protocol time: every event the
same, at eight times the driver time. Any timer left in driver units (an ACK timeout, a probe
interval, a delayed ACK, a congestion-control period) would fire at a different point of the
run and make the two diverge. (A power of two keeps every scaled time exact in floating point,
so the two runs can be compared event by event.)
"""

from __future__ import annotations

from typing import Any

import pytest

from host.transport.config import StackConfig
from host.transport.events import Completion, Event

BASE = 0x7F00_0000_0000
SLOWER = 8.0
FAILED = ("t0-p0-r0", "t1-p0-s0")


def run(make_net: Any, scale: float) -> list[Event]:
    """An incast of two senders with trimming, and a leaf-spine link that fails and comes back,
    on the small fabric at 100 Mb/s / ``scale``."""
    net = make_net(seed=4, rate_mbps=100.0 / scale, delay_us=50.0 * scale, trim_threshold=6,
                   config=StackConfig(ack_timeout_exp=5))  # fmt: skip
    assert net.config.dilation == pytest.approx(1000.0 * scale)
    flows = [net.connect(src, "h2") for src in ("h0", "h1")]
    net.sim.fail_link(*FAILED, start=0.010 * scale, end=0.060 * scale)
    for n, flow in enumerate(flows):
        for k in range(6):
            flow.sender.post_write(bytes(64 * 1024), BASE + (n * 6 + k) * 65536,
                                   flow.region.rkey, wr_id=k)  # fmt: skip
    net.kick_all()
    net.run(0.3 * scale)  # past the repair: the failed path is probed back
    return net.events


def test_a_slower_emulation_is_the_same_run_in_protocol_time(make_net: Any) -> None:
    fast, slow = run(make_net, 1.0), run(make_net, SLOWER)
    assert len(fast) == len(slow) > 12
    kinds = {type(e).__name__ for e in fast}
    # the run exercises completions, EV retirement and reinstatement, probes
    assert {"WriteCompleted", "EvStateChanged", "PathProbeSent", "PathProbeReplied"} <= kinds
    for a, b in zip(fast, slow, strict=True):
        assert type(a) is type(b)
        fields_a, fields_b = dict(vars(a)), dict(vars(b))
        for key in ("time", "rtt"):
            if key in fields_a:
                assert fields_b.pop(key) == pytest.approx(SLOWER * fields_a.pop(key), rel=1e-6)
        assert fields_a == fields_b
    assert sum(isinstance(e, Completion) for e in slow) == 12


def test_timers_and_statistics_are_in_the_drivers_clock(make_net: Any) -> None:
    net = make_net(rate_mbps=10.0)
    assert net.config.dilation == pytest.approx(1e4)
    flow = net.connect("h0", "h2")
    flow.sender.post_write(bytes(8192), BASE, flow.region.rkey)
    net.kick_all()
    ctx = net.hosts["h0"]
    net.run(1e-3)  # the first packets left at time 0; no ACK yet
    # before any RTT sample the ACK timeout is the MRC one, 1.024 us x 2^t, dilated
    assert ctx.next_timer() == pytest.approx(net.config.ack_timeout * 1e4)
    net.run(1.0, stop=lambda: len(net.cqs["h0"]) == 1)
    stats = ctx.stats()
    assert stats["dilation"] == pytest.approx(1e4)
    assert stats["rtt"]["min"] == pytest.approx(stats["rtt_protocol"]["min"] * 1e4)
    # an unloaded RTT of the 10 Mb/s fabric: milliseconds of driver time, microseconds real
    assert 5e-3 < stats["rtt"]["min"] < 50e-3
    assert 0.5e-6 < stats["rtt_protocol"]["min"] < 5e-6
