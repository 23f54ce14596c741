"""UET NSCC in the sans-IO core: the four cases, quick adapt, NACK accounting, last-hop trims,
the CC profile in the OCP field names (``struct mrc_ctl_cc_nscc_cfg``), and an incast on the
in-memory network. Time is passed in, so every test is deterministic."""

from __future__ import annotations

from typing import Any

import pytest

from host.transport import cc
from host.transport.cc import CcProfile
from host.transport.cc.nscc import NSCC_FIELDS, REFERENCE_BDP, Nscc, uet_defaults
from host.transport.wire import DATA_HEADER_LEN

MTU = 4096
BASE = 100e-6  # seconds
RATE = 10e9  # b/s: BDP 125 kB
BASE_ADDR = 0x7F00_0000_0000


def nscc(**changes: float) -> Nscc:
    params = {**uet_defaults(base_rtt=BASE, link_rate_bps=RATE, mtu=MTU), **changes}
    algo = cc.create("nscc", mtu=MTU, params=params)
    assert isinstance(algo, Nscc)
    return algo


def test_profile_has_the_ocp_fields_and_units() -> None:
    """The profile is mrc_ctl_cc_nscc_cfg, field for field: ns and bytes as in the header."""
    defaults = uet_defaults(base_rtt=BASE, link_rate_bps=RATE, mtu=MTU)
    assert set(defaults) == set(NSCC_FIELDS) == set(Nscc.defaults)
    assert defaults["base_rtt"] == pytest.approx(100_000)  # ns
    assert defaults["target_delay"] == pytest.approx(75_000)  # 0.75 base RTT with trimming
    assert defaults["qa_threshold"] == pytest.approx(300_000)
    # 1.5 BDP of wire bytes, counted as the window counts: in payload bytes
    assert defaults["max_cwnd"] == pytest.approx(1.5 * 125_000 * MTU / (MTU + DATA_HEADER_LEN))
    algo = nscc()
    assert algo.cwnd == algo.max_cwnd  # starts at max_cwnd
    assert algo.base_rtt == pytest.approx(BASE) and algo.target_delay == pytest.approx(75e-6)
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['target_qdelay'\]"):
        cc.create("uet-1.0-nscc", mtu=MTU, params={"target_qdelay": 1})
    with pytest.raises(ValueError, match="gamma 2"):
        nscc(gamma=2)


def test_the_scaling_factors_divide_like_by_like() -> None:
    # eta, fi and fi_scale derived by the window from its payload-byte max_cwnd are the ones
    # uet_defaults derives from the wire-byte BDP (the reference's: its bytes are wire bytes)
    given = nscc()
    derived = nscc(eta=-1, fi=-1, fi_scale=-1)
    for name in ("eta", "fi", "fi_scale", "alpha"):
        assert getattr(derived, name) == pytest.approx(getattr(given, name)), name
    assert given.eta == pytest.approx(0.15 * MTU * 125_000 / REFERENCE_BDP)


def ack(algo: Nscc, now: float, delay: float, ce: int = 0, nbytes: int = 4 * MTU) -> None:
    algo.on_packet_sent(nbytes=nbytes, now=now)
    algo.on_ack(acked_bytes=nbytes, rtt=BASE + delay, ce_count=ce, pkt_count=4, now=now)


def test_ecn_and_delay_above_target_decrease_once_per_base_rtt() -> None:
    algo = nscc(disable_qa=1, eta=0)
    algo.avg_delay = 200e-6  # a standing queue
    before = algo.cwnd
    ack(algo, 1.0, delay=200e-6, ce=4)
    gamma, target = 0.8, 75e-6
    avg = algo.avg_delay
    assert algo.cwnd == pytest.approx(before * max(1 - gamma * (avg - target) / avg, 0.5))
    once = algo.cwnd
    ack(algo, 1.0 + BASE / 2, delay=200e-6, ce=4)  # within a base RTT: no second decrease
    assert algo.cwnd == once
    ack(algo, 1.0 + 2 * BASE, delay=200e-6, ce=4)
    assert algo.cwnd < once and algo.decreases == 2


