"""Calibrate the fidelity thresholds: one scenario at rising link rates, where do results bend?

Runs the small fabric's fault-free permutation (MRC alone) at each ``--rates`` link rate on one
switch target, on a fresh testbed per rate, and prints per rate what MRC achieved (goodput as a
fraction of capacity, EVs retired, RTOs) beside what the fidelity sampler saw
(:mod:`experiments.fidelity`), as the 95th percentile over the sampling intervals of:

- the busiest thread of any switch or agent (share of a core) and the machine (share of all
  its cores);
- the largest pacing or service lag and scheduling gap of any process, in full-frame times at
  that rate (the unit of :class:`experiments.fidelity.Thresholds`).

The rates at which goodput and EV behaviour still match the lowest rate are faithful; the first
rate at which they do not is where the machine fell behind. The thresholds belong between the
figures of the two (``docs/experiments.md`` has the method and the figures measured). The
machine must be quiet: a point is measured only while the load average is below ``--max-load``
(it waits up to ``--wait`` seconds for that), and the load of each point is recorded.

    sudo .venv/bin/python benchmarks/fidelity.py [--target model] [--rates 5,10,20,40,80]
        [--size 8MiB] [--max-load 2] [--out DIR]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.runner import run_scenario  # noqa: E402
from experiments.scenario import Scenario, parse_scenario  # noqa: E402
from targets.factory import choose_target  # noqa: E402
from targets.interrupt import handle_termination  # noqa: E402


def scenario(rate: float, size: str) -> Scenario:
    """The small fabric's permutation at ``rate`` Mb/s, MRC alone, no fault."""
    return parse_scenario(
        {
            "name": f"calibrate-{rate:g}",
            "topology": "small",
            "link_rate_mbps": rate,
            "duration_s": 30,
            "transports": ["mrc"],
            "workloads": [
                {"kind": "permutation", "message_bytes": "256KiB", "total_bytes": size,
                 "start_s": 0.5}
            ],
        }
    )  # fmt: skip


def load() -> float:
    """The 1-minute load average."""
    return float(Path("/proc/loadavg").read_text().split()[0])


def wait_for_quiet(max_load: float, patience: float) -> float:
    """Wait until the load average is below ``max_load`` (at most ``patience`` s); the load."""
    deadline = time.monotonic() + patience
    while load() >= max_load and time.monotonic() < deadline:
        time.sleep(5.0)
    return load()


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))] if ordered else 0.0


def fidelity_figures(folder: Path, frame_time: float) -> dict[str, float]:
    """Per sampling interval the worst process's figures, as 95th percentiles over the run."""
    worst: dict[str, dict[str, float]] = {}
    with (folder / "fidelity.csv").open() as f:
        for row in csv.DictReader(f):
            w = worst.setdefault(row["time_s"], {"thread": 0.0, "machine": 0.0, "lag": 0.0,
                                                 "gap": 0.0})  # fmt: skip
            if row["kind"] == "machine":
                w["machine"] = float(row["cpu"])
                continue
            w["thread"] = max(w["thread"], float(row["thread_cpu"]))
            w["lag"] = max(w["lag"], float(row["lag_s"]) / frame_time)
            w["gap"] = max(w["gap"], float(row["gap_s"]) / frame_time)
    return {
        f"{key}_p95": round(p95([w[key] for w in worst.values()]), 3)
        for key in ("thread", "machine", "lag", "gap")
    }


def main(argv: list[str] | None = None) -> int:
    handle_termination()  # SIGTERM cleans up as Ctrl-C does: nothing is left running
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", choices=("model", "bmv2", "auto"), default="model")
    parser.add_argument(
        "--rates",
        type=lambda text: [float(x) for x in text.split(",") if x],
        default=[5.0, 10.0, 20.0, 40.0, 80.0],
        help="link rates in Mb/s, comma-separated (default 5,10,20,40,80)",
    )
    parser.add_argument("--size", default="8MiB", help="bytes per flow (default 8MiB)")
    parser.add_argument("--max-load", type=float, default=2.0, help="measure below this load")
    parser.add_argument("--wait", type=float, default=600.0, help="seconds to wait for it")
    parser.add_argument("--out", type=Path, help="folder for the results (default: a temp dir)")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        parser.error("needs root (Mininet, namespaces): run it with sudo")
    target = choose_target(args.target)
    out = args.out or Path(tempfile.mkdtemp(prefix="mrc-fidelity-calibration-"))
    out.mkdir(parents=True, exist_ok=True)
    points: list[dict[str, Any]] = []
    for rate in args.rates:
        before = wait_for_quiet(args.max_load, args.wait)
        run = scenario(rate, args.size)
        folder = out / f"{rate:g}"
        metrics = run_scenario(run, folder, target, state_path=out / "state.json",
                               show=lambda _line: None, progress=False)["mrc"]  # fmt: skip
        point = {
            "rate_mbps": rate,
            "load_before": before,
            "load_after": load(),
            "goodput_fraction": round(metrics.goodput_fraction, 3),
            "ev_retirements": metrics.ev_retirements,
            "rtos": int(metrics.rtos),
            "complete": metrics.complete,
            "verdict": metrics.fidelity.get("verdict"),
            **fidelity_figures(folder, run.topology.frame_time),
        }
        points.append(point)
        print(json.dumps(point), flush=True)
    (out / "calibration.json").write_text(
        json.dumps({"target": target, "cores": os.cpu_count(), "points": points}, indent=2) + "\n"
    )
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
