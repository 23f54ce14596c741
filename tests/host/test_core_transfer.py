"""WRITE and WRITE_IMM over the in-memory small fabric: placement, completions, refusals, policies."""

from __future__ import annotations

from typing import Any

import pytest
from support.frames import spy_data_frames

from host.transport import wire
from host.transport.config import StackConfig
from host.transport.events import EvStateChanged, WriteCompleted, WriteImmReceived
from host.transport.evs import EvState, ExplicitEvProfile, GeneratedEvProfile, Srv6EvProfile

BASE = 0x7F00_0000_0000


def pattern(n: int, seed: int) -> bytes:
    return bytes((i * 7 + seed * 13 + (i >> 8)) & 0xFF for i in range(n))


def record_data_frames(ctx: Any) -> list[tuple[int, int, int]]:
    """Wrap ctx.frames_to_send to record (plane, flow label, DSCP) of every data frame."""
    seen: list[tuple[int, int, int]] = []
    spy_data_frames(ctx, lambda plane, pkt, _: seen.append((plane, pkt.outer.flow_label,
                                                            pkt.outer.dscp)))  # fmt: skip
    return seen


def test_write_and_write_imm_complete_on_both_sides(make_net: Any) -> None:
    net = make_net()
    flow = net.connect("h0", "h2")
    sizes = [0, 1, 4095, 4096, 4097, 100_000]
    offset = 0
    for n, size in enumerate(sizes):
        data = pattern(size, n)
        if n % 2:
            flow.sender.post_write_imm(data, BASE + offset, flow.region.rkey, imm=1000 + n, wr_id=n)
        else:
            flow.sender.post_write(data, BASE + offset, flow.region.rkey, wr_id=n)
        offset += size + 16
    net.sim.kick("h0")
    net.run(5.0, stop=lambda: len(net.cqs["h0"]) == len(sizes))
    done = net.cqs["h0"].poll(100)
    assert sorted(c.wr_id for c in done) == list(range(len(sizes)))
    assert all(isinstance(c, WriteCompleted) and c.status == "ok" for c in done)
    offset = 0
    for n, size in enumerate(sizes):
        assert flow.region.read(BASE + offset, size) == pattern(size, n)
        offset += size + 16
    received = net.cqs["h2"].poll(100)
    assert all(isinstance(c, WriteImmReceived) for c in received)
    assert sorted(c.imm for c in received if c.imm is not None) == [1001, 1003, 1005]
    by_imm = {c.imm: c for c in received}
    assert by_imm[1005].byte_len == 100_000
    assert by_imm[1005].remote_addr == BASE + sum(s + 16 for s in sizes[:5])
    stats = net.hosts["h2"].stats()
    assert stats["messages_received"] == len(sizes)
    assert stats["drops"].get("internal_error", 0) == 0


def test_receiver_completion_reports_where_the_message_was_placed(make_net: Any) -> None:
    net = make_net()
    flow = net.connect("h1", "h3")
    flow.sender.post_write_imm(pattern(10_000, 3), BASE + 12345, flow.region.rkey, imm=9)
    net.sim.kick("h1")
    net.run(5.0, stop=lambda: len(net.cqs["h3"]) == 1)
    (entry,) = net.cqs["h3"].poll()
    assert (entry.remote_addr, entry.byte_len, entry.imm, entry.status) == (
        BASE + 12345,
        10_000,
        9,
        "ok",
    )


