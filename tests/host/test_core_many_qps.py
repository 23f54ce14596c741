"""A context of many QPs: it asks only the QPs an event touched for frames and timers, and
still answers as if it asked every QP (the earliest timer of all, every QP with work sending
in its turn, a destroyed QP never woken)."""

from __future__ import annotations

import random
from typing import Any

from host.transport import wire

BASE = 0x7F00_0000_0000


def brute_next_timer(ctx: Any) -> float | None:
    """The earliest timer of every QP and the endpoint, in the driver's clock."""
    times = [t for qp in ctx.qps if (t := qp.next_timer()) is not None]
    t = ctx._endpoint.next_timer()
    if t is not None:
        times.append(t)
    return None if not times else min(times) * ctx.dilation


def to_qpns(frames: list[tuple[int, bytes | bytearray]]) -> list[int]:
    """The destination QP of each data frame, in order (one per flow: the receiver's)."""
    out = []
    for _, frame in frames:
        packet = wire.parse(frame)
        if isinstance(packet, wire.DataPacket):
            out.append(packet.outer.dest_qp)
    return out


def test_next_timer_is_the_earliest_of_every_qp_through_a_run(make_net: Any) -> None:
    net = make_net(seed=3)
    flows = [net.connect("h0", dst) for dst in ("h1", "h2", "h3") for _ in range(4)]
    assert len(net.hosts["h0"].qps) == 12
    rng = random.Random(7)
    checked = 0
    for step in range(12):
        for flow in rng.sample(flows, 3):
            flow.sender.post_write(bytes(rng.choice((4096, 40_000))), BASE, flow.region.rkey)
        net.kick_all()
        net.run(net.sim.now + 40e-6 * (step + 1))
        for host in net.hosts.values():
            assert host.next_timer() == brute_next_timer(host)
            checked += 1
    assert checked == 12 * len(net.hosts)
    net.run(1.0, stop=lambda: all(f.sender.outstanding == 0 for f in flows))
    assert all(f.sender.outstanding == 0 for f in flows)


def test_only_qps_with_work_send_and_the_budget_goes_round_in_creation_order(
    make_net: Any,
) -> None:
    net = make_net(seed=5)
    flows = [net.connect("h0", "h2") for _ in range(6)]
    ctx = net.hosts["h0"]
    busy = [flows[1], flows[3], flows[4]]
    for flow in busy:
        flow.sender.post_write(bytes(64 * 4096), BASE, flow.region.rkey)
    order = []
    for _ in range(12):
        sent = to_qpns(ctx.frames_to_send(0.0, {0: 1, 1: 0}))
        assert len(sent) == 1
        order.append(sent[0])
    assert set(order) == {f.receiver.qpn for f in busy}
    # one frame a call: each call's turn starts one QP further along the creation order
    qpns = [f.receiver.qpn for f in flows]
    for turn, qpn in zip(range(1, 13), order, strict=True):
        start = turn % len(qpns)
        rotated = qpns[start:] + qpns[:start]
        assert qpn == next(q for q in rotated if q in {f.receiver.qpn for f in busy})


def test_a_destroyed_qp_sends_nothing_and_its_timer_is_gone(make_net: Any) -> None:
    net = make_net(seed=2)
    keep, gone = net.connect("h0", "h2"), net.connect("h0", "h2")
    ctx = net.hosts["h0"]
    gone.sender.post_write(bytes(8 * 4096), BASE, gone.region.rkey)
    assert to_qpns(ctx.frames_to_send(0.0)) == [gone.receiver.qpn] * 8
    assert ctx.next_timer() is not None  # its ACK timeout
    ctx.destroy_qp(gone.sender.qpn)
    assert ctx.next_timer() == brute_next_timer(ctx)
    gone.sender.post_write(bytes(4096), BASE, gone.region.rkey)  # on the forgotten QP
    keep.sender.post_write(bytes(4096), BASE, keep.region.rkey)
    assert to_qpns(ctx.frames_to_send(1e-6)) == [keep.receiver.qpn]
