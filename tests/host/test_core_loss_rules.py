"""The SACK loss rule counts in the path's own send order (``SAME_PATH_REORDER``).

A path delivers in order, so a packet overtaken by later packets of its own path is lost; packets
of other paths overtake freely. ACKs come back over every plane and overtake one another, so one
later packet of the path acknowledged is no proof: the rule asks for ``SAME_PATH_REORDER`` of
them, counted among the path's packets. Counted in the QP's send order instead, one later packet
of a path is as many of the QP's as there are paths, and a single overtaken ACK retired a healthy
path (measured on the eight-plane fabric: 40 EVs retired with no packet lost)."""

from __future__ import annotations

from typing import Any

import pytest
from support.frames import nack_of

from host.transport import wire
from host.transport.cc import CcProfile
from host.transport.qp_state import SAME_PATH_REORDER

BASE = 0x7F00_0000_0000


def sack(qp: Any, psns: list[int], sent_at: float, echo: Any = None) -> bytearray:
    """An ACK from the peer acknowledging ``psns`` selectively (nothing cumulatively), echoing
    the timestamp of a packet sent at ``sent_at`` (protocol time) and the EV of ``echo`` (an
    EV slot; None: the QP's first)."""
    reply = bytearray(qp.ev_table.slots[0].prefix)
    reply[22:38] = qp.paths[0].dst_nic.address.packed  # from the peer: a QP takes no other
    bitmap = 0
    for psn in psns:
        assert psn < 64
        bitmap |= 1 << psn
    ts = int(sent_at * 1e9) & 0xFFFFFFFF
    ev = (echo or qp.ev_table.slots[0]).wire
    return wire.encode_ack(bytes(reply), qp.qpn, 0, 0, 0, 0, ev, ts, 0, 0, bitmap, 0, len(psns))


def sending(make_net: Any, packets: int) -> tuple[Any, Any]:
    """h0's context and a QP to h2 (a fixed window of 1 MiB) that has just sent ``packets``
    full-size packets of one message at driver time 1.0."""
    net = make_net()
    ctx = net.host("h0")
    qp = ctx.create_qp("h2", net.fabric.paths("h0", "h2"), cq=net.cqs["h0"],
                       cc=CcProfile("fixed", {"window": 1 << 20}))  # fmt: skip
    qp.connect(0x999)
    qp.post_write(bytes(packets * 4096), BASE, 1)
    assert len(ctx.frames_to_send(1.0)) == packets
    return ctx, qp


def test_one_overtaking_packet_of_the_path_is_not_a_loss_three_are(make_net: Any) -> None:
    ctx, qp = sending(make_net, 60)
    out = qp._outstanding
    first = out[0]
    path = first.slot.load
    same = sorted((r for r in out.values() if r.slot.load is path and r.psn), key=lambda r: r.tsn)
    # the other paths deliver everything up to well past the QP-wide reorder threshold (in
    # order, as paths do), and the first packet's path one later packet only
    far = first.tsn + qp._cfg.reorder_threshold + 4
    others = [r.psn for r in out.values() if r.slot.load is not path and r.tsn <= far]
    # the discriminating case: the path's next packet is SAME_PATH_REORDER or more of the QP's
    # sends later, so counting in the QP's send order would judge the first packet lost
    assert same[0].tsn - first.tsn >= SAME_PATH_REORDER
    now = 1.0 + 0.01  # driver time
    # the ACK's RTT is the time it took: every packet is still younger than its path allows
    echo = first.sent
    ctx.receive_frame(0, sack(qp, [*others, same[0].psn], echo), now)
    assert ctx.stats()["retransmits"]["sack"] == 0 and first.in_net
    ctx.receive_frame(0, sack(qp, [r.psn for r in same[1:SAME_PATH_REORDER]], echo), now)
    assert not first.in_net and ctx.stats()["retransmits"]["sack"] >= 1