def test_bad_rkey_and_out_of_region_are_refused(make_net: Any) -> None:
    net = make_net()
    flow = net.connect("h0", "h1")
    before = bytes(flow.region.buffer)
    flow.sender.post_write(pattern(9000, 1), BASE, flow.region.rkey ^ 0x5A5A, wr_id=1)
    end = BASE + len(flow.region.buffer)
    flow.sender.post_write(
        pattern(9000, 2), end - 4000, flow.region.rkey, wr_id=2
    )  # crosses the end
    flow.sender.post_write(pattern(100, 3), BASE - 50, flow.region.rkey, wr_id=3)  # starts before
    net.sim.kick("h0")
    net.run(5.0, stop=lambda: len(net.cqs["h0"]) == 3)
    status = {c.wr_id: c.status for c in net.cqs["h0"].poll()}
    assert status == {1: "remote_access_error", 2: "remote_access_error", 3: "remote_access_error"}
    drops = net.hosts["h1"].stats()["drops"]
    assert drops["bad_rkey"] == 3 and drops["out_of_region"] >= 2
    after = bytes(flow.region.buffer)
    # message 2's first packet (inside the region) may land; nothing else changed
    assert after[: len(after) - 4000] == before[: len(before) - 4000]


def test_ev_profiles(make_net: Any, fabric: Any) -> None:
    net = make_net()
    ctx = net.host("h0")
    paths = fabric.paths("h0", "h2")
    generated = ctx.create_qp("h2", paths, cq=net.cqs["h0"], ev_profile=GeneratedEvProfile(8))
    evs = generated.ev_table.evs()
    assert len(evs) == 8 and {e.path for e in evs} == {p.label for p in paths}
    assert len({e.ev & 0xFFFFF for e in evs}) == 8  # unique flow labels
    explicit = ctx.create_qp("h2", paths, cq=net.cqs["h0"],
                             ev_profile=ExplicitEvProfile(((0x11, 0), (0x22, 3))))  # fmt: skip
    assert [(e.ev, e.path) for e in explicit.ev_table.evs()] == [(0x11, paths[0].label),
                                                                  (0x22, paths[3].label)]  # fmt: skip
    srv6 = ctx.create_qp("h2", paths, cq=net.cqs["h0"], ev_profile=Srv6EvProfile())
    assert [e.ev for e in srv6.ev_table.evs()] == [int(p.carrier) for p in paths]
    with pytest.raises(ValueError, match="path 9"):
        ctx.create_qp("h2", paths, cq=net.cqs["h0"], ev_profile=ExplicitEvProfile(((1, 9),)))
    with pytest.raises(ValueError, match="policy 'nope'"):
        ctx.create_qp("h2", paths, cq=net.cqs["h0"], policy="nope")
    with pytest.raises(ValueError, match="goes h0 -> h2"):
        net.host("h1").create_qp("h2", paths, cq=net.cqs["h1"])


def test_config_errors_name_the_field() -> None:
    with pytest.raises(ValueError, match="ack_every"):
        StackConfig(ack_every=0)
    with pytest.raises(ValueError, match="no field 'bogus'"):
        StackConfig().with_(bogus=1)
    assert StackConfig(ack_timeout_exp=10).ack_timeout == pytest.approx(1.024e-6 * 1024)


def test_default_ack_timeout_is_above_full_queues(fabric: Any) -> None:
    topo = fabric.topology
    frame_bits = (topo.mtu + 118) * 8
    # three switch queues on a path between racks, each full ahead of the packet; ACKs come
    # back in the high-priority class. In protocol (real-fabric) time: divided by the dilation
    worst_one_way = 3 * (topo.queue_depth + 1) * frame_bits / (topo.link_rate_mbps * 1e6)
    assert StackConfig().ack_timeout > worst_one_way / topo.dilation


def test_denied_evs_are_never_used(make_net: Any) -> None:
    net = make_net()
    flow = net.connect("h0", "h2")
    seen = record_data_frames(net.hosts["h0"])
    for info in flow.sender.ev_table.evs():
        if info.plane == 1:
            net.hosts["h0"].set_ev_state(flow.sender.qpn, info.ev, EvState.DENIED)
    assert net.write(flow, pattern(200_000, 1), 5.0).status == "ok"
    assert seen and {plane for plane, _, _ in seen} == {0}
    net.drain_events()
    denied = [e for e in net.events if isinstance(e, EvStateChanged) and e.new == "denied"]
    assert len(denied) == 64 and all(e.reason == "operator" for e in denied)


