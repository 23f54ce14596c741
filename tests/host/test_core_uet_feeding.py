"""NSCC fed as the UET reference simulator (uet-htsim) feeds it, rule by rule, and the stack
profile ``testbed-2026`` that keeps the testbed's earlier rules:

- the delay sample is the raw RTT of the acknowledged packet (``UecSrc::processAck``), not
  capped at the fastest path's smoothed RTT; an ACK whose packet an earlier ACK acknowledged
  gives the average delay instead;
- the base RTT starts at the fabric's unloaded RTT and the smallest sample replaces it, with
  ``max_cwnd`` following (``UecSrc::update_base_rtt``);
- a CE-marked packet is acknowledged at once (``UecSink::processData``);
- so are the first packet and the last one the sender's window lets out (its ACK request
  bit), and a requested ACK again once the PSNs before it are in (``sendNewPacket``,
  ``processData``);
- a timeout takes the timed-out packet out of the window (``UecSrc::rtxTimerExpired``);
- ``ev_min_active`` defaults to a quarter of the EVs (the OCP MRC API's examples).

Algorithms are driven with time passed in; QPs run on the deterministic in-memory network."""

from __future__ import annotations

from typing import Any

import pytest

from host.transport import cc, wire
from host.transport.api import Context
from host.transport.cc import CcProfile
from host.transport.cc.fabric import fabric_base_rtt, fabric_cc_profile
from host.transport.cc.nscc import Nscc, uet_defaults
from host.transport.config import LEGACY_PROFILE, STACK_PROFILES, UET_PROFILE, StackConfig
from host.transport.events import RetransmitTimeout
from host.transport.evs import GeneratedEvProfile
from topologies import Fabric
from topologies.config import BASE_RTT_LINKS, CONTROL_FRAME_BYTES, RACK_LINKS

MTU = 4096
BASE = 10e-6  # seconds: the configured (unloaded) base RTT of the algorithm tests
RATE = 100e9
REGION = 0x7F00_0000_0000
LEGACY = StackConfig.profile(LEGACY_PROFILE)


def nscc(config: StackConfig | None = None, **changes: float) -> Nscc:
    params = {**uet_defaults(base_rtt=BASE, link_rate_bps=RATE, mtu=MTU), **changes}
    algo = cc.create("nscc", mtu=MTU, params=params, config=config)
    assert isinstance(algo, Nscc)
    return algo


def record_delays(qp: Any) -> list[tuple[float, float]]:
    """(RTT given to the QP's congestion control, fastest path's smoothed RTT then), per ACK."""
    seen: list[tuple[float, float]] = []
    inner = qp.cc.on_ack

    def on_ack(*, acked_bytes: int, rtt: float | None, ce_count: int, pkt_count: int,
               now: float) -> None:  # fmt: skip
        if rtt is not None:
            seen.append((rtt, qp.ev_table.fastest_rtt()))
        inner(acked_bytes=acked_bytes, rtt=rtt, ce_count=ce_count, pkt_count=pkt_count, now=now)

    qp.cc.on_ack = on_ack
    return seen


def incast(net: Any, size: int = 1 << 19) -> list[Any]:
    """h0 and h1 each write ``size`` bytes to h3 (queues build at h3's leaf); returns the flows."""
    flows = [net.connect(src, "h3") for src in ("h0", "h1")]
    for n, flow in enumerate(flows):
        flow.sender.post_write(bytes([n + 1]) * size, REGION + n * size, flow.region.rkey)
    net.kick_all()
    net.run(30.0, stop=lambda: all(len(net.cqs[s]) for s in ("h0", "h1")))
    for src in ("h0", "h1"):
        assert [c.status for c in net.cqs[src].poll()] == ["ok"]
    return flows


# -- the profiles -------------------------------------------------------------------------------


