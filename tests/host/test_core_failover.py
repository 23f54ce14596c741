"""Failure and congestion on the in-memory fabric: retire on loss, probe back, trims, incast, RTO."""

from __future__ import annotations

from typing import Any

import pytest

from host.transport.config import ConfigError, StackConfig
from host.transport.events import EvStateChanged, QpError, RetransmitTimeout

BASE = 0x7F00_0000_0000
FAILED = ("t0-p0-r0", "t1-p0-s0")  # the first hop of path p0-s0 from rack 0


def pattern(n: int, seed: int) -> bytes:
    return bytes((i * 7 + seed * 13 + (i >> 8)) & 0xFF for i in range(n))


def transitions(net: Any, qpn: int | None = None) -> list[EvStateChanged]:
    net.drain_events()
    return [
        e for e in net.events if isinstance(e, EvStateChanged) and (qpn is None or e.qpn == qpn)
    ]


def test_failed_path_is_retired_at_first_loss_and_probed_back(make_net: Any) -> None:
    net = make_net(seed=3)
    flow = net.connect("h0", "h2")
    net.sim.fail_link(*FAILED, start=0.010, end=0.060)
    data = pattern(2 << 20, 1)
    assert net.write(flow, data, 10.0, wr_id=1).status == "ok"
    assert flow.region.read(BASE, len(data)) == data
    changes = transitions(net, flow.sender.qpn)
    retired = [e for e in changes if e.new == "assumed_bad"]
    # exactly the 32 EVs of p0-s0, all at the moment of the first loss, nothing else
    assert {e.path for e in retired} == {"p0-s0"} and len(retired) == 32
    assert retired[0].reason in ("sack", "late", "rto") and {e.reason for e in retired[1:]} == {
        "path"
    }
    assert len({e.time for e in retired}) == 1 and 0.010 <= retired[0].time < 0.060
    stats = net.hosts["h0"].stats()
    assert stats["rtos"] == 0  # SACK found the losses; no timeout was needed
    # only packets that were on the failed path when it broke were retransmitted
    assert 1 <= stats["retransmits"]["sack"] <= 32
    # after the repair a probe reply reinstates the whole path
    net.run(0.2)
    back = [e for e in transitions(net, flow.sender.qpn) if e.new == "good"]
    assert len(back) == 32 and {e.reason for e in back} == {"probe_reply"}
    assert all(e.time >= 0.060 for e in back)
    assert flow.sender.ev_table.counts()["good"] == 128
    assert stats["probes_sent"] >= 1


def test_traffic_uses_a_reinstated_path_again(make_net: Any) -> None:
    net = make_net(seed=4)
    flow = net.connect("h0", "h2")
    net.sim.fail_link(*FAILED, start=0.0, end=0.02)
    flow.sender.post_write(pattern(300_000, 1), BASE, flow.region.rkey)
    net.sim.kick("h0")
    net.run(1.0)
    assert flow.sender.ev_table.counts()["good"] == 128
    p0_s0 = {e.wire & 0xFFFFF for e in flow.sender.ev_table.slots if e.path.label == "p0-s0"}
    labels: list[int] = []
    inner = net.hosts["h0"].frames_to_send

    def frames_to_send(now: float) -> list[tuple[int, bytes]]:
        out = inner(now)
        labels.extend(((f[15] & 0x0F) << 16) | (f[16] << 8) | f[17] for _, f in out)
        return out

    net.hosts["h0"].frames_to_send = frames_to_send
    flow.sender.post_write(pattern(300_000, 2), BASE, flow.region.rkey)
    net.sim.kick("h0")
    net.run(2.0, stop=lambda: len(net.cqs["h0"]) == 2)
    assert [c.status for c in net.cqs["h0"].poll()] == ["ok", "ok"]
    on_path = sum(1 for label in labels if label in p0_s0)
    assert on_path >= len(labels) // 8  # about a quarter of the packets take p0-s0 again


