"""uet-htsim interop: traffic matrices, topology files, plans and the output of real runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim import parity
from sim.fabric import leaf_spine
from sim.htsim import (
    HtsimError,
    Matrix,
    format_matrix,
    format_topology,
    parse_matrix,
    parse_published,
    read_matrix,
    read_plan,
    run_htsim,
    shared_dir,
)
from sim.workload import Connection

SHARED = shared_dir()
needs_htsim = pytest.mark.skipif(
    SHARED is None, reason="../shared/uet-htsim (htsim_uec and its files) is absent"
)


def test_a_matrix_reads_back_what_was_written() -> None:
    matrix = Matrix(
        16,
        (Connection(0, 15, 2_000_000), Connection(3, 15, 250_000, start=40e-6, id=7)),
    )
    text = format_matrix(matrix)
    assert text.splitlines()[:3] == ["Nodes 16", "Connections 2", "0->15 start 0 size 2000000"]
    assert parse_matrix(text) == matrix


def test_triggers_are_read_and_written() -> None:
    text = (
        "Nodes 4\nConnections 2\nTriggers 1\n"
        "0->1 id 1 start 0 size 100 send_done_trigger 1\n"
        "0->2 id 2 trigger 1 size 100\n"
        "trigger id 1 oneshot\n"
    )
    matrix = parse_matrix(text)
    assert matrix.connections[1].trigger == 1 and matrix.connections[1].start is None
    assert matrix.connections[0].send_done_trigger == 1
    assert matrix.triggers[0].kind == "oneshot"
    assert parse_matrix(format_matrix(matrix)) == matrix


@pytest.mark.parametrize(
    "text",
    ["Connections 1\n0->1 start 0 size 1\n", "Nodes 2\nConnections 2\n0->1 start 0 size 1\n",
     "Nodes 2\n0->5 start 0 size 1\n", "Nodes 2\n0->1 size 1\n", "Nodes 2\n0->1 start 0 size 1 x 2\n"],
)  # fmt: skip
def test_bad_matrices_are_refused(text: str) -> None:
    with pytest.raises(HtsimError):
        parse_matrix(text)


def _topo_fields(text: str) -> list[tuple[str, str]]:
    return [tuple(line.split()) for line in text.splitlines() if line.strip()]  # type: ignore[misc]


@needs_htsim
def test_the_shared_files_parse() -> None:
    assert SHARED is not None
    perm = read_matrix(SHARED / "connection_matrices" / "perm_1024n_1024c_0u_2000000b.cm")
    assert perm.nodes == 1024 and len(perm.connections) == 1024
    assert {c.size for c in perm.connections} == {2_000_000}
    chain = read_matrix(SHARED / "connection_matrices" / "alltoall_serial_16n.cm")
    assert sum(c.trigger is not None for c in chain.connections) == 224
    plan = read_plan(SHARED / "validation" / "validate_uec_sender.txt")
    assert plan[0].name == "Single Connection" and plan[0].tail_fct_us == 190
    published = parse_published((SHARED / "validation" / "validate_uec_sender.out").read_text())
    assert published["Single Connection"].tail_fct_us == pytest.approx(176.2)
    assert published["Single Connection"].summary["New"] == 490


@needs_htsim
def test_the_topology_file_is_the_shared_leaf_spine() -> None:
    assert SHARED is not None
    ours = format_topology(leaf_spine(1024))
    theirs = (SHARED / "topologies" / "leaf_spine_1024.topo").read_text()
    assert _topo_fields(ours) == _topo_fields(theirs)


@needs_htsim
def test_a_real_run_is_parsed() -> None:
    spec = leaf_spine(16)
    matrix = Matrix(16, tuple(Connection(i, 15, 400_000) for i in range(4)))
    run = run_htsim(
        matrix,
        topology=spec,
        args=["-sender_cc_only", "-end", "2000", "-mtu", str(spec.frame_bytes)],
    )
    assert run.packet_bytes == spec.frame_bytes
    assert run.queue_bytes == spec.port_queue().size_bytes
    assert run.ecn_bytes == (spec.port_queue().ecn_low_bytes, spec.port_queue().ecn_high_bytes)
    assert run.unloaded_rtt_us == pytest.approx(spec.base_rtt() * 1e6, rel=1e-3)
    # the ACK timeout the sim's uet-* runs take from the reference
    rto = parity.Experiment("incast", spec, matrix).reference_rto_us()
    assert run.min_rto_us == pytest.approx(rto, rel=1e-4)
    assert sorted((f.src, f.dst) for f in run.flows) == [(i, 15) for i in range(4)]
    assert all(f.finished_us > 0 and f.packets > 0 for f in run.flows)
    assert set(run.summary) >= {"New", "Rtx", "RTS", "Bounced", "ACKs", "NACKs"}
    # every NACK takes one packet's bytes out of a window
    nacked = sum(f.changes["nack_dec"] for f in run.flows)
    assert nacked == run.summary["NACKs"] * spec.frame_bytes
    changed = {cause for f in run.flows for cause, v in f.changes.items() if v}
    assert changed  # an incast changes windows


@needs_htsim
def test_a_failed_run_says_why(tmp_path: Path) -> None:
    with pytest.raises(HtsimError):
        run_htsim(Matrix(128, (Connection(0, 1, 1000),)), topology=leaf_spine(16))
