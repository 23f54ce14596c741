"""The simulated network in real units: determinism, the reference's queue sizing, scale, faults."""

from __future__ import annotations

import itertools

import pytest
from support.benchmarks import load_benchmark

from sim.fabric import leaf_spine
from sim.network import SimNet
from sim.queues import QueuePolicy
from sim.workload import PROGRESS_EVERY, Connection, Progress, run_flows


def _incast(seed: int, progress: list[Progress] | None = None) -> dict[str, object]:
    spec = leaf_spine(16)
    net = SimNet.build(spec, seed=seed)
    conns = [Connection(i, 15, 300_000) for i in range(4)]
    tell = progress.append if progress is not None else None
    result = run_flows(net, conns, cc=spec.nscc_profile(), until=2e-3, progress=tell)
    return {
        "fcts": [f.fct for f in result.flows],
        "changes": [f.changes for f in result.flows],
        "summary": result.summary() | {"cpu_seconds": None},
    }


def test_one_seed_gives_identical_runs() -> None:
    first, second = _incast(3), _incast(3)
    assert first == second
    assert all(fct is not None for fct in first["fcts"])  # type: ignore[union-attr]


def test_a_run_that_reports_its_progress_runs_the_same() -> None:
    heard: list[Progress] = []
    assert _incast(3, heard) == _incast(3)
    times = [p.now for p in heard]
    assert times == sorted(times) and all(p.until == 2e-3 and p.flows == 4 for p in heard)
    # no stretch of simulated time longer than the reporting interval goes unreported
    assert times[0] <= PROGRESS_EVERY + 1e-12
    assert max(b - a for a, b in itertools.pairwise(times)) <= PROGRESS_EVERY + 1e-12
    assert [p.finished for p in heard] == sorted(p.finished for p in heard)
    assert heard[-1].finished == 4


def test_the_parity_benchmark_prints_where_a_long_run_is() -> None:
    bench = load_benchmark("htsim_parity")
    lines: list[str] = []
    tell = bench.progress_lines(lines.append, every=0.0)
    tell(Progress(now=1.5e-3, until=0.15, finished=12, flows=1023, cpu_seconds=95.2))
    assert lines == ["  sim: 1,500 of 150,000 us simulated, 12 of 1023 flows finished, 95 CPU s"]
    quiet = bench.progress_lines(lines.append)  # every 30 wall seconds: not yet
    quiet(Progress(now=1e-4, until=1e-3, finished=0, flows=4, cpu_seconds=0.1))
    assert len(lines) == 1
    tell(Progress(now=2e-4, until=2e-3, finished=5, flows=16, cpu_seconds=0.4, run=7, runs=60))
    assert (
        lines[1]
        == "  sim (run 7 of 60): 200 of 2,000 us simulated, 5 of 16 flows finished, 0 CPU s"
    )


def test_each_run_of_a_pooled_experiment_says_which_it_is() -> None:
    from sim import parity
    from sim.htsim import Matrix

    matrix = Matrix(16, (Connection(0, 13, 200_000), Connection(1, 13, 200_000)))
    exp = parity.Experiment("2 -> 1", leaf_spine(16), matrix, end_us=500, draws=2)
    heard: list[Progress] = []
    figures = parity.run_sim(exp, progress=heard.append)
    assert figures.finished == 4 and len(figures.draws) == 2
    assert {(p.run, p.runs) for p in heard} == {(1, 2), (2, 2)}
    assert [p.run for p in heard] == sorted(p.run for p in heard)