def test_incast_completes_with_trimming_and_no_timeout(make_net: Any) -> None:
    net = make_net(seed=5, trim_threshold=8)
    senders = ["h0", "h1", "h2"]
    flows = [net.connect(src, "h3") for src in senders]
    size = 400_000
    for n, flow in enumerate(flows):
        flow.sender.post_write_imm(pattern(size, n), BASE + n * size, flow.region.rkey, imm=n)
    net.kick_all()
    net.run(20.0, stop=lambda: sum(len(net.cqs[s]) for s in senders) == 3)
    for n, (src, flow) in enumerate(zip(senders, flows, strict=True)):
        assert [c.status for c in net.cqs[src].poll()] == ["ok"]
        assert flow.region.read(BASE + n * size, size) == pattern(size, n)
    assert sorted(c.imm for c in net.cqs["h3"].poll(10)) == [0, 1, 2]
    assert net.sim.counters["trimmed"] > 0
    for src in senders:
        stats = net.hosts[src].stats()
        assert stats["rtos"] == 0
        assert stats["retransmits"]["rto"] == 0
    assert sum(net.hosts[s].stats()["nacks_received"] for s in senders) > 0
    assert net.hosts["h3"].stats()["nacks_sent"] == net.hosts["h3"].stats()["trims_seen"]
    # trims are congestion, not failure: no EV was retired
    assert not [e for e in transitions(net) if e.new == "assumed_bad"]


def test_ev_min_active_limits_retirement(make_net: Any) -> None:
    config = StackConfig(ev_min_active=120)
    net = make_net(seed=6, config=config)
    flow = net.connect("h0", "h2")
    net.sim.fail_link(*FAILED, start=0.005)
    assert net.write(flow, pattern(1 << 20, 1), 30.0).status == "ok"
    counts = flow.sender.ev_table.counts()
    assert counts["good"] == 120 and counts["assumed_bad"] == 8
    assert net.hosts["h0"].stats()["retire_suppressed"] >= 1


def test_spray_no_failover_never_retires(make_net: Any) -> None:
    net = make_net(seed=7)
    flow = net.connect("h0", "h2", policy="spray-no-failover")
    net.sim.fail_link(*FAILED, start=0.005)
    assert net.write(flow, pattern(1 << 20, 1), 60.0).status == "ok"
    assert not transitions(net)
    assert flow.sender.ev_table.counts()["good"] == 128
    assert net.hosts["h0"].stats()["retransmits"]["sack"] > 0


def test_single_path_waits_out_a_failure_with_timeouts(make_net: Any) -> None:
    config = StackConfig(ack_timeout_exp=2)  # 4.1 us: 4.1 ms on the 100 Mb/s network
    net = make_net(seed=8, config=config)
    flow = net.connect("h0", "h2", policy="single-path")
    path = flow.sender.ev_table.pinned.path
    first = path.hops[0]
    net.sim.fail_link(first.switch, net.fabric.switch(first.switch).port(first.out_port).peer,
                      start=0.005, end=0.1)  # fmt: skip
    data = pattern(500_000, 1)
    assert net.write(flow, data, 30.0).status == "ok"
    assert flow.region.read(BASE, len(data)) == data
    stats = net.hosts["h0"].stats()
    assert stats["rtos"] >= 2
    timeouts = [e for e in net.events if isinstance(e, RetransmitTimeout)]
    # exponential backoff: the exponent grows with consecutive timeouts during the outage
    # after mrc.h's retry_linear_cnt timeouts at the fixed interval
    linear = config.retry_linear_cnt
    assert [e.backoff for e in timeouts[:linear]] == [2] * linear
    assert max(e.backoff for e in timeouts) >= 4
    assert not transitions(net)


def cut_first_link(net: Any, flow: Any, start: float, end: float = float("inf")) -> None:
    """Fail the first link of the single path ``flow`` is pinned to, from ``start`` to ``end``."""
    first = flow.sender.ev_table.pinned.path.hops[0]
    peer = net.fabric.switch(first.switch).port(first.out_port).peer
    net.sim.fail_link(first.switch, peer, start, end)