@pytest.mark.parametrize("policy", ["single-path", "ecmp"])
def test_single_ev_policies_use_one_ev(make_net: Any, policy: str) -> None:
    net = make_net()
    flow = net.connect("h0", "h2", policy=policy)
    seen = record_data_frames(net.hosts["h0"])
    assert net.write(flow, pattern(100_000, 1), 5.0).status == "ok"
    assert len({label for _, label, _ in seen}) == 1 and len(seen) >= 25


def test_mrc_sprays_a_different_ev_per_packet(make_net: Any) -> None:
    net = make_net()
    flow = net.connect("h0", "h2")
    seen = record_data_frames(net.hosts["h0"])
    flow.sender.post_write(pattern(128 * 4096, 1), BASE, flow.region.rkey)
    net.sim.kick("h0")
    net.run(5.0, stop=lambda: len(net.cqs["h0"]) == 1)
    labels = [label for _, label, _ in seen]
    assert all(a != b for a, b in zip(labels, labels[1:], strict=False))
    assert len(set(labels)) >= 100  # most of the 128 EVs carried a packet
    planes = [plane for plane, _, _ in seen]
    assert abs(planes.count(0) - planes.count(1)) <= 2
    assert {dscp for _, _, dscp in seen} == {wire.DSCP_TRIMMABLE}


def test_no_trim_nack_sends_untrimmable_data(make_net: Any) -> None:
    net = make_net(trim_threshold=0)  # every switch would trim trimmable data
    flow = net.connect("h0", "h2", policy="no-trim-nack")
    seen = record_data_frames(net.hosts["h0"])
    assert net.write(flow, pattern(50_000, 1), 5.0).status == "ok"
    assert {dscp for _, _, dscp in seen} == {wire.DSCP_DEFAULT}
    assert net.sim.counters["trimmed"] == 0
    assert net.hosts["h2"].stats()["nacks_sent"] == 0


def test_unknown_qp_and_garbage_are_counted(make_net: Any) -> None:
    net = make_net()
    flow = net.connect("h0", "h2")
    ctx = net.hosts["h2"]
    ctx.receive_frame(0, b"\x00" * 10, 0.0)
    ctx.receive_frame(0, bytes(12) + b"\x08\x00" + bytes(50), 0.0)
    prefix = flow.sender.ev_table.slots[0].prefix
    frame = wire.encode_data(prefix, 0xABCDE, 0, False, BASE, flow.region.rkey, None, 0, 0, 0, 1,
                             1, 3, 0, 0, b"abc")  # fmt: skip
    ctx.receive_frame(0, frame, 0.0)
    drops = ctx.stats()["drops"]
    assert drops["truncated"] == 1 and drops["not_ipv6"] == 1 and drops["unknown_qp"] == 1


def test_psns_wrap_at_24_bits(make_net: Any) -> None:
    net = make_net(seed=11)
    net.sim.set_faults(loss=0.02, reorder=0.2)
    a, b = net.host("h0"), net.host("h2")
    qa = a.create_qp("h2", net.fabric.paths("h0", "h2"), cq=net.cqs["h0"])
    qb = b.create_qp("h0", net.fabric.paths("h2", "h0"), cq=net.cqs["h2"])
    start = (1 << 24) - 60
    qa.connect(qb.qpn, send_psn=start, expect_psn=0)
    qb.connect(qa.qpn, send_psn=0, expect_psn=start)
    data = pattern(200 * 4096, 5)
    qa.post_write_imm(data, BASE, net.regions["h2"].rkey, imm=1)
    net.sim.kick("h0")
    net.run(30.0, stop=lambda: len(net.cqs["h0"]) == 1)
    assert net.cqs["h0"].poll()[0].status == "ok"
    assert net.regions["h2"].read(BASE, len(data)) == data
    assert [c.imm for c in net.cqs["h2"].poll()] == [1]
    with pytest.raises(RuntimeError, match="already carried traffic"):
        qa.connect(qb.qpn)
    with pytest.raises(ValueError, match="24-bit PSN"):
        qb.connect(qa.qpn, send_psn=1 << 24)