def test_the_legacy_profile_is_named_once_and_sets_the_earlier_rules() -> None:
    assert set(STACK_PROFILES) == {UET_PROFILE, LEGACY_PROFILE}
    assert StackConfig.profile(UET_PROFILE) == StackConfig()
    assert not LEGACY.cc_raw_delay and not LEGACY.cc_learn_base_rtt
    assert not LEGACY.ack_ce_at_once and LEGACY.timeout_quick_adapt and not LEGACY.ack_requests
    assert LEGACY.ev_min_active == 1
    default = StackConfig()
    assert default.cc_raw_delay and default.cc_learn_base_rtt and default.ack_ce_at_once
    assert default.ack_requests
    assert not default.timeout_quick_adapt and default.ev_min_active is None
    assert StackConfig.profile(LEGACY_PROFILE, ack_every=2).ack_every == 2
    with pytest.raises(ValueError, match="stack profile 'nope'"):
        StackConfig.profile("nope")


# -- (a) the delay sample -----------------------------------------------------------------------


def test_nscc_gets_the_raw_rtt_of_each_acknowledged_packet(make_net: Any) -> None:
    net = make_net(seed=5, rate_mbps=50.0, queue_depth=16)
    flows = incast(net)
    seen = record_delays(flows[0].sender)
    flows[0].sender.post_write(b"\1" * (1 << 19), REGION, flows[0].region.rkey)
    net.kick_all()
    net.run(net.sim.now + 30.0, stop=lambda: len(net.cqs["h0"]) == 1)
    samples = list(net.hosts["h0"]._shared.stats.rtt)[-len(seen) :]
    assert [rtt for rtt, _ in seen] == samples  # each packet's RTT, as measured
    # some packets were slower than the fastest path's average: a cap would have changed them
    assert any(fastest and rtt > fastest for rtt, fastest in seen)


def test_an_ack_whose_packet_was_acknowledged_before_gives_the_average_delay(
    make_net: Any,
) -> None:
    # ACKs come back over every path: the ACK of PSN 0 may come after PSN 1's ACK freed PSN 0.
    # Its RTT is no word of a packet this ACK acknowledges: the window takes the average delay
    # and does not fold it in (uet-htsim processAck: no send record left, get_avg_delay)
    net = make_net(seed=4)
    flow = net.connect("h0", "h2")
    ctx, qp = net.hosts["h0"], flow.sender
    qp.post_write(bytes(3 * 4096), REGION, flow.region.rkey)
    assert len([f for f in ctx.frames_to_send(0.0) if f]) >= 3
    sent = {psn: (rec.slot.wire, rec.ts32) for psn, rec in qp._outstanding.items()}
    given: list[float | None] = []
    inner = qp.cc.on_ack

    def on_ack(*, acked_bytes: int, rtt: float | None, ce_count: int, pkt_count: int,
               now: float) -> None:  # fmt: skip
        given.append(rtt)
        inner(acked_bytes=acked_bytes, rtt=rtt, ce_count=ce_count, pkt_count=pkt_count, now=now)

    qp.cc.on_ack = on_ack

    def ack(cum: int, echo: int, now: float) -> None:
        wire_ev, ts = sent[echo]
        qp.on_ack_fields((qp.qpn, cum, cum, 0, ts, 0, 1, 0, wire_ev), now)

    ack(2, echo=1, now=20e-6)  # PSN 1's ACK, first: frees PSNs 0 and 1
    average = qp.cc.avg_delay
    ack(1, echo=0, now=90e-6)  # PSN 0's own ACK, late: its 90 us is no word of a new packet
    assert qp.cc.avg_delay == average  # not folded into the average
    ack(3, echo=2, now=25e-6)  # PSN 2's ACK frees it: its own RTT
    assert given[0] == pytest.approx(20e-6) and given[1] is None
    assert given[2] == pytest.approx(25e-6)
    assert ctx.stats()["stale_acks"] == 1


def test_legacy_caps_the_delay_at_the_fastest_path(make_net: Any) -> None:
    net = make_net(seed=5, rate_mbps=50.0, queue_depth=16, config=LEGACY)
    flows = incast(net)
    seen = record_delays(flows[0].sender)
    flows[0].sender.post_write(b"\1" * (1 << 19), REGION, flows[0].region.rkey)
    net.kick_all()
    net.run(net.sim.now + 30.0, stop=lambda: len(net.cqs["h0"]) == 1)
    assert seen and all(not fastest or rtt <= fastest for rtt, fastest in seen)


# -- (b) the base RTT ---------------------------------------------------------------------------