def test_max_md_jump_bounds_the_cut() -> None:
    algo = nscc(disable_qa=1, max_md_jump=0.1, eta=0)
    algo.avg_delay = 10e-3
    before = algo.cwnd
    ack(algo, 1.0, delay=10e-3, ce=4)
    assert algo.cwnd == pytest.approx(0.9 * before)


def test_ecn_with_delay_below_target_changes_nothing() -> None:
    algo = nscc(disable_qa=1, eta=0)
    algo.cwnd = 0.5 * algo.max_cwnd
    before = algo.cwnd
    for n in range(50):
        ack(algo, 1.0 + n * BASE, delay=10e-6, ce=4)
    assert algo.cwnd == before


def test_no_ecn_below_target_increases_proportionally_and_fast_when_queue_is_empty() -> None:
    slow, fast = nscc(disable_qa=1, eta=0), nscc(disable_qa=1, eta=0)
    for algo in (slow, fast):
        algo.cwnd = 0.25 * algo.max_cwnd
    start = slow.cwnd
    for n in range(6):
        ack(slow, 1.0 + n * BASE, delay=40e-6)  # below target, not empty: proportional
        ack(fast, 1.0 + n * BASE, delay=0.0)  # empty queue: fast increase after a window
    assert fast.cwnd > slow.cwnd > start  # the emptier the queue, the faster the increase
    for n in range(200):
        ack(fast, 2.0 + n * BASE, delay=0.0)
    assert fast.cwnd == pytest.approx(fast.max_cwnd)  # capped at max_cwnd


def test_no_ecn_above_target_increases_fairly_a_little() -> None:
    fair, prop = nscc(disable_qa=1), nscc(disable_qa=1)
    for algo in (fair, prop):
        algo.cwnd = 0.25 * algo.max_cwnd
    start = fair.cwnd
    for n in range(40):
        ack(fair, 1.0 + n * BASE, delay=150e-6)  # above target, unmarked: fair increase
        ack(prop, 1.0 + n * BASE, delay=10e-6)
    assert start < fair.cwnd < prop.cwnd


def test_eta_is_added_once_per_adjustment_period() -> None:
    algo = nscc(disable_qa=1, fi=0, eta=1000)
    algo.cwnd = 0.25 * algo.max_cwnd
    before = algo.cwnd
    ack(algo, 1.0, delay=150e-6, nbytes=MTU)  # fair increase of 0: only eta can move it
    assert algo.cwnd == pytest.approx(before + 1000)
    ack(algo, 1.0 + BASE / 4, delay=150e-6, nbytes=MTU)  # same period: nothing
    assert algo.cwnd == pytest.approx(before + 1000)


def test_quick_adapt_drops_the_window_to_what_was_delivered() -> None:
    algo = nscc()
    now = 1.0
    ack(algo, now, delay=10e-6, nbytes=MTU)  # opens the first interval
    delivered = 0
    for n in range(3):  # little gets through in this interval
        ack(algo, now + (n + 1) * 20e-6, delay=500e-6, nbytes=MTU)
        delivered += MTU
    assert algo.quick_adapts == 0
    end = now + BASE + algo.target_delay
    ack(algo, end + 1e-6, delay=500e-6, nbytes=MTU)  # delay above qa_threshold after the interval
    delivered += MTU  # this ACK's bytes count as delivered in the interval it closes
    assert algo.quick_adapts == 1
    assert algo.cwnd == pytest.approx(delivered)


def test_quick_adapt_is_gated_by_what_was_delivered_and_can_be_disabled() -> None:
    busy = nscc()
    for n in range(60):  # a full window delivered per interval: qa_gate keeps the window
        ack(busy, 1.0 + n * 10e-6, delay=500e-6, nbytes=int(busy.max_cwnd / 10))
    assert busy.quick_adapts == 0
    off = nscc(disable_qa=1)
    off.on_trim(nbytes=MTU, now=1.0)
    ack(off, 2.0, delay=500e-6)
    assert off.quick_adapts == 0