def test_queues_are_sized_as_the_reference_sizes_them() -> None:
    spec = leaf_spine(16)
    # 4 links one way, 1 us each, data frame and 64-byte ACK serialised on each, at 100 Gb/s
    frame = spec.frame_bytes
    rtt = 2 * 4e-6 + 4 * (frame + 64) * 8 / 100e9
    assert spec.base_rtt() == pytest.approx(rtt)
    bdp = -(-rtt * 100e9 / 8 // frame)
    queue = spec.port_queue()
    assert queue.packets == bdp
    assert queue.ecn_low_bytes == -(-bdp * 0.2 // 1) * frame
    assert queue.ecn_high_bytes == -(-bdp * 0.8 // 1) * frame
    assert spec.with_(queues=QueuePolicy(packets=500)).port_queue().packets == 500


def test_a_single_flow_runs_at_line_rate() -> None:
    spec = leaf_spine(16)
    net = SimNet.build(spec, seed=1)
    result = run_flows(net, [Connection(0, 13, 2_000_000)], cc=spec.nscc_profile(), until=1e-3)
    fct = result.flows[0].fct
    assert fct is not None
    ideal = 2_000_000 / spec.mtu * spec.frame_bytes * 8 / 100e9
    assert ideal < fct < ideal + 2 * spec.base_rtt()
    assert result.nacks == 0


def test_mrc_scale_fabric_builds() -> None:
    # how fast: benchmarks/sim_speed.py reports the set-up's CPU time
    spec = leaf_spine(1024, planes=8, spines_per_plane=32, rate_gbps=800)
    net = SimNet.build(spec)
    assert len(net.fabric.hosts) == 1024
    assert len(net.fabric.paths("h0", "h1023")) == 8 * 32


def test_a_flow_whose_message_fails_is_not_finished() -> None:
    # the sender's only NIC is down for the whole run: its ACK timeouts run out (retry
    # counters of mrc.h) and the WRITE completes in error, which is not a finished flow
    from host.transport.config import StackConfig

    spec = leaf_spine(16)
    net = SimNet.build(spec)
    net.fail_nic("h0", 0, 0.0)
    config = StackConfig(mtu=spec.mtu, retry_linear_cnt=1, retry_exp_cnt=1)
    conns = [Connection(0, 13, 100_000), Connection(1, 13, 100_000)]
    result = run_flows(net, conns, cc=spec.nscc_profile(), config=config, until=5e-3)
    failed, done = result.flows
    assert failed.error == "retry_exceeded" and failed.finished is None and failed.fct is None
    assert done.error is None and done.fct is not None
    summary = result.summary()
    assert summary["finished"] == 1 and summary["failed"] == 1
    # first transmissions: every packet of both flows once, whatever was sent again
    packets = -(-100_000 // spec.mtu)
    assert result.new_packets == 2 * packets
    assert result.packets > result.new_packets


def test_faults_a_scenario_applies() -> None:
    spec = leaf_spine(16, planes=2)
    net = SimNet.build(spec)
    assert net.fail_switch("t1-p0-s0", 1e-6, 2e-6) == 4
    assert net.fail_plane(1, 0.0) == len([lk for lk in net.fabric.links if lk.plane == 1])
    net.fail_nic("h0", 0, 0.0, 1e-6)
    net.flap_link("t0-p0-r0", "t1-p0-s1", 0.0, 1e-6, 1e-6, 3)
    assert len(net.faults("t0-p0-r0", "t1-p0-s1").down) == 3
    assert net.faults("t0-p0-r0", "t1-p0-s1").is_down(2.5e-6)
    net.degrade_link("t0-p0-r0", "t1-p0-s1", 0.1)
    with pytest.raises(KeyError):
        net.fail_link("h0", "h1", 0.0)


def test_faults_as_a_phase_drives_them() -> None:
    net = SimNet.build(leaf_spine(16, planes=2))
    net.run(until=1e-6)
    net.link_down("t0-p0-r0", "t1-p0-s1")
    net.kill_switches(["t1-p1-s0"])
    net.run(until=3e-6)
    assert net.faults("t0-p0-r0", "t1-p0-s1").is_down(2e-6)
    assert net.faults("t0-p1-r3", "t1-p1-s0").is_down(2e-6)
    net.link_up("t0-p0-r0", "t1-p0-s1")
    net.start_switches(["t1-p1-s0"])
    for a, b in (("t0-p0-r0", "t1-p0-s1"), ("t0-p1-r3", "t1-p1-s0")):
        assert net.faults(a, b).is_down(2e-6) and not net.faults(a, b).is_down(3e-6)


def test_flows_wait_for_their_trigger() -> None:
    spec = leaf_spine(16)
    conns = [
        Connection(0, 5, 100_000, send_done_trigger=1),
        Connection(1, 5, 100_000, send_done_trigger=1),
        Connection(2, 6, 100_000, start=None, trigger=1),
    ]
    for barriers, waits_for in (({}, 1), ({1: 2}, 2)):
        result = run_flows(SimNet.build(spec), conns, cc=spec.nscc_profile(), until=1e-3,
                           barriers=barriers)  # fmt: skip
        first, second, chained = result.flows
        assert chained.started is not None and first.finished and second.finished
        done = sorted([first.finished, second.finished])
        assert chained.started == done[waits_for - 1]


def test_a_trimmed_header_takes_the_queue_models_trim_bytes() -> None:
    # the reference trims to 64 bytes; MRC's headers are 114: QueuePolicy.trim_bytes lets the
    # sim count a trimmed header as the reference does, and nothing else
    from dataplane.packets import mrc_frame

    from host.transport import wire
    from sim import network

    def frame(dscp: int) -> bytearray:
        return bytearray(mrc_frame("fcbb:bb00:1c02::", dscp=dscp, payload=b""))  # 114 bytes

    spec = leaf_spine(16)
    ref = spec.with_(queues=QueuePolicy(trim_bytes=64)).port_queue()
    for dscp in (wire.DSCP_TRIMMED, wire.DSCP_TRIMMED_LAST_HOP):
        assert network._wire_len(ref, frame(dscp)) == 64
        assert network._wire_len(spec.port_queue(), frame(dscp)) == 114
    assert network._wire_len(ref, frame(wire.DSCP_CONTROL)) == 114
    with pytest.raises(ValueError, match="trimmed headers of 0 bytes"):
        QueuePolicy(trim_bytes=0)