def test_base_rtt_falls_to_the_smallest_sample_and_max_cwnd_follows() -> None:
    algo = nscc()
    max_cwnd, target = algo.max_cwnd, algo.target_delay
    for now, rtt in enumerate((14e-6, 8e-6, 12e-6, 6e-6, 9e-6)):
        algo.on_packet_sent(nbytes=MTU, now=float(now))
        algo.on_ack(acked_bytes=MTU, rtt=rtt, ce_count=0, pkt_count=1, now=float(now))
    assert algo.base_rtt == pytest.approx(6e-6)
    assert algo.max_cwnd == pytest.approx(max_cwnd * 6 / 10)  # 1.5 BDP at the new base RTT
    assert algo.cwnd <= algo.max_cwnd
    assert algo.target_delay == target  # the network's, as in the reference
    fixed = nscc(LEGACY)
    fixed.on_rtt(rtt=6e-6, now=0.0)
    assert fixed.base_rtt == pytest.approx(BASE) and fixed.max_cwnd == max_cwnd


def test_a_floor_keeps_the_learnt_base_rtt_at_the_fabric_unloaded_one() -> None:
    """The emulated targets pass a frame through an idle port at once, so a full-size packet's
    RTT there can be a tenth of the fabric's unloaded one; the agent floors the base RTT at it
    (``cc_base_rtt_floor``) so that max_cwnd stays 1.5 BDP instead of falling to one MTU."""
    free = nscc()
    floored = nscc(StackConfig(cc_base_rtt_floor=BASE))
    max_cwnd = floored.max_cwnd
    for algo in (free, floored):
        algo.on_packet_sent(nbytes=MTU, now=0.0)
        algo.on_ack(acked_bytes=MTU, rtt=BASE / 10, ce_count=0, pkt_count=1, now=0.0)
    assert free.max_cwnd == pytest.approx(max(MTU, max_cwnd / 10))
    assert floored.base_rtt == pytest.approx(BASE) and floored.max_cwnd == max_cwnd
    with pytest.raises(ValueError, match="cc_base_rtt_floor"):
        StackConfig(cc_base_rtt_floor=-1.0)


def test_a_qp_within_a_rack_floors_its_base_rtt_at_its_own_paths_unloaded_rtt(
    fabric: Fabric,
) -> None:
    """The agent's floor is the unloaded RTT between racks; a QP to a peer of its own rack
    (two links each way, not four) is floored at the unloaded RTT of its paths, so it learns the
    base RTT uet-htsim learns there. Its own config keeps the context's floor (a running QP's
    config changes only its live fields)."""
    topology = fabric.topology
    floor = fabric_base_rtt(topology)
    config = StackConfig(cc_base_rtt_floor=floor, dilation=topology.dilation)
    ctx = Context("h0", fabric.host("h0").nics, config=config)
    cq = ctx.create_cq()
    rack_peer, other = fabric.host("h1"), fabric.host("h2")
    assert rack_peer.rack == fabric.host("h0").rack != other.rack
    within = ctx.create_qp("h1", fabric.paths("h0", "h1"), cq=cq)
    between = ctx.create_qp("h2", fabric.paths("h0", "h2"), cq=cq)
    frame = topology.link_mtu + 14
    rack_rtt = (
        RACK_LINKS * (frame + CONTROL_FRAME_BYTES) * 8 / (topology.link_rate_mbps * 1e6)
        + 2 * RACK_LINKS * topology.link_delay_us / 1e6
    ) / topology.dilation
    assert within.cc.config.cc_base_rtt_floor == pytest.approx(rack_rtt)
    assert between.cc.config.cc_base_rtt_floor == floor
    for qp in (within, between):
        qp.cc.on_rtt(rtt=rack_rtt / 2, now=0.0)  # an idle emulated port: a frame at once
    assert isinstance(within.cc, Nscc) and isinstance(between.cc, Nscc)
    assert within.cc.base_rtt == pytest.approx(rack_rtt)
    assert between.cc.base_rtt == pytest.approx(floor)
    ctx.configure_qp(within.qpn, config.with_(ack_delay=2 * config.ack_delay))  # still live