def test_a_nack_removes_the_nacked_bytes_from_the_window() -> None:
    algo = nscc(disable_qa=1, eta=0)
    before = algo.cwnd
    algo.on_packet_sent(nbytes=8 * MTU, now=1.0)
    algo.on_trim(nbytes=MTU, now=1.0)
    algo.on_trim(nbytes=MTU, now=1.0, last_hop=True)
    assert algo.cwnd == before - 2 * MTU
    assert algo.inflight == 6 * MTU
    algo.on_loss(nbytes=MTU, timeout=False, now=1.0)  # a path failure: the window keeps it
    assert algo.cwnd == before - 2 * MTU


def test_a_nack_after_an_interval_triggers_quick_adapt() -> None:
    algo = nscc()
    ack(algo, 1.0, delay=10e-6, nbytes=MTU)
    algo.on_trim(nbytes=MTU, now=1.0 + BASE + algo.target_delay + 1e-6)
    assert algo.quick_adapts == 1
    assert algo.cwnd == pytest.approx(MTU)  # delivered only the NACK's worth: one MTU floor


def test_after_quick_adapt_marks_are_ignored_until_the_bytes_in_flight_are_acknowledged() -> None:
    algo = nscc()
    algo.on_packet_sent(nbytes=8 * MTU, now=1.0)
    ack(algo, 1.0, delay=10e-6, nbytes=MTU)
    algo.on_trim(nbytes=MTU, now=1.0 + BASE + algo.target_delay + 1e-6)
    assert algo.quick_adapts == 1
    in_flight = algo.inflight  # the bytes the quick adapt left in flight
    now = 1.0 + BASE + algo.target_delay + 2e-6
    window = algo.cwnd
    algo.avg_delay = 200e-6  # a standing queue: a mark above target would decrease
    acked = 0
    while acked + MTU < in_flight:  # marked ACKs of those bytes: ignored (uet-htsim processAck)
        algo.on_ack(acked_bytes=MTU, rtt=BASE + 200e-6, ce_count=1, pkt_count=1, now=now)
        acked += MTU
    assert algo.cwnd == window and algo.decreases == 0
    # the ACK that brings the last of them in counts: a mark decreases the window again
    algo.on_ack(acked_bytes=MTU, rtt=BASE + 200e-6, ce_count=1, pkt_count=1, now=now)
    assert algo.decreases == 1


def test_incast_with_last_hop_trims_completes_without_timeouts(make_net: Any) -> None:
    """Three senders to one receiver on the in-memory network: the receiver's leaf trims on
    its downlink (last hop), the spines now and then on theirs: every byte arrives, no ACK
    timeout, and most NACKs say last hop."""
    net = make_net(seed=3, rate_mbps=10.0, queue_depth=8, trim_threshold=4, ecn_threshold=2)
    senders = ("h0", "h1", "h2")
    flows = [net.connect(src, "h3", cc=CcProfile("nscc")) for src in senders]
    size = 1 << 20
    for n, flow in enumerate(flows):
        for part in range(4):
            chunk = bytes([n + 1]) * (size // 4)
            flow.sender.post_write_imm(
                chunk, BASE_ADDR + n * size + part * size // 4, flow.region.rkey, imm=n
            )
    net.kick_all()
    net.run(60.0, stop=lambda: sum(len(net.cqs[s]) for s in senders) == 12)
    for n, src in enumerate(senders):
        assert [c.status for c in net.cqs[src].poll(8)] == ["ok"] * 4
        assert flows[n].region.read(BASE_ADDR + n * size, size) == bytes([n + 1]) * size
    stats = [net.hosts[s].stats() for s in senders]
    assert sum(s["rtos"] for s in stats) == 0
    nacks = sum(s["nacks_received"] for s in stats)
    last_hop = sum(s["last_hop_trims_seen"] for s in stats)
    assert nacks > 0 and nacks / 2 <= last_hop <= nacks
