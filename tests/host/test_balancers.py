"""UET's load balancers (host/transport/balancers.py): each rule as uet-htsim's uec_mp.cpp and
buffer_reps.cpp run it, and a QP spraying with one over STEV EVs the switches hash."""

from __future__ import annotations

import collections
import random
from typing import Any

import pytest
from support.frames import nack_of

from host.transport import wire
from host.transport.balancers import (
    BITMAP_ECN,
    BITMAP_MAX,
    BITMAP_NACK,
    REPS_BUFFER,
    REPS_EXPLORE,
    REPS_FREEZE,
    Bitmap,
    Feedback,
    Mixed,
    Oblivious,
    Reps,
    RepsLegacy,
    make_balancer,
)
from host.transport.cc import CcProfile
from sim.fabric import leaf_spine
from sim.network import SimNet
from sim.workload import Connection, entropy_profile, run_flows


def picks(balancer: Oblivious | Bitmap | Reps | RepsLegacy | Mixed, count: int) -> list[int]:
    return [balancer.next(100, 100, 0.0) for _ in range(count)]


def test_oblivious_sends_on_every_ev_once_a_round_in_a_fresh_order() -> None:
    b = Oblivious(16, random.Random(1))
    rounds = [picks(b, 16) for _ in range(4)]
    assert all(sorted(r) == list(range(16)) for r in rounds)
    assert len({tuple(r) for r in rounds}) > 1  # the order is drawn again each round
    b.feedback(rounds[0][0], Feedback.NACK, 0.0)  # ignored
    assert sorted(picks(b, 16)) == list(range(16))


def test_bitmap_skips_penalised_evs_and_forgives_one_point_per_skip() -> None:
    b = Bitmap(8, random.Random(2))
    b.feedback(3, Feedback.ECN, 0.0)
    b.feedback(5, Feedback.NACK, 0.0)
    b.feedback(5, Feedback.NACK, 0.0)
    b.feedback(6, Feedback.TIMEOUT, 0.0)
    b.feedback(6, Feedback.NACK, 0.0)
    b.feedback(7, Feedback.GOOD, 0.0)
    assert b.penalty == [0, 0, 0, 1, 0, 8, BITMAP_MAX, 0]
    first_round = picks(b, 5)
    # the round's EVs without a penalty, each once; the penalised ones skipped
    assert sorted(first_round) == [0, 1, 2, 4, 7]
    # each pick that stood on a penalised EV took one point off it
    assert sum(b.penalty) < 1 + 8 + BITMAP_MAX
    # an EV whose penalty is paid off comes back
    seen = collections.Counter(picks(b, 400))
    assert seen[3] > 0 and seen[5] > 0 and seen[6] > 0


def test_bitmap_over_evs_all_penalised_still_sends() -> None:
    b = Bitmap(4, random.Random(3))
    for ev in range(4):
        b.feedback(ev, Feedback.TIMEOUT, 0.0)
    assert all(0 <= ev < 4 for ev in picks(b, 8))


def test_reps_reuses_the_last_eight_good_evs_oldest_first() -> None:
    b = Reps(64, random.Random(4))
    for ev in range(10):
        b.feedback(ev, Feedback.GOOD, 0.0)
    b.feedback(40, Feedback.ECN, 0.0)  # a marked EV is not reused
    b.feedback(41, Feedback.NACK, 0.0)
    assert picks(b, REPS_BUFFER) == list(range(10 - REPS_BUFFER, 10))
    # empty: random EVs
    assert all(0 <= ev < 64 for ev in picks(b, 20))


def test_reps_freezes_on_a_timeout_then_explores() -> None:
    b = Reps(64, random.Random(5))
    for ev in (11, 12, 13):
        b.feedback(ev, Feedback.GOOD, 0.0)
    b.feedback(0, Feedback.TIMEOUT, 1e-3)
    assert b.frozen_until == pytest.approx(1e-3 + REPS_FREEZE)
    # frozen: the buffer's EVs in turn, again and again
    assert picks(b, 6) == [11, 12, 13, 11, 12, 13]
    b.feedback(14, Feedback.GOOD, 2e-3)
    assert b.frozen_until is not None
    # thawed by the first feedback after the freeze: the buffer emptied, 16 random EVs
    b.feedback(20, Feedback.ECN, 1e-3 + REPS_FREEZE + 1e-6)
    assert b.frozen_until is None and not b.fresh and b.explore == REPS_EXPLORE
    picks(b, REPS_EXPLORE)
    assert b.explore == 0
    b.feedback(21, Feedback.GOOD, 0.02)
    assert picks(b, 1) == [21]


