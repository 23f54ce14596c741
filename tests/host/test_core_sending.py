"""Sending and acknowledging: transmit-time spraying with a budget per plane NIC, overtaken ACKs."""

from __future__ import annotations

from typing import Any

from host.transport import wire

BASE = 0x7F00_0000_0000


def data_planes(frames: list[tuple[int, bytes | bytearray]]) -> list[int]:
    return [plane for plane, frame in frames if frame[wire.OFF_BTH] != wire.OP_ACKNOWLEDGE]


def sent_out(make_net: Any, packets: int) -> tuple[Any, Any]:
    """h0's context and its QP to h2, which has sent ``packets`` full packets (none ACKed)."""
    net = make_net(seed=4)
    flow = net.connect("h0", "h2")
    ctx, qp = net.hosts["h0"], flow.sender
    qp.post_write(bytes(packets * 4096), BASE, flow.region.rkey)
    assert len(data_planes(ctx.frames_to_send(0.0))) == packets
    return ctx, qp


def test_budget_limits_each_plane_and_keeps_the_rest_for_later(make_net: Any) -> None:
    # the driver (a paced agent) says how many data frames each plane's NIC takes now
    net = make_net(seed=2)
    flow = net.connect("h0", "h2")
    ctx = net.hosts["h0"]
    flow.sender.post_write(bytes(256 * 1024), BASE, flow.region.rkey)
    budget = {0: 3, 1: 0}
    first = data_planes(ctx.frames_to_send(0.0, budget))
    assert first == [0, 0, 0] and budget == {0: 0, 1: 0}
    assert data_planes(ctx.frames_to_send(0.0, {0: 0, 1: 0})) == []
    second = data_planes(ctx.frames_to_send(0.0, {0: 0, 1: 2}))
    assert second == [1, 1]
    assert flow.sender.describe()["outstanding"] == 5  # every packet sent, once
    rest = data_planes(ctx.frames_to_send(0.0))  # no budget: the window decides
    assert len(rest) > 5 and set(rest) == {0, 1}


def test_an_overtaken_ack_still_acknowledges_by_its_bitmap(make_net: Any) -> None:
    # ACKs come back over every plane, so an older one can arrive after a newer one: its
    # cumulative PSN is stale, but its bitmap may name packets no later ACK will
    ctx, qp = sent_out(make_net, 10)
    ev = qp.ev_table.evs()[0].ev

    def ack(cum: int, base: int, bitmap: int) -> None:
        qp.on_ack_fields((qp.qpn, cum, base, bitmap, 0, 0, 1, 0, ev), 1e-6)

    ack(5, 5, 0)  # PSNs 0..4
    assert qp.describe()["outstanding"] == 5
    ack(2, 2, 1 << 5 | 1 << 6)  # stale: cumulative 2, bitmap from 2 names PSNs 7 and 8
    assert qp.describe()["outstanding"] == 3
    stats = ctx.stats()
    assert stats["stale_acks"] == 1 and stats["drops"].get("ack_out_of_window", 0) == 0


def test_every_psn_received_is_reported_in_some_ack(make_net: Any) -> None:
    # what arrived since the previous ACK spans more than one 64-PSN bitmap (an old PSN beside
    # new ones): a second ACK covers the newest, so no received packet goes unreported
    from host.transport.cc import CcProfile

    net = make_net(seed=5)
    flow = net.connect("h0", "h2", cc=CcProfile("fixed", {"window": 200}))
    sender, receiver = net.hosts["h0"], net.hosts["h2"]
    flow.sender.post_write(bytes(100 * 4096), BASE, flow.region.rkey)
    frames = {n: f for n, (_, f) in enumerate(sender.frames_to_send(0.0)) if n < 100}
    for psn in (10, 80, 81):  # fewer than ack_every: no ACK yet
        receiver.receive_frame(0, frames[psn], 1e-6)
    flow.receiver._send_ack(2e-6)
    acks = [f for _, f in receiver.frames_to_send(2e-6) if f[wire.OFF_BTH] == wire.OP_ACKNOWLEDGE]
    reported: set[int] = set()
    for frame in acks:
        fields = wire.decode_ack(frame)
        assert fields is not None
        _, cum, base, bitmap = fields[:4]
        assert cum == 0
        reported |= {base + i for i in range(64) if bitmap >> i & 1}
    assert reported == {10, 80, 81}


def spines_by_plane(ctx: Any, flow: Any, frames: list[tuple[int, bytes | bytearray]]
                    ) -> dict[int, list[int]]:  # fmt: skip
    """The spine each data frame's EV leads to, per plane, in send order."""
    slots = {s.wire: s for s in flow.sender.ev_table.slots}
    out: dict[int, list[int]] = {}
    for plane, frame in frames:
        packet = wire.parse(frame)
        if isinstance(packet, wire.DataPacket):
            out.setdefault(plane, []).append(slots[packet.ev].path.spine)
    return out


