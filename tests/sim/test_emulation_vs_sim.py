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
