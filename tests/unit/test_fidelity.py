"""The fidelity of a run: lag meters of the agent and the switch, reading /proc, the verdict per
phase, and the verdict in metrics.json, summary.md and goodput.png."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from support.fabric import small_fabric

from experiments.fidelity import (
    FAITHFUL,
    FidelitySample,
    Thresholds,
    judge,
    machine_ticks,
    process_ticks,
    switch_lag,
)
from experiments.metrics import Progress, TransportResult
from experiments.results import load_raw, render, write_raw
from experiments.runner import UNFAITHFUL_EXIT, unfaithful
from host.agent.pacing import LagMeter, NicWire
from switchmodel.dataplane import DataPlane

FRAME = 0.0025  # a full frame's time at about 5 Mb/s


def quiet(t: float) -> list[FidelitySample]:
    """One interval in which everything kept up."""
    return [
        FidelitySample(t, "machine", "machine", 0.4, 0.4),
        FidelitySample(t, "switch", "t1-p0-s0", 0.2, 0.15, lag_s=0.0002),
        FidelitySample(t, "agent", "h0", 0.3, 0.3, lag_s=0.0003, gap_s=0.0004),
    ]


def busy_switch(t: float, share: float = 0.98) -> list[FidelitySample]:
    """One interval in which switch t1-p0-s0's forwarding thread used ``share`` of a core."""
    return [
        FidelitySample(t, "machine", "machine", 0.7, 0.7),
        FidelitySample(t, "switch", "t1-p0-s0", share + 0.1, share, lag_s=0.004),
        FidelitySample(t, "agent", "h0", 0.3, 0.3, lag_s=0.0003, gap_s=0.0004),
    ]


def series(*intervals: list[FidelitySample]) -> list[FidelitySample]:
    return [s for interval in intervals for s in interval]


def test_a_run_that_kept_up_is_faithful() -> None:
    verdict = judge(series(*(quiet(0.25 * k) for k in range(1, 9))), FRAME)
    assert verdict.faithful and verdict.text == FAITHFUL and not verdict.intervals
    assert verdict.peaks["cpu_max"] == {"agent h0": 0.3, "switch t1-p0-s0": 0.2}
    assert verdict.peaks["service_lag_max_s"] == pytest.approx(0.0002)
    assert verdict.peaks["loop_gap_max_s"] == pytest.approx(0.0004)


def test_a_saturated_switch_makes_the_phase_cpu_bound_from_when_it_began() -> None:
    samples = series(
        quiet(0.25), quiet(0.5), busy_switch(0.75), busy_switch(1.0), busy_switch(1.25), quiet(1.5)
    )
    verdict = judge(samples, FRAME)
    assert not verdict.faithful
    assert verdict.text == "CPU-bound from t=0.50 s (switch t1-p0-s0 at 98 % of a core)"
    assert verdict.since_s == 0.5
    assert verdict.intervals == ((0.5, 1.25),)


def test_one_busy_interval_alone_is_not_enough() -> None:
    samples = series(quiet(0.25), busy_switch(0.5), quiet(0.75), busy_switch(1.0), quiet(1.25))
    assert judge(samples, FRAME).faithful
    assert not judge(samples, FRAME, Thresholds(min_intervals=1)).faithful


def test_lags_and_the_machine_count_in_frame_times() -> None:
    late_agent = [FidelitySample(t, "agent", "h1", 0.5, 0.5, lag_s=5 * FRAME) for t in (1, 2)]
    assert (
        judge(late_agent, FRAME).text
        == "CPU-bound from t=0.00 s (agent h1 paced frames 12.5 ms late)"
    )
    assert judge(late_agent, FRAME * 2).faithful  # the same lag at half the rate: 2.5 frames
    late_switch = [FidelitySample(t, "switch", "s", 0.5, 0.5, lag_s=0.02) for t in (1, 2)]
    assert "switch s served its queues 20.0 ms late" in judge(late_switch, FRAME).text
    gaps = [FidelitySample(t, "agent", "h2", 0.1, 0.1, gap_s=0.05) for t in (1, 2)]
    assert "agent h2 woke 50.0 ms late" in judge(gaps, FRAME).text
    full = [FidelitySample(t, "machine", "machine", 0.99, 0.99) for t in (1, 2)]
    assert "the machine at 99 % of all its cores" in judge(full, FRAME).text


def test_no_samples_is_not_measured() -> None:
    verdict = judge([], FRAME)
    assert verdict.faithful and verdict.text == "not measured"


def test_lag_meter_windows() -> None:
    meter = LagMeter()
    for lag in (-0.001, 0.0, 0.002, 0.005, 0.001):
        meter.add(lag)
    assert meter.late == 3 and meter.total == pytest.approx(0.008)
    assert meter.take() == 0.005 and meter.take() == 0.0
    meter.add(0.003)
    assert meter.take() == 0.003 and meter.max == 0.005


