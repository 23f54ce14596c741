"""A QP's own config: ACK timeout, retry counts and windows per QP, at creation and while it runs
(``Context.create_qp(config=...)``, ``Context.configure_qp``)."""

from __future__ import annotations

from typing import Any

import pytest

from host.transport.cc import CcProfile
from host.transport.config import ACK_TIMEOUT_UNIT, ConfigError, StackConfig
from host.transport.events import QpError, RetransmitTimeout

BASE = 0x7F00_0000_0000
OWN_QPN, CONTEXT_QPN = 0x301, 0x302  # QP numbers that tell the two flows' events apart
FIXED_WINDOW = CcProfile("fixed", {"window": 256})  # a window that never limits before mpr does


def pattern(n: int, seed: int) -> bytes:
    return bytes((i * 7 + seed * 13 + (i >> 8)) & 0xFF for i in range(n))


def timeouts_of(net: Any, qpn: int) -> list[RetransmitTimeout]:
    return [e for e in net.events if isinstance(e, RetransmitTimeout) and e.qpn == qpn]


def timeouts_so_far(net: Any) -> list[RetransmitTimeout]:
    """The timeouts of QP ``OWN_QPN`` so far (events drained as the run goes)."""
    net.drain_events()
    return timeouts_of(net, OWN_QPN)


def error_of(net: Any, qpn: int) -> QpError:
    (error,) = [e for e in net.events if isinstance(e, QpError) and e.qpn == qpn]
    return error


def test_a_qp_config_keeps_the_context_wide_fields(make_net: Any) -> None:
    net = make_net(seed=1)
    ctx, cq = net.host("h0"), net.cqs["h0"]
    paths = net.fabric.paths("h0", "h2")
    assert ctx.create_qp("h2", paths, cq=cq).config is ctx.config
    for field, value in (("dilation", 1.0), ("mtu", 1024), ("hop_limit", 7)):
        with pytest.raises(ConfigError, match=f"StackConfig.{field} .*context's value"):
            ctx.create_qp("h2", paths, cq=cq, config=ctx.config.with_(**{field: value}))
    own = ctx.config.with_(ack_timeout_exp=9, max_backoff_exp=12)
    qp = ctx.create_qp("h2", paths, cq=cq, config=own)
    assert qp.config is own and ctx.config.ack_timeout_exp == 7
    # a running QP changes its timers and limits only, and the context's fields not at all
    with pytest.raises(ConfigError, match="ev_count is fixed"):
        ctx.configure_qp(qp.qpn, own.with_(ev_count=8))
    with pytest.raises(ConfigError, match="StackConfig.mtu"):
        ctx.configure_qp(qp.qpn, own.with_(mtu=1024))
    assert qp.config is own


def test_a_qp_times_out_and_fails_after_its_own_counts(make_net: Any) -> None:
    # the context: 1 us timeouts, 3 at the fixed interval, 6 backed off; one QP of its own:
    # 4 us, 1 and 1. Every packet is dropped: both writes end in retry_exceeded.
    net = make_net(
        seed=9, config=StackConfig(ack_timeout_exp=0, retry_linear_cnt=3, retry_exp_cnt=6)
    )
    own = net.config.with_(ack_timeout_exp=2, retry_linear_cnt=1, retry_exp_cnt=1)
    mine = net.connect("h0", "h2", policy="single-path", qpn=OWN_QPN, config=own)
    other = net.connect("h1", "h3", policy="single-path", qpn=CONTEXT_QPN)
    assert mine.sender.config is own and other.sender.config is net.config
    net.sim.set_faults(loss=1.0)
    for flow in (mine, other):
        flow.sender.post_write(pattern(20_000, 1), BASE, flow.region.rkey, wr_id=flow.sender.qpn)
        net.sim.kick(flow.src)
    net.run(30.0, stop=lambda: len(net.cqs["h0"]) == 1 and len(net.cqs["h1"]) == 1)
    for host, qpn in (("h0", OWN_QPN), ("h1", CONTEXT_QPN)):
        (entry,) = net.cqs[host].poll()
        assert (entry.wr_id, entry.status) == (qpn, "retry_exceeded")
    unit = ACK_TIMEOUT_UNIT * net.config.dilation  # 1.024 us of protocol time, in driver time
    # its own exponent (2, then backed off once) and its own 1 + 1 retries: the third gives up
    mine_timeouts = timeouts_of(net, OWN_QPN)
    assert [e.backoff for e in mine_timeouts] == [2, 3, 3]
    assert mine_timeouts[0].time == pytest.approx(4 * unit, rel=0.05)
    assert "3 ACK timeouts" in error_of(net, OWN_QPN).reason
    # the context's QP: exponent 0, 3 + 6 retries, the tenth gives up, much later
    other_timeouts = timeouts_of(net, CONTEXT_QPN)
    assert [e.backoff for e in other_timeouts[:4]] == [0, 0, 0, 1] and len(other_timeouts) == 10
    assert other_timeouts[0].time == pytest.approx(unit, rel=0.05)
    assert error_of(net, OWN_QPN).time * 4 < error_of(net, CONTEXT_QPN).time


