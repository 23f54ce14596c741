"""The demo shows what the README promises: each transport runs through the link's failure and
its repair, and MRC's EVs are retired when the link fails and probed back to GOOD after it
returns (ev_states.csv, ev_transitions.csv). The shipped demo runs here at the shared fabric's
rate with its times scaled to match, so it carries the same bytes in less time
(tests/unit/test_demo_scenario.py checks the shipped sizing itself)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from experiments.runner import run_scenario
from experiments.scenario import Scenario, load_scenario, shipped_scenario

from .conftest import LINK_RATE_MBPS

pytestmark = [pytest.mark.mininet, pytest.mark.slow]


def scaled_demo() -> Scenario:
    """The shipped demo at LINK_RATE_MBPS, its times divided by the rate's ratio."""
    demo = load_scenario(shipped_scenario("demo"))
    raw = demo.raw
    k = LINK_RATE_MBPS / demo.topology.link_rate_mbps  # the rate its times are written for
    return demo.with_(
        link_rate_mbps=LINK_RATE_MBPS,
        link_delay_us=0,
        duration_s=float(raw["duration_s"]) / k,
        workloads=[{**w, "start_s": float(w["start_s"]) / k} for w in raw["workloads"]],
        faults=[{**f, "at_s": float(f["at_s"]) / k} for f in raw["faults"]],
    )


def rows(out: Path, name: str, transport: str) -> list[dict[str, str]]:
    with (out / name).open() as f:
        return [r for r in csv.DictReader(f) if r["transport"] == transport]


def delivered_by(progress: list[dict[str, str]], t: float) -> int:
    """Bytes delivered over every flow by time ``t`` (progress.csv is cumulative per flow)."""
    most: dict[str, int] = {}
    for r in progress:
        if float(r["time_s"]) <= t:
            most[r["flow"]] = max(most.get(r["flow"], 0), int(r["delivered_bytes"]))
    return sum(most.values())


def test_each_transport_runs_through_failure_and_repair(testbed: Any, tmp_path: Path) -> None:
    scenario = scaled_demo()
    down_at, up_at = sorted(float(f["at_s"]) for f in scenario.raw["faults"])
    lines: list[str] = []
    run_scenario(scenario, tmp_path, testbed=testbed, progress=False, show=lines.append)
    saved = json.loads((tmp_path / "metrics.json").read_text())["transports"]
    verdicts = {name: m["fidelity"]["verdict"] for name, m in saved.items()}
    for transport in ("mrc", "single-path"):
        marks = {r["action"]: float(r["time_s"]) for r in rows(tmp_path, "faults.csv", transport)}
        # the link came back on schedule, not because the phase ended first
        assert marks["down"] == pytest.approx(down_at, abs=0.3), (transport, marks)
        assert marks["up"] == pytest.approx(up_at, abs=0.3), (transport, marks)
        progress = rows(tmp_path, "progress.csv", transport)
        # still sending after the repair: more bytes delivered after it than by then
        assert delivered_by(progress, float("inf")) > delivered_by(progress, up_at), (
            transport,
            verdicts,
        )
    # a machine that kept up finishes within the run. The switch model reports its service lag;
    # BMv2 is judged by CPU alone, with thresholds not yet calibrated against it
    # (docs/experiments.md, "Fidelity"): at this fabric's 20 Mb/s a BMv2 run that falls
    # behind has been judged faithful, so the cross-check holds on the switch model only.
    if testbed.target == "model" and saved["mrc"]["fidelity"]["faithful"]:
        assert saved["mrc"]["complete"], (lines, verdicts)
    ends = [float(r["end_s"]) for r in rows(tmp_path, "completions.csv", "mrc") if r["end_s"]]
    assert max(ends) > up_at, (ends, verdicts)
    states = rows(tmp_path, "ev_states.csv", "mrc")
    assert any(int(r["ASSUMED_BAD"]) > 0 for r in states if down_at < float(r["time_s"]) < up_at)
    if saved["mrc"]["fidelity"]["faithful"]:
        # every EV back by the end; a run that fell behind (a loaded machine: probes answered
        # late, paths that come and go) may end before the last ones are, and says so
        end = states[-1]
        assert int(end["ASSUMED_BAD"]) == 0 and int(end["GOOD"]) == int(states[0]["GOOD"]), verdicts
    # the failed link's path (its spine: t1-p0-s0 -> p0-s0) retired during the failure and
    # probed back to GOOD after the repair (other paths may come and go on a busy machine)
    spine = next(n for f in scenario.raw["faults"] for n in f["link"] if n.startswith("t1-"))
    path = spine.removeprefix("t1-")
    changes = [r for r in rows(tmp_path, "ev_transitions.csv", "mrc") if r["path"] == path]
    assert any(r["new"] == "assumed_bad" and down_at <= float(r["t"]) < up_at for r in changes), (
        verdicts
    )
    assert any(
        r["new"] == "good" and r["reason"] == "probe_reply" and float(r["t"]) >= up_at
        for r in changes
    ), verdicts