def test_legacy_reps_takes_evs_in_turn_for_the_first_window_then_recycles() -> None:
    b = RepsLegacy(8, random.Random(6))
    assert [b.next(sent, 4, 0.0) for sent in range(4)] == [1, 2, 3, 4]
    b.feedback(6, Feedback.GOOD, 0.0)
    b.feedback(2, Feedback.GOOD, 0.0)
    b.feedback(5, Feedback.ECN, 0.0)
    assert [b.next(10, 4, 0.0) for _ in range(2)] == [6, 2]
    assert 0 <= b.next(10, 4, 0.0) < 8


def test_mixed_recycles_good_evs_and_else_follows_the_bitmap() -> None:
    b = Mixed(8, random.Random(7))
    b.feedback(5, Feedback.GOOD, 0.0)
    b.feedback(3, Feedback.NACK, 0.0)
    assert b.next(0, 10, 0.0) == 5  # recycled, even in the first window
    rest = [b.next(1, 10, 0.0) for _ in range(7)]
    assert 3 not in rest and len(set(rest)) == 7  # the bitmap's round, skipping NACKed EV 3


def test_balancers_are_named_as_the_reference_names_them() -> None:
    for name in ("oblivious", "bitmap", "reps", "reps_legacy", "mixed"):
        assert make_balancer(name, 16, random.Random(0)).name == name
    with pytest.raises(ValueError, match="load balancer 'ecmp': expected one of"):
        make_balancer("ecmp", 16, random.Random(0))
    with pytest.raises(ValueError, match="over 12 EVs: expected a power of two"):
        make_balancer("bitmap", 12, random.Random(0))
    with pytest.raises(ValueError, match="over 0 EVs: expected at least 1"):
        make_balancer("reps", 0, random.Random(0))


def test_entropy_values_are_drawn_so_the_switches_hash_spreads_them() -> None:
    net = SimNet.build(leaf_spine(4, planes=2, hosts_per_rack=2, spines_per_plane=4))
    a, b = net.fabric.hosts[0].name, net.fabric.hosts[2].name
    paths = net.fabric.paths(a, b)
    profile = entropy_profile(64, paths, random.Random(1))
    values = [ev for ev, _ in profile.evs]
    assert len(set(values)) == 64 and 0 not in values
    assert [plane for _, plane in profile.evs] == [n % 2 for n in range(64)]


@pytest.mark.parametrize("policy", ["uet-oblivious", "uet-bitmap", "uet-reps", "uet-mixed"])
def test_a_uet_balancer_sprays_over_every_spine_and_delivers(policy: str) -> None:
    net = SimNet.build(leaf_spine(4, hosts_per_rack=2, spines_per_plane=4), seed=1)
    conns = [Connection(0, 2, 400_000), Connection(1, 3, 400_000)]
    result = run_flows(net, conns, until=0.01, seed=1, policy=policy)
    assert [f.fct is not None for f in result.flows] == [True, True]
    assert not result.failed
    uplinks = [
        counters.get("tx", 0)
        for name, counters in net.port_counters.items()
        if name.startswith("t0-p0-r0-") and name.endswith(("eth3", "eth4", "eth5", "eth6"))
    ]
    # every spine carried a share of the data (the ECMP hash placed the EVs)
    assert len(uplinks) == 4 and min(uplinks) > 0.1 * sum(uplinks)


@pytest.mark.parametrize(
    ("nack_flags", "penalty"),
    [
        (wire.FLAG_TRIMMED, BITMAP_NACK),  # trimmed in the fabric: the EV's path
        (wire.FLAG_TRIMMED | wire.FLAG_LAST_HOP, 0),  # at the receiver's leaf: not the path
        # ...but marked on the way there: the path was congested too (UecSrc::processNack)
        (wire.FLAG_TRIMMED | wire.FLAG_LAST_HOP | wire.FLAG_NACK_CE, BITMAP_ECN),
    ],
)
def test_a_nack_tells_the_balancer_where_the_packet_was_trimmed(
    make_net: Any, nack_flags: int, penalty: int
) -> None:
    net = make_net()
    ctx = net.host("h0")
    qp = ctx.create_qp("h2", net.fabric.paths("h0", "h2"), cq=net.cqs["h0"],
                       policy="uet-bitmap", cc=CcProfile("fixed", {"window": 1 << 20}))  # fmt: skip
    qp.connect(0x999)
    qp.post_write(bytes(4 * 4096), 0x10000, 1)
    assert len(ctx.frames_to_send(1.0)) == 4
    first = qp._outstanding[0]
    qp.on_nack(nack_of(first, nack_flags), 1.0 + 1e-4)
    balancer = qp._balancer
    assert isinstance(balancer, Bitmap)
    assert balancer.penalty[first.slot.index] == penalty
    assert sum(balancer.penalty) == penalty