def test_a_path_not_yet_heard_from_waits_the_ack_timeout_not_the_others_rtt(
    make_net: Any,
) -> None:
    # the other paths' RTTs say nothing of a path with no sample of its own (a slower link, a
    # deeper queue): its first packets are late only after the QP's ACK timeout. Judged by
    # the other paths' RTT, the first packets on the slow spines of a fabric with 500-packet
    # queues retired those paths (5,446 of the 5,452 "late" losses of htsim's REPS,
    # large-queue, load-balancing row), which then lost every packet they held
    ctx, qp = sending(make_net, 60)
    dilation = ctx.dilation  # the context's clock is the driver's, the QP's protocol time
    out = qp._outstanding
    first = out[0]
    silent = first.slot.load
    others = sorted((r for r in out.values() if r.slot.load is not silent), key=lambda r: r.tsn)
    heard = others[0].slot
    sent, rtt = first.sent, 1e-5  # protocol seconds

    def ack(packets: list[Any], at: float) -> None:
        """The packets acknowledged at protocol time ``at``, one RTT after the echoed send."""
        ctx.receive_frame(0, sack(qp, [r.psn for r in packets], at - rtt, heard), at * dilation)

    # the other paths answer in one RTT, twice; the first packet's path says nothing
    half = len(others) // 2
    ack(others[:half], sent + rtt)
    assert not silent.srtt and qp._srtt == pytest.approx(rtt)
    by_rtt = 1.5 * (qp._srtt + 4.0 * qp._rttvar)  # the others' RTT with the rule's margin
    timeout = qp._base_timeout()
    assert timeout > 2 * by_rtt
    ack(others[half:-1], sent + (by_rtt + timeout) / 2)  # later than the others' RTT allows
    assert first.in_net and ctx.stats()["retransmits"]["sack"] == 0
    assert not [t for t in ctx.stats()["ev_transitions"] if t["new"] == "assumed_bad"]
    # still silent after the ACK timeout: lost, and the path retired
    ack(others[-1:], sent + timeout * 1.01)
    assert not first.in_net and ctx.stats()["retransmits"]["sack"] >= 1
    retired = [t for t in ctx.stats()["ev_transitions"] if t["new"] == "assumed_bad"]
    assert retired and {t["reason"] for t in retired} <= {"late", "path"}


def _timed_out_after_nack(make_net: Any, nack_flags: int) -> dict[str, Any]:
    """Ten packets sent; the first is NACKed with ``nack_flags``; the rest time out. The
    sender's statistics afterwards."""
    ctx, qp = sending(make_net, 10)
    first = qp._outstanding[0]
    qp.on_nack(nack_of(first, nack_flags), 1.0 + 1e-4)
    when = ctx.next_timer()
    assert when is not None
    ctx.handle_timer(when)  # the ACK timeout: every other packet is lost
    stats: dict[str, Any] = ctx.stats()
    assert stats["rtos"] == 1 and stats["retransmits"]["rto"] == 9
    return stats


def test_a_loss_while_the_receivers_leaf_trims_does_not_retire_the_path(make_net: Any) -> None:
    # the receiver's own leaf trimmed this QP's packet while the others were in flight: it is
    # congested (an incast), every path crosses it, and a packet lost there (a trimmed header
    # its high-priority queue could not hold) says nothing of its path
    stats = _timed_out_after_nack(make_net, wire.FLAG_TRIMMED | wire.FLAG_LAST_HOP)
    assert stats["last_hop_losses"] == 9
    assert not [t for t in stats["ev_transitions"] if t["new"] == "assumed_bad"]


def test_a_loss_after_a_fabric_trim_retires_the_path(make_net: Any) -> None:
    # a trim in the fabric is a path's congestion, not the receiver's: a loss still retires
    stats = _timed_out_after_nack(make_net, wire.FLAG_TRIMMED)
    assert stats["last_hop_losses"] == 0
    assert {t["reason"] for t in stats["ev_transitions"] if t["new"] == "assumed_bad"} >= {"rto"}


def test_trims_do_not_count_toward_the_retransmission_limit(make_net: Any) -> None:
    # a trim NACK proves the peer alive and the path up: a packet trimmed more often than
    # max_retransmits (a 1,023 -> 1 incast trims each some 55 times) is still resent
    from host.transport.config import StackConfig

    net = make_net(config=StackConfig(max_retransmits=2))
    ctx = net.host("h0")
    qp = ctx.create_qp("h2", net.fabric.paths("h0", "h2"), cq=net.cqs["h0"],
                       cc=CcProfile("fixed", {"window": 1 << 20}))  # fmt: skip
    qp.connect(0x999)
    qp.post_write(bytes(4096), BASE, 1, wr_id=7)
    now = 1.0
    for _ in range(5):
        assert len(ctx.frames_to_send(now)) == 1
        rec = qp._outstanding[0]
        now += 1e-5
        qp.on_nack(nack_of(rec, wire.FLAG_TRIMMED | wire.FLAG_LAST_HOP), now)
    assert len(ctx.frames_to_send(now)) == 1  # the sixth copy
    assert qp.error is None and qp._outstanding[0].retx == 5
    ctx.receive_frame(0, sack(qp, [0], qp._outstanding[0].sent), now + 1e-5)
    (entry,) = net.cqs["h0"].poll()
    assert (entry.wr_id, entry.status) == (7, "ok")