def write_into_loss(make_net: Any, ack_timeout_exp: int, retry_linear_cnt: int) -> tuple[Any, Any]:
    """(net, flow): QP ``OWN_QPN`` h0 -> h2 (one path, 25 backed-off retries) has posted a write
    into a network that drops every packet."""
    config = StackConfig(
        ack_timeout_exp=ack_timeout_exp, retry_linear_cnt=retry_linear_cnt, retry_exp_cnt=25
    )
    net = make_net(seed=9, config=config)
    flow = net.connect("h0", "h2", policy="single-path", qpn=OWN_QPN)
    net.sim.set_faults(loss=1.0)
    flow.sender.post_write(pattern(20_000, 1), BASE, flow.region.rkey, wr_id=1)
    net.sim.kick("h0")
    return net, flow


def test_a_running_qp_takes_new_timeout_and_retry_counts_at_once(make_net: Any) -> None:
    # a 1 ms ACK timeout (2^10 x 1.024 us): the dropped write would wait that long for it
    net, flow = write_into_loss(make_net, ack_timeout_exp=10, retry_linear_cnt=3)
    ctx = net.hosts["h0"]
    unit = ACK_TIMEOUT_UNIT * net.config.dilation
    net.run(2 * unit)
    assert not timeouts_of(net, OWN_QPN)
    # 4 us, one retry at the fixed interval, one backed off, then the QP fails
    ctx.configure_qp(
        OWN_QPN, ctx.config.with_(ack_timeout_exp=2, retry_linear_cnt=1, retry_exp_cnt=1)
    )
    assert flow.sender.config.ack_timeout_exp == 2
    net.sim.kick("h0")  # the driver asks for the next timer again
    net.run(30.0, stop=lambda: len(net.cqs["h0"]) == 1)
    assert net.cqs["h0"].poll()[0].status == "retry_exceeded"
    timeouts = timeouts_of(net, OWN_QPN)
    assert [e.backoff for e in timeouts] == [2, 3, 3]
    # the first timeout came 4 us after the packets were sent, not 1 ms
    assert timeouts[0].time == pytest.approx(4 * unit, rel=0.05)
    assert error_of(net, OWN_QPN).time < 50 * unit


def test_a_lower_backoff_ceiling_caps_a_backed_off_qp(make_net: Any) -> None:
    net, flow = write_into_loss(make_net, ack_timeout_exp=0, retry_linear_cnt=0)
    ctx = net.hosts["h0"]
    net.run(30.0, stop=lambda: len(timeouts_so_far(net)) >= 4)
    assert [e.backoff for e in timeouts_of(net, OWN_QPN)] == [1, 2, 3, 4]
    # the ceiling drops to 2^1: the timeouts stay at 2 us (exponent 1), the backoff is capped
    ctx.configure_qp(OWN_QPN, ctx.config.with_(ack_timeout_exp=1, max_backoff_exp=1))
    net.sim.kick("h0")
    net.run(30.0, stop=lambda: len(timeouts_so_far(net)) >= 8)
    later = timeouts_of(net, OWN_QPN)[4:8]
    assert [e.backoff for e in later] == [1, 1, 1, 1]
    unit = ACK_TIMEOUT_UNIT * net.config.dilation
    gaps = [b.time - a.time for a, b in zip(later, later[1:], strict=False)]
    assert all(g == pytest.approx(2 * unit, rel=0.05) for g in gaps)


def test_max_outstanding_bounds_the_psns_in_flight(make_net: Any) -> None:
    # mpr as requestor: a window of 256 packets, but at most 100 PSNs past the oldest unacked
    peaks = {}
    for limit in (None, 100):
        net = make_net(seed=9)
        config = None if limit is None else net.config.with_(max_outstanding=limit, rx_window=128)
        flow = net.connect("h0", "h2", cc=FIXED_WINDOW, config=config)
        data = pattern(2 << 20, 2)
        flow.sender.post_write(data, BASE, flow.region.rkey, wr_id=1)
        net.sim.kick("h0")
        peak = 0

        def done(qp: Any = flow.sender, cq: Any = net.cqs["h0"]) -> bool:
            nonlocal peak
            peak = max(peak, qp.describe()["psns_in_flight"])
            return len(cq) == 1

        net.run(30.0, stop=done)
        assert net.cqs["h0"].poll()[0].status == "ok"
        assert flow.region.read(BASE, len(data)) == data
        peaks[limit] = peak
    assert peaks == {None: 256, 100: 100}


def test_rx_window_bounds_what_the_responder_accepts(make_net: Any) -> None:
    # mpr as responder: a QP accepts PSNs up to rx_window past its cumulative PSN, its own
    # window, whatever its peer's. 100 packets delivered last first: with a window of 64, the
    # 36 beyond it are dropped; with the context's window, none.
    drops = {}
    for window in (None, 64):
        net = make_net(seed=9)
        a, b = net.host("h0"), net.host("h2")
        config = None if window is None else net.config.with_(rx_window=window, max_outstanding=32)
        qa = a.create_qp("h2", net.fabric.paths("h0", "h2"), cq=net.cqs["h0"], cc=FIXED_WINDOW)
        qb = b.create_qp("h0", net.fabric.paths("h2", "h0"), cq=net.cqs["h2"], config=config)
        qa.connect(qb.qpn)
        qb.connect(qa.qpn)
        qa.post_write(pattern(100 * net.config.mtu, 3), BASE, net.regions["h2"].rkey)
        frames = a.frames_to_send(0.0)
        assert len(frames) == 100
        for plane, frame in reversed(frames):
            b.receive_frame(plane, frame, 0.0)
        drops[window] = b.stats()["drops"].get("psn_out_of_window", 0)
    assert drops == {None: 0, 64: 36}