def test_ecmp_choice_is_reproducible(make_net: Any) -> None:
    chosen = []
    for _ in range(2):
        net = make_net(seed=1)
        flow = net.connect("h0", "h2", policy="ecmp")
        chosen.append(flow.sender.ev_table.pinned.ev)
    assert chosen[0] == chosen[1]


def set_and_run(net: Any, flow: Any, ev: int, state: EvState, until: float) -> None:
    """The operator sets ``ev`` of the flow's sender to ``state`` now; the network runs on to
    ``until``."""
    net.hosts[flow.src].set_ev_state(flow.sender.qpn, ev, state, now=net.sim.now)
    net.sim.kick(flow.src)
    net.run(until)


def test_operator_release_probes_an_ev_back(make_net: Any) -> None:
    net = make_net()
    flow = net.connect("h0", "h2")
    ev = flow.sender.ev_table.evs()[5].ev
    set_and_run(net, flow, ev, EvState.DENIED, until=0.05)
    assert flow.sender.ev_table.state(ev) is EvState.DENIED  # never probed while denied
    set_and_run(net, flow, ev, EvState.UNKNOWN, until=0.1)
    assert flow.sender.ev_table.state(ev) is EvState.GOOD
    changes = [(e.old, e.new, e.reason) for e in net.events if isinstance(e, EvStateChanged)]
    assert changes == [("good", "denied", "operator"), ("denied", "unknown", "operator"),
                       ("unknown", "good", "probe_reply")]  # fmt: skip


def test_a_late_probe_reply_still_reinstates(make_net: Any) -> None:
    config = StackConfig(probe_timeout=50e-9, probe_interval=10e-6)  # far below the RTT
    net = make_net(config=config)
    flow = net.connect("h0", "h2")
    ev = flow.sender.ev_table.evs()[0].ev
    set_and_run(net, flow, ev, EvState.UNKNOWN, until=0.009)
    assert flow.sender.ev_table.state(ev) is EvState.GOOD
    stats = net.hosts["h0"].stats()
    assert stats["probes_timed_out"] >= 1 and stats["probe_replies_received"] >= 1


def _frame_to(flow: Any, psn: int, payload: bytes, *, ecn: int = wire.ECN_ECT0,
              dscp: int = wire.DSCP_TRIMMABLE, ack_req: bool = False) -> tuple[int, bytearray]:  # fmt: skip
    slot = flow.sender.ev_table.slots[3]
    nic = slot.path.src_nic
    prefix = wire.frame_prefix(
        src_mac=wire.mac_bytes(nic.mac), dst_mac=wire.mac_bytes(nic.gateway_mac),
        src=nic.address.packed, dst=slot.path.carrier.packed, dscp=dscp, ecn=ecn, ev=slot.wire,
    )  # fmt: skip
    frame = wire.encode_data(
        prefix, flow.receiver.qpn, psn, ack_req, BASE, flow.region.rkey, None, 0, slot.plane,
        slot.spine_hint, slot.wire, 1, 4096, 0, 777, payload,
    )  # fmt: skip
    return slot.wire, frame


@pytest.mark.parametrize(
    ("ecn", "flags"),
    [(wire.ECN_ECT0, wire.FLAG_TRIMMED), (wire.ECN_CE, wire.FLAG_TRIMMED | wire.FLAG_NACK_CE)],
)
def test_each_trimmed_packet_gets_a_nack_echoing_its_ev(
    make_net: Any, ecn: int, flags: int
) -> None:
    # a header trimmed after an earlier hop marked the packet keeps the mark: the NACK says so
    net = make_net()
    flow = net.connect("h0", "h2")
    ctx = net.hosts["h2"]
    ev, frame = _frame_to(flow, 0, bytes(4096), dscp=wire.DSCP_TRIMMED, ecn=ecn)
    trimmed = bytearray(frame[: wire.DATA_HEADER_LEN])
    trimmed[18:20] = (wire.DATA_HEADER_LEN - 54).to_bytes(2, "big")
    trimmed[58:60] = (wire.DATA_HEADER_LEN - 54).to_bytes(2, "big")
    for _ in range(2):
        ctx.receive_frame(0, trimmed, 1.0)
    out = [wire.parse(f) for _, f in ctx.frames_to_send(1.0)]
    assert len(out) == 2 and all(isinstance(p, wire.NackPacket) for p in out)
    for nack in out:
        assert isinstance(nack, wire.NackPacket)
        assert (nack.ev, nack.psn, nack.ts_echo, nack.flags) == (ev, 0, 777, flags)
        assert nack.outer.dest_qp == flow.sender.qpn and nack.outer.dscp == wire.DSCP_CONTROL
    assert flow.region.read(BASE, 16) == bytes(16)  # nothing placed
    assert ctx.stats()["trims_seen"] == 2 and ctx.stats()["nacks_sent"] == 2