def test_a_full_nic_passes_its_turn_without_skipping_an_ev_of_its_plane(make_net: Any) -> None:
    # a NIC that is full when its plane's turn comes (the paced agent's and the sim's NICs
    # take a frame or two at a time) must not shift which path of the plane is next: each
    # plane still sends on its spines in strict turn, so the spines share its load evenly
    from host.transport.cc import CcProfile

    net = make_net(seed=3)
    flow = net.connect("h0", "h2", cc=CcProfile("fixed", {"window": 1 << 20}))
    ctx = net.hosts["h0"]
    flow.sender.post_write(bytes(64 * 4096), BASE, flow.region.rkey)
    frames: list[tuple[int, bytes | bytearray]] = []
    for n in range(64):
        budget = {0: 1, 1: 0} if n % 3 else {0: 1, 1: 1}  # plane 1's NIC is often full
        frames += ctx.frames_to_send(0.0, budget)
    spines = spines_by_plane(ctx, flow, frames)
    assert set(spines) == {0, 1} and sum(map(len, spines.values())) == 64
    for plane, order in spines.items():
        assert all(a != b for a, b in zip(order, order[1:], strict=False)), (plane, order)


def test_a_recycled_path_waits_for_its_full_nic_and_a_retired_one_does_not(make_net: Any) -> None:
    # a recycled path's turn is not handed to whichever plane has room: that plane may be the one
    # a lost uplink keeps from filling (docs/host-stack.md, "Multipath load balancing")
    from host.transport.evs import EvState

    net = make_net(seed=3)
    flow = net.connect("h0", "h2")
    ctx, qp = net.hosts["h0"], flow.sender
    qp.post_write(bytes(64 * 4096), BASE, flow.region.rkey)
    plane0 = [s for s in qp.ev_table.slots if s.plane == 0]
    assert qp._recycle is not None
    qp._recycle.extend(plane0[:2] * 10)  # plane 0's paths just delivered 20 packets
    sent = data_planes(ctx.frames_to_send(0.0, {0: 0, 1: 4}))
    # plane 0's NIC is full: at most the one packet in EXPLORE_EVERY that follows the cycle
    assert len(sent) <= 1 and set(sent) <= {1}
    for slot in plane0:  # plane 0's paths retired: their recycled turns are no longer waited for
        qp.ev_table.set_state(slot, EvState.ASSUMED_BAD, 0.0)
    assert data_planes(ctx.frames_to_send(0.0, {0: 0, 1: 4})) == [1, 1, 1, 1]


def test_a_path_goes_back_for_reuse_on_the_word_of_its_own_ack(make_net: Any) -> None:
    # ACKs come back over every path: the ACK of a packet that waited in a marked queue can be
    # overtaken by the next packet's ACK, which frees both. The first packet's mark is in its
    # own ACK, still on its way: its path goes back for reuse only if that ACK, late, is unmarked
    ctx, qp = sent_out(make_net, 6)
    sent = {psn: (rec.slot, rec.ts32) for psn, rec in qp._outstanding.items()}
    recycle = qp._recycle
    assert recycle is not None
    recycle.clear()

    def ack(cum: int, echo: int, reported: int, marked: bool = False) -> None:
        slot, ts = sent[echo]
        flags = wire.FLAG_ECN_ECHO if marked else 0
        qp.on_ack_fields((qp.qpn, cum, cum, 0, ts, int(marked), reported, flags, slot.wire), 1e-5)

    def back() -> list[int]:
        return [slot.index for slot in recycle]

    ack(2, echo=1, reported=2)  # PSNs 0 and 1, both reported by this ACK, neither marked
    assert back() == [sent[0][0].index, sent[1][0].index]
    recycle.clear()
    ack(4, echo=3, reported=1)  # PSN 3's ACK overtook PSN 2's: it frees 2 and 3, reports 3
    assert back() == [sent[3][0].index]
    ack(3, echo=2, reported=1, marked=True)  # PSN 2's own ACK, late and marked
    assert back() == [sent[3][0].index]
    ack(6, echo=5, reported=1)  # PSN 5's ACK overtook PSN 4's
    ack(5, echo=4, reported=1)  # PSN 4's own ACK, late and unmarked: its path goes back now
    assert back() == [sent[3][0].index, sent[5][0].index, sent[4][0].index]
    assert qp.describe()["outstanding"] == 0
    assert ctx.stats()["stale_acks"] == 2