def test_the_fabric_base_rtt_is_the_unloaded_one_learnt_on_the_network(make_net: Any) -> None:
    net = make_net(seed=5, rate_mbps=50.0, queue_depth=16)
    topo = net.sim.topology
    profile = fabric_cc_profile(topo, CcProfile("nscc"))
    assert profile.params["base_rtt"] == pytest.approx(topo.base_rtt / topo.dilation * 1e9)
    legacy = fabric_cc_profile(topo, CcProfile("nscc"), LEGACY)
    loaded = (topo.base_rtt + BASE_RTT_LINKS * topo.frame_time) / topo.dilation
    assert fabric_base_rtt(topo, loaded=True) == pytest.approx(loaded)
    assert legacy.params["base_rtt"] == pytest.approx(loaded * 1e9)
    # started above every RTT of the network, the base RTT converges to the smallest sample
    high = CcProfile("nscc", {**profile.params, "base_rtt": 3 * profile.params["base_rtt"]})
    flow = net.connect("h0", "h3", cc=high)
    flow.sender.post_write(b"\1" * (1 << 19), REGION, flow.region.rkey)
    net.kick_all()
    net.run(30.0, stop=lambda: len(net.cqs["h0"]) == 1)
    rtts = net.hosts["h0"]._shared.stats.rtt
    assert flow.sender.cc.base_rtt == pytest.approx(min(rtts))
    assert flow.sender.cc.max_cwnd == pytest.approx(
        high.params["max_cwnd"] * min(rtts) / (high.params["base_rtt"] * 1e-9)
    )


# -- (c) CE-marked packets acknowledged at once -------------------------------------------------


def data(flow: Any, psn: int, ecn: int, ack_req: bool = False) -> wire.DataFields:
    """The fields of a one-MTU WRITE of message ``psn + 1`` as the receiver decodes them."""
    payload = memoryview(bytes(MTU))
    return (
        flow.receiver.qpn, psn, ack_req, ecn, wire.OP_WRITE_ONLY, REGION + psn * MTU,
        flow.region.rkey, MTU, None, 0, 0xFF, 7, psn + 1, MTU, 0, 0, payload, 0,
    )  # fmt: skip


def receiving(make_net: Any, config: StackConfig | None) -> tuple[Any, Any, Any]:
    """A flow h0 -> h3 whose receiver took its first (unmarked) packet: the flow, the
    receiving host's counters and the in-memory network."""
    net = make_net(seed=5, config=config)
    flow = net.connect("h0", "h3")
    stats = net.hosts["h3"]._shared.stats
    flow.receiver.on_data_fields(data(flow, 0, wire.ECN_ECT0), 1.0)
    return flow, stats, net


@pytest.mark.parametrize("config", [None, LEGACY], ids=["uet", LEGACY_PROFILE])
def test_a_ce_marked_packet_is_acknowledged_at_once(
    make_net: Any, config: StackConfig | None
) -> None:
    flow, stats, net = receiving(make_net, config)
    receiver = flow.receiver
    first = stats.acks_sent  # uet: the first packet is acknowledged at once
    assert first == (1 if config is None else 0)
    receiver.on_data_fields(data(flow, 1, wire.ECN_ECT0), 1.0)
    assert stats.acks_sent == first  # an unmarked packet waits for ack_every packets
    receiver.on_data_fields(data(flow, 2, wire.ECN_CE), 1.0)
    if config is None:
        assert stats.acks_sent == first + 1  # at once, covering both, one of them CE
        ack = wire.decode_ack(net.hosts["h3"]._shared.outbox[-1][1])
        assert ack is not None and ack[5:7] == (1, 2)  # CE count, packets covered
    else:
        assert stats.acks_sent == 0  # testbed-2026: the mark waits with the others
        receiver.on_data_fields(data(flow, 3, wire.ECN_ECT0), 1.0)
        assert stats.acks_sent == 1


@pytest.mark.parametrize("config", [None, LEGACY], ids=["uet", LEGACY_PROFILE])
def test_a_requested_ack_is_sent_again_once_the_psns_before_it_are_in(
    make_net: Any, config: StackConfig | None
) -> None:
    flow, stats, net = receiving(make_net, config)
    receiver = flow.receiver
    before = stats.acks_sent
    receiver.on_data_fields(data(flow, 2, wire.ECN_ECT0, ack_req=True), 1.0)
    assert stats.acks_sent == before + 1  # the request, at once (PSN 1 still missing)
    receiver.on_data_fields(data(flow, 1, wire.ECN_ECT0), 1.0)
    # uet: PSN 1 fills the gap and the requested ACK comes again, cumulative; testbed-2026
    # waits for ack_every packets
    assert stats.acks_sent == before + (2 if config is None else 1)
    ack = wire.decode_ack(net.hosts["h3"]._shared.outbox[-1][1])
    assert ack is not None


