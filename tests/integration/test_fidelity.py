"""A run that falls behind says so: a switch stopped and resumed on purpose (200 ms of every
220 ms, like a process that gets a tenth of a core) for part of a run is flagged in
metrics.json, summary.md and fidelity.csv, and ``mrc-testbed run --strict`` exits non-zero."""

from __future__ import annotations

import csv
import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from experiments import cli, runner
from experiments.runner import UNFAITHFUL_EXIT, Phase, PhaseObserver

pytestmark = [pytest.mark.mininet, pytest.mark.slow]

THROTTLED = "t1-p0-s0"
FROM_S, UNTIL_S = 1.0, 2.5  # seconds of the phase the switch is throttled
# not a divisor of the switch's 0.1 s stats interval, or its writer would always wake in the
# running slot: each of its wake-ups falls in a stop and comes about 120 ms late
STOPPED_S, RUNNING_S = 0.2, 0.02

SCENARIO = {
    "name": "throttled",
    "topology": "small",
    "link_rate_mbps": 20,
    "link_delay_us": 0,
    "duration_s": 4,
    "transports": ["mrc"],
    "workloads": [
        {"kind": "permutation", "message_bytes": "256KiB", "total_bytes": "16MiB", "start_s": 0.2}
    ],
}


class Throttle(PhaseObserver):
    """Stops and resumes one switch process from FROM_S to UNTIL_S of every phase."""

    def __init__(self, switch: str) -> None:
        self.switch = switch
        self.thread: threading.Thread | None = None

    def started(self, phase: Phase) -> None:
        pid = phase.testbed.switch(self.switch).process.pid
        assert pid
        self.thread = threading.Thread(target=self._run, args=(phase, pid), daemon=True)
        self.thread.start()

    def _run(self, phase: Phase, pid: int) -> None:
        while not phase.t0:  # the phase has not started its clock yet
            time.sleep(0.01)
        try:
            while phase.now() < UNTIL_S and not phase.stop.is_set():
                if phase.now() < FROM_S:
                    time.sleep(0.01)
                    continue
                os.kill(pid, signal.SIGSTOP)
                time.sleep(STOPPED_S)
                os.kill(pid, signal.SIGCONT)
                time.sleep(RUNNING_S)
        finally:
            os.kill(pid, signal.SIGCONT)

    def finished(self, phase: Phase) -> None:
        if self.thread is not None:
            self.thread.join()


# The switch model reports its service lag and scheduling gaps, so a stopped switch shows; BMv2
# reports neither and is judged by its CPU alone (docs/experiments.md, "Fidelity"), which a
# stopped process does not raise: this test runs on the switch model only.
@pytest.mark.parametrize("testbed", ["model"], indirect=True)
def test_a_throttled_switch_is_flagged_and_strict_fails(
    testbed: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "throttled.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    out = tmp_path / "out"
    lines: list[str] = []
    real = runner.run_scenario

    def on_the_testbed(scenario: Any, folder: Path, target: str = "auto", **kw: Any) -> Any:
        return real(
            scenario, folder, testbed=testbed, progress=False, show=lines.append,
            observers=[Throttle(THROTTLED)],
        )  # fmt: skip

    monkeypatch.setattr(runner, "run_scenario", on_the_testbed)
    # the run goes ahead at its fixed rate on the fixture's fabric: a calibration of the
    # machine (a fixed rate's budget check, tests/unit/test_auto_rate.py) would boot a second
    # fabric beside it, and --strict would refuse a rate over the budget before the run
    monkeypatch.setattr(runner, "resolve_rate", lambda scenario, target, strict=False: scenario)
    status = cli.main(["run", str(path), "--strict", "--no-progress", "--out", str(out)])
    assert status == UNFAITHFUL_EXIT, lines
    fidelity = json.loads((out / "metrics.json").read_text())["transports"]["mrc"]["fidelity"]
    assert not fidelity["faithful"] and fidelity["verdict"].startswith("CPU-bound from t=")
    # a behind interval overlaps the throttled time
    assert any(start < UNTIL_S and end > FROM_S for start, end in fidelity["intervals"])
    assert "**mrc was not faithful**" in (out / "summary.md").read_text()
    # the switch itself says it was not scheduled: gaps of about the time it was stopped
    with (out / "fidelity.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r["name"] == THROTTLED]
    during = [float(r["gap_s"]) for r in rows if FROM_S + 0.3 < float(r["time_s"]) <= UNTIL_S]
    assert during and min(during) >= 0.05, during
