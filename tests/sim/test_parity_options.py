"""How the comparison with uet-htsim maps the reference's options onto the sim (no htsim run)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from host.transport.api import Context
from sim import parity
from sim.htsim import Matrix, PlanExperiment, format_matrix
from sim.network import SimNet
from sim.workload import Connection


def plan(tmp_path: Path, *params: str, spraying: str = "uet") -> parity.Experiment:
    matrix = Matrix(16, tuple(Connection(i, (i + 4) % 16, 100_000) for i in range(16)))
    (tmp_path / "perm.cm").write_text(format_matrix(matrix))
    entry = PlanExperiment("perm", "perm.cm", params, None)
    return parity.from_plan(entry, tmp_path, spraying=spraying)


def test_the_sim_sprays_with_the_reference_s_load_balancer_or_mrc_s(tmp_path: Path) -> None:
    # none named: the reference's default, mixed
    assert plan(tmp_path, "-paths", "128").policy == "uet-mixed"
    exp = plan(tmp_path, "-paths", "128", "-load_balancing_algo", "reps")
    assert exp.policy == "uet-reps" and exp.notes == ()
    args = exp.htsim_args()
    assert args[args.index("-load_balancing_algo") + 1] == "reps"
    legacy = plan(tmp_path, "-load_balancing_algo", "reps_legacy")
    assert legacy.policy == "uet-reps-legacy"
    # MRC's own spraying, whatever the reference's balancer
    assert plan(tmp_path, "-load_balancing_algo", "bitmap", spraying="mrc").policy == "mrc"
    # with the reference's balancer, its loss detection: NACKs and its ACK timeout only
    config = parity.sim_config(exp)
    assert config.reorder_threshold == parity.NO_SACK_LOSS
    assert config.rto_min == pytest.approx(exp.reference_rto_us() * 1e-6)
    mrc = parity.sim_config(plan(tmp_path, "-paths", "128", spraying="mrc"))
    assert mrc.reorder_threshold < 100 and mrc.rto_min is None  # MRC's own rules
    with pytest.raises(ValueError, match="-load_balancing_algo ecmp: expected one of"):
        plan(tmp_path, "-load_balancing_algo", "ecmp")
    with pytest.raises(ValueError, match="spraying 'srv6': expected one of uet, mrc"):
        plan(tmp_path, spraying="srv6")


def test_one_ev_per_connection_goes_where_a_hash_sends_it(tmp_path: Path) -> None:
    exp = plan(tmp_path, "-paths", "1", "-end", "200")
    assert exp.paths == 1 and exp.policy == "ecmp"
    args = exp.htsim_args()
    assert args[args.index("-paths") + 1] == "1"  # the reference still gets its one EV
    assert plan(tmp_path, "-paths", "1", spraying="mrc").policy == "ecmp"
    # the QPs' one EV each: spread over the spines as the reference's ECMP hash spreads its
    # connections, not all on the first path (MRC's first EV of every QP)
    net = SimNet.build(exp.fabric, seed=1)
    spines = set()
    for c in exp.matrix.connections:
        src, dst = net.fabric.hosts[c.src].name, net.fabric.hosts[c.dst].name
        ctx = Context(src, net.fabric.host(src).nics, seed=c.src)
        qp = ctx.create_qp(dst, net.fabric.paths(src, dst), cq=ctx.create_cq(), policy=exp.policy)
        pinned = qp.ev_table.pinned
        assert pinned is not None
        spines.add(pinned.path.spine)
    assert len(spines) > 1


def test_parity_runs_acknowledge_as_the_reference_does(tmp_path: Path) -> None:
    exp = plan(tmp_path, "-paths", "128")
    assert exp.ack_every == 4 and exp.nic_slots == 1 and exp.ack_delay_us is None
    assert plan(tmp_path, "-sack_threshold", "4000").ack_every == 1
    assert parity.build_sim(exp).nic_slots == 1


def test_single_path_runs_are_compared_over_several_draws(tmp_path: Path) -> None:
    exp = plan(tmp_path, "-paths", "1", "-end", "400")
    assert exp.draws == parity.ECMP_DRAWS > 1 and plan(tmp_path, "-paths", "128").draws == 1
    few = dataclasses.replace(exp, draws=3)
    pooled = parity.run_sim(few, seed=1)
    runs = [parity.run_sim(dataclasses.replace(few, draws=1), seed=s) for s in (1, 2, 3)]
    # seeds 1, 2, 3, each its own draw of the flows' paths (CPU time aside, the same runs)
    assert [dataclasses.replace(d, cpu_seconds=None) for d in pooled.draws] == [
        dataclasses.replace(r, cpu_seconds=None) for r in runs
    ]
    assert pooled.flows == 3 * len(exp.matrix.connections)
    assert pooled.new_packets == sum(r.new_packets for r in runs)
    assert pooled.nacks == sum(r.nacks for r in runs)
    tails = [r.tail_fct_us for r in runs]
    assert None not in tails and pooled.tail_fct_us == pytest.approx(sum(tails) / 3)  # type: ignore[arg-type]
    assert pooled.changes == {
        c: pytest.approx(sum(r.changes.get(c, 0.0) for r in runs)) for c in pooled.changes
    }
    # a run that did not finish leaves the pooled tail undecided, not the others' mean
    unfinished = dataclasses.replace(runs[0], tail_fct_us=None)
    assert parity.pool([unfinished, runs[1]]).tail_fct_us is None