def test_trimmed_packets_are_not_nacked_under_no_trim_nack(make_net: Any) -> None:
    net = make_net()
    flow = net.connect("h0", "h2", policy="no-trim-nack")
    ctx = net.hosts["h2"]
    _, frame = _frame_to(flow, 0, bytes(4096))
    short = bytearray(frame[:-100])  # a shorter payload than RETH says: trimmed
    short[18:20] = (len(short) - 54).to_bytes(2, "big")
    short[58:60] = (len(short) - 54).to_bytes(2, "big")
    ctx.receive_frame(0, short, 1.0)
    assert ctx.frames_to_send(1.0) == []
    assert ctx.stats()["drops"]["trimmed_no_nack"] == 1


def test_ce_marks_are_echoed(make_net: Any) -> None:
    net = make_net()
    flow = net.connect("h0", "h2")
    ctx = net.hosts["h2"]
    payload = pattern(4096, 1)
    _, frame = _frame_to(flow, 0, payload, ecn=wire.ECN_CE, ack_req=True)
    ctx.receive_frame(1, frame, 1.0)
    (ack,) = [wire.parse(f) for _, f in ctx.frames_to_send(1.0)]
    assert isinstance(ack, wire.AckPacket)
    assert ack.flags & wire.FLAG_ECN_ECHO and ack.ce_count == 1 and ack.pkt_count == 1
    assert ack.cum_psn == 1 and ack.ts_echo == 777
    assert flow.region.read(BASE, 4096) == payload


@pytest.mark.parametrize("steering", [True, False])
def test_ecn_echo_halves_the_share_of_the_marked_path(make_net: Any, steering: bool) -> None:
    from host.transport.cc import CcProfile

    net = make_net(config=StackConfig(ecn_steering=steering))
    ctx = net.host("h0")
    qp = ctx.create_qp("h2", net.fabric.paths("h0", "h2"), cq=net.cqs["h0"],
                       cc=CcProfile("fixed", {"window": 1000}))  # fmt: skip
    qp.connect(0x999)
    marked = next(s for s in qp.ev_table.slots if s.path.label == "p0-s0")
    reply = bytearray(qp.ev_table.slots[0].prefix)
    reply[22:38] = qp.paths[0].dst_nic.address.packed  # from the peer: a QP takes no other
    now = 1.0
    ts = int((now - 0.01) * 1e9) & 0xFFFFFFFF  # an RTT of 10 ms: the path stays marked that long
    ack = wire.encode_ack(reply, qp.qpn, 0, wire.FLAG_ECN_ECHO, 0, 0, marked.wire, ts, 0, 0, 0,
                          1, 1)  # fmt: skip
    ctx.receive_frame(0, ack, now)
    qp.post_write(bytes(400 * 4096), BASE, 1)
    frames = ctx.frames_to_send(now)
    assert len(frames) == 400
    on_marked = sum(1 for _, f in frames if wire.parse(f).ev in
                    {s.wire for s in qp.ev_table.slots if s.path.label == "p0-s0"})  # fmt: skip
    if steering:
        assert 40 <= on_marked <= 60  # half of its quarter
    else:
        assert 95 <= on_marked <= 105  # a quarter: four paths