def test_nic_wire_counts_frames_sent_after_their_turn() -> None:
    wire = NicWire(rate_bps=8e6, full_frame=980)  # 1 ms per full frame
    frame = bytes(980)  # 1 ms on the wire with preamble and gap
    assert wire.offer(frame, 0.0)
    assert not wire.offer(frame, 0.0)  # waits for the wire: its turn at 1 ms - early
    assert wire.release(0.0005 + 0.0001) == [frame]  # released on time, 0.1 ms of slack
    assert wire.lag.max == pytest.approx(0.0001)
    assert not wire.offer(frame, 0.0006)
    assert wire.release(0.0065) == [frame]  # the loop came 5 ms late
    assert wire.lag.take() == pytest.approx(0.005)


def test_switch_service_lag_is_measured_against_the_shaped_time() -> None:
    plane = DataPlane({})
    plane._served_late(0.004)
    plane._served_late(0.001)
    figures = plane.service_figures()
    assert figures["service_lag_max_s"] == 0.004 and figures["service_late"] == 2
    assert plane.service_figures()["service_lag_max_s"] == 0.0
    assert plane.service_figures()["service_lag_max_ever_s"] == 0.004


def test_switch_lag_reads_the_windows_of_the_sampling_interval(tmp_path: Path) -> None:
    path = tmp_path / "s.stats.json"
    windows = [[10.0, 0.5, 0.0], [10.1, 0.002, 0.03], [10.2, 0.007, 0.0]]
    path.write_text(json.dumps({"windows": windows}))
    assert switch_lag(path, 10.05, 10.2) == (0.007, 0.03)
    assert switch_lag(path, 10.15, 10.3) == (0.007, 0.0)
    assert switch_lag(path, 9.0, 10.05) == (0.5, 0.0)
    assert switch_lag(tmp_path / "absent.json", 0.0, 1.0) == (0.0, 0.0)
    assert switch_lag(None, 0.0, 1.0) == (0.0, 0.0)


def test_proc_figures_of_this_process() -> None:
    before = process_ticks(os.getpid())
    assert before is not None
    deadline = time.process_time() + 0.1
    while time.process_time() < deadline:
        pass
    after = process_ticks(os.getpid())
    assert after is not None and after[0] > before[0]
    assert os.getpid() in after[1]  # the main thread is one of the tasks
    busy, total = machine_ticks()
    assert 0 < busy <= total
    assert process_ticks(2**22 + 12345) is None


def test_niced_work_is_not_counted_as_the_machine_busy(tmp_path: Path) -> None:
    # user nice system idle iowait irq softirq steal guest guest_nice: work at a positive
    # nice value yields to the testbed's processes, so only the rest is "busy"
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 50 30 800 20 5 5 0 0 7\ncpu0 1 2 3 4 5 6 7 8 9 10\n")
    assert machine_ticks(stat) == (100 + 30 + 5 + 5, 1017)


def test_verdict_in_metrics_summary_and_plot(tmp_path: Path) -> None:
    fabric = small_fabric()
    results = []
    for name, busy in (("mrc", True), ("single-path", False)):
        r = TransportResult(name=name, kind="mrc", duration=2.0, flows=[("h0", "h2")])
        r.progress = [Progress(0.25 * k, "h0->h2", 10_000 * k) for k in range(1, 9)]
        r.fidelity = series(
            *(
                busy_switch(0.25 * k) if busy and 3 <= k <= 5 else quiet(0.25 * k)
                for k in range(1, 9)
            )
        )
        results.append(r)
    write_raw(tmp_path, {"name": "synthetic"}, fabric.topology.as_dict(), 0.25, results)
    assert load_raw(tmp_path)[2][0].fidelity == results[0].fidelity
    metrics = render(tmp_path)
    saved = json.loads((tmp_path / "metrics.json").read_text())["transports"]
    assert saved["mrc"]["fidelity"]["verdict"] == (
        "CPU-bound from t=0.50 s (switch t1-p0-s0 at 98 % of a core)"
    )
    assert saved["mrc"]["fidelity"]["intervals"] == [[0.5, 1.25]]
    assert saved["single-path"]["fidelity"]["verdict"] == FAITHFUL
    summary = (tmp_path / "summary.md").read_text()
    assert "| fidelity |" in summary and "| faithful |" in summary
    assert "**mrc was not faithful**: CPU-bound from t=0.50 s" in summary
    assert unfaithful(metrics) == [
        "mrc: CPU-bound from t=0.50 s (switch t1-p0-s0 at 98 % of a core)"
    ]
    assert UNFAITHFUL_EXIT != 0
    assert (tmp_path / "goodput.png").stat().st_size > 0


def test_the_switch_stats_file_holds_recent_windows(tmp_path: Path) -> None:
    import threading

    from switchmodel.cli import _write_stats

    plane = DataPlane({})
    plane._served_late(0.003)
    path = tmp_path / "s.stats.json"
    stop = threading.Event()
    writer = threading.Thread(target=_write_stats, args=(plane, path, stop))
    writer.start()
    time.sleep(0.35)
    stop.set()
    writer.join()
    figures = json.loads(path.read_text())
    assert figures["service_late"] == 1 and figures["service_lag_total_s"] == 0.003
    windows = figures["windows"]
    assert len(windows) >= 2 and all(len(w) == 3 for w in windows)
    assert windows[0][1] == 0.003 and windows[1][1] == 0.0  # each window its own largest lag
    assert switch_lag(path, 0.0, time.monotonic()) == (0.003, max(w[2] for w in windows))