def write_on_a_dead_path(net: Any) -> Any:
    """A single-path QP h0 -> h2 whose path is cut from the start: its one WRITE must fail with
    ``retry_exceeded``. Returns the flow."""
    flow = net.connect("h0", "h2", policy="single-path")
    cut_first_link(net, flow, 0.0)
    flow.sender.post_write(pattern(20_000, 1), BASE, flow.region.rkey, wr_id=5)
    net.sim.kick("h0")
    net.run(30.0, stop=lambda: len(net.cqs["h0"]) == 1)
    (entry,) = net.cqs["h0"].poll()
    assert (entry.wr_id, entry.status) == (5, "retry_exceeded")
    return flow


def test_retry_limit_puts_the_qp_in_error(make_net: Any) -> None:
    config = StackConfig(ack_timeout_exp=0, max_retransmits=3)
    net = make_net(seed=9, config=config)
    flow = write_on_a_dead_path(net)
    assert any(isinstance(e, QpError) for e in net.events)
    assert flow.sender.error is not None


def test_one_timeout_recovers_a_whole_lost_window(make_net: Any) -> None:
    net = make_net(seed=10)
    flow = net.connect("h0", "h2", policy="single-path")
    cut_first_link(net, flow, start=0.05, end=0.3)
    flow.sender.post_write(pattern(4 << 20, 1), BASE, flow.region.rkey)
    net.sim.kick("h0")
    end = net.run(30.0, stop=lambda: len(net.cqs["h0"]) == 1)
    assert net.cqs["h0"].poll()[0].status == "ok"
    timeouts = [e for e in net.events if isinstance(e, RetransmitTimeout)]
    # the window lost at 0.05 s is resent by the first timeouts after the repair, not one
    # packet per (doubling) timeout
    assert len(timeouts) <= 3
    assert end < 1.0  # simulated seconds: 4 MiB at 100 Mb/s is 0.34 s plus the outage


def test_retry_counters_after_mrc_h_linear_then_exponential(make_net: Any) -> None:
    # mrc_qp_attr.retry: linear_cnt timeouts at the fixed interval, then exp_cnt doubled ones,
    # then the QP fails (exp_cnt 25 would mean no limit)
    config = StackConfig(ack_timeout_exp=0, retry_linear_cnt=2, retry_exp_cnt=3)
    net = make_net(seed=9, config=config)
    write_on_a_dead_path(net)
    timeouts = [e.backoff for e in net.events if isinstance(e, RetransmitTimeout)]
    # 2 retries at t = 0, 3 backed off (t = 1, 2, 3), and the sixth timeout gives up
    assert timeouts == [0, 0, 1, 2, 3, 3]
    errors = [e for e in net.events if isinstance(e, QpError)]
    assert len(errors) == 1 and "retry limit" in errors[0].reason
    with pytest.raises(ConfigError, match="retry_linear_cnt"):
        StackConfig(retry_linear_cnt=8)


def test_a_qp_that_gets_work_again_probes_its_retired_paths_at_once(make_net: Any) -> None:
    """An idle QP backs off its probes of a retired path (up to 2^PROBE_BACKOFF_MAX intervals);
    once it has work again it probes every interval, so a path that came back while it was
    idle (a rebooted spine) is reinstated within an interval or two of the work, not at the end
    of the longest backed-off gap."""
    net = make_net(seed=3)
    flow = net.connect("h0", "h2")
    qpn = flow.sender.qpn
    net.sim.fail_link(*FAILED, start=0.010, end=0.4)
    assert net.write(flow, pattern(2 << 20, 1), 10.0, wr_id=1).status == "ok"
    assert [e for e in transitions(net, qpn) if e.new == "assumed_bad"]
    net.run(0.45)  # idle through the outage and past the repair: the probes backed off
    assert not [e for e in transitions(net, qpn) if e.new == "good"]
    # driver seconds (the core keeps protocol time)
    due = min(flow.sender._probe_due.values()) * net.config.dilation
    interval = net.config.probe_interval * net.config.dilation
    posted = net.sim.now
    assert due > posted + 4 * interval  # the case: the next probe is far off
    flow.sender.post_write(pattern(300_000, 2), BASE, flow.region.rkey)
    net.sim.kick("h0")
    net.run(posted + 4 * interval)
    back = [e for e in transitions(net, qpn) if e.new == "good"]
    assert len(back) == 32 and {e.reason for e in back} == {"probe_reply"}
    assert max(e.time for e in back) < due