@pytest.mark.parametrize("config", [None, LEGACY], ids=["uet", LEGACY_PROFILE])
def test_the_last_packet_the_window_lets_out_requests_an_ack(
    make_net: Any, config: StackConfig | None
) -> None:
    net = make_net(seed=5, config=config)
    flow = net.connect("h0", "h3")
    sender = flow.sender
    sender.cc.cwnd = 3.5 * MTU  # room for three packets (in flight + a packet <= cwnd)
    sender.post_write(b"\1" * (8 * MTU), REGION, flow.region.rkey)
    frames = [f for _, f in net.hosts["h0"].frames_to_send(1.0)]
    data_pkts = [wire.decode_data(f) for f in frames]
    requests = [d[2] for d in data_pkts if d is not None]
    assert len(requests) == 3
    # uet: the third fills the window (uet-htsim sendNewPacket); testbed-2026: none (the
    # message's last packet is not among them)
    assert requests == [False, False, config is None]


# -- (d) a timeout ------------------------------------------------------------------------------


def test_a_timeout_takes_the_packet_out_of_the_window() -> None:
    algo = nscc()
    algo.on_packet_sent(nbytes=8 * MTU, now=1.0)
    algo.on_ack(acked_bytes=MTU, rtt=BASE, ce_count=0, pkt_count=1, now=1.0)
    before = algo.cwnd
    algo.on_loss(nbytes=MTU, timeout=True, now=1.0 + 10 * BASE)
    assert algo.cwnd == pytest.approx(before - MTU)
    assert algo.inflight == pytest.approx(6 * MTU) and algo.quick_adapts == 0
    legacy = nscc(LEGACY)
    legacy.on_packet_sent(nbytes=8 * MTU, now=1.0)
    legacy.on_ack(acked_bytes=MTU, rtt=BASE, ce_count=0, pkt_count=1, now=1.0)
    legacy.on_loss(nbytes=MTU, timeout=True, now=1.0 + 10 * BASE)
    assert legacy.quick_adapts == 1 and legacy.cwnd == pytest.approx(MTU)  # what was delivered


def test_a_timed_out_packet_leaves_the_window_on_the_network(make_net: Any) -> None:
    net = make_net(seed=5, config=StackConfig(ack_timeout_exp=2))
    flow = net.connect("h0", "h3")
    before = flow.sender.cc.cwnd
    net.sim.set_faults(loss=1.0)  # nothing arrives: the one packet times out
    flow.sender.post_write(bytes(MTU), REGION, flow.region.rkey)
    net.kick_all()
    net.run(1.0, stop=lambda: net.hosts["h0"]._shared.stats.rtos > 0)
    timeouts = [e for e in net.events if isinstance(e, RetransmitTimeout)]
    assert timeouts and timeouts[0].packets == 1
    assert flow.sender.cc.cwnd == pytest.approx(before - MTU)


# -- ev_min_active ------------------------------------------------------------------------------


def test_ev_min_active_defaults_to_a_quarter_of_the_evs(make_net: Any) -> None:
    assert StackConfig().min_active == 128 // 4
    assert StackConfig(ev_count=64).min_active == 16
    assert StackConfig(ev_min_active=3).min_active == 3
    net = make_net(seed=5)
    flow = net.connect("h0", "h3")
    assert flow.sender.ev_profile.min_active == len(flow.sender.ev_table.slots) // 4 == 32
    ctx = net.host("h0")
    small = ctx.create_ev_profile(GeneratedEvProfile(12))
    qp = ctx.create_qp("h2", net.fabric.paths("h0", "h2"), cq=net.cqs["h0"], ev_profile=small)
    assert qp.ev_profile.min_active == 12 // 4
    legacy = make_net(seed=5, config=LEGACY).connect("h0", "h3")
    assert legacy.sender.ev_profile.min_active == 1
