"""``benchmarks/emulation_vs_sim.py --runs N``: several runs of a target pooled into one column.

The sim's 3 -> 1 incast runs with seeds 1 and 2 (a few seconds, no root); the column holds each
run's figures, their means, and the table shows the mean with the runs' range after it.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.benchmarks import load_benchmark

ROOT = Path(__file__).resolve().parents[2]


def test_runs_are_pooled_as_means_with_their_range(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "emulation_vs_sim.py"), "--targets", "sim",
         "--only", "incast-3", "--rate", "3", "--runs", "2", "--out", str(out),
         "--results", str(tmp_path / "results")],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    column = json.loads(out.read_text())["incast-3"]["sim"]
    runs = column["runs"]
    assert len(runs) == 2
    assert [Path(r["results"]).name for r in runs] == ["run-1", "run-2"]
    for key in ("goodput_fraction", "nacks", "trims"):
        assert column[key] == statistics.fmean(r[key] for r in runs)
    assert all(r["complete"] and 0.5 < r["goodput_fraction"] <= 1.0 for r in runs)
    # the seeds give different runs, and the table shows their range after the mean
    assert (
        runs[0]["nacks"] != runs[1]["nacks"]
        or runs[0]["goodput_fraction"] != runs[1]["goodput_fraction"]
    )
    row = next(line for line in done.stdout.splitlines() if line.startswith("| goodput"))
    assert f"{column['goodput_fraction']:.2f}" in row
    assert "| runs | 2 |" in done.stdout


def _benchmark() -> Any:
    return load_benchmark("emulation_vs_sim")


def test_stagger_starts_each_flow_a_fraction_of_a_frame_after_the_previous() -> None:
    bench = _benchmark()
    scenario = bench.failure_scenario(3.0)
    assert bench.staggered(scenario, 0.0) is scenario
    moved = bench.staggered(scenario, 0.25)
    (workload,) = scenario.workloads
    frame = scenario.topology.frame_time
    # the same flows, bytes and faults; the k-th flow k quarter frames after the workload
    assert moved.flows() == [(k, s, d) for k, (s, d) in enumerate(workload.pairs)]
    assert [w.start_s for w in moved.workloads] == pytest.approx(
        [workload.start_s + k * 0.25 * frame for k in range(len(workload.pairs))]
    )
    assert {(w.message_bytes, w.total_bytes) for w in moved.workloads} == {
        (workload.message_bytes, workload.total_bytes)
    }
    assert moved.faults == scenario.faults
    with pytest.raises(ValueError, match="stagger -1"):
        bench.staggered(scenario, -1)
    # the benchmark's scenarios are staggered by default
    assert bench.scenarios(3.0)["failure"] == bench.staggered(scenario, bench.STAGGER)
    assert bench.scenarios(3.0, 0.0)["failure"] == scenario


def test_a_negative_stagger_is_refused_naming_the_option() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "emulation_vs_sim.py"), "--targets", "sim",
         "--stagger", "-0.5"],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 2
    assert "--stagger -0.5: expected a number of frame times >= 0" in done.stderr
