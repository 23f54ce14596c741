"""How the comparison with uet-htsim maps the reference's options onto the sim (no htsim run)."""

from __future__ import annotations

from pathlib import Path

from host.transport.api import Context
from sim import parity
from sim.htsim import Matrix, PlanExperiment, format_matrix
from sim.network import SimNet
from sim.workload import Connection


def plan(tmp_path: Path, *params: str) -> parity.Experiment:
    matrix = Matrix(16, tuple(Connection(i, (i + 4) % 16, 100_000) for i in range(16)))
    (tmp_path / "perm.cm").write_text(format_matrix(matrix))
    return parity.from_plan(PlanExperiment("perm", "perm.cm", params, None), tmp_path)


def test_one_ev_per_connection_goes_where_a_hash_sends_it(tmp_path: Path) -> None:
    exp = plan(tmp_path, "-paths", "1", "-end", "200")
    assert exp.paths == 1 and exp.policy == "ecmp"
    args = exp.htsim_args()
    assert args[args.index("-paths") + 1] == "1"  # the reference still gets its one EV
    assert plan(tmp_path, "-paths", "128").policy == "mrc"
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
