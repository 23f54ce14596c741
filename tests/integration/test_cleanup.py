"""An interrupted run leaves nothing behind, and ``mrc-testbed down`` finds a fabric whatever its
state file.

A ``mrc-testbed run`` whose testbed keeps its state file outside the default place is stopped
with SIGTERM (as ``timeout`` stops it) while its agents run: it takes its fabric down itself
-- switches, agents, ``mrc-ctl watch``, node shells, interfaces, state file and its entry in
the registry of live runs. A fabric brought up under another state file than ``down``'s is
found through that registry and removed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from experiments.testbed import teardown, tool
from targets import state as statelib
from targets.state import StateError

from .test_down import FABRIC, leftovers, recorded_pids, start_up

pytestmark = [pytest.mark.mininet, pytest.mark.slow]


@pytest.fixture
def runs(fabric_free: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A registry of live runs of this test's own (the machine's is left alone)."""
    folder = tmp_path / "runs"
    monkeypatch.setenv("MRC_TESTBED_RUNS", str(folder))
    yield folder
    for path in statelib.live_runs():  # whatever a failing test left behind
        teardown(path)


def wait_for_agents(state: Path, proc: subprocess.Popen[bytes], log: Path) -> statelib.TestbedState:
    """The state file once it lists every host's agent."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            loaded = statelib.TestbedState.load(state)
            if len(loaded.hosts) == len(FABRIC.hosts):
                return loaded
        except StateError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    proc.kill()
    pytest.fail(f"the run did not start its agents:\n{log.read_text()[-2000:]}")


def test_sigterm_mid_run_takes_the_fabric_down(runs: Path, tmp_path: Path) -> None:
    state = tmp_path / "run" / "state.json"  # not the default state file
    log = tmp_path / "run.log"
    env = {**os.environ, "MRC_TESTBED_STATE": str(state)}
    with log.open("wb") as out:
        run = subprocess.Popen(
            [tool("mrc-testbed"), "run", "demo", "--target", "model", "--no-progress",
             "--out", str(tmp_path / "results")],
            env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        loaded = wait_for_agents(state, run, log)
        assert statelib.live_runs() == [state.absolute()]  # listed while it runs
        run.send_signal(signal.SIGTERM)
        run.wait(90)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert leftovers(recorded_pids(loaded)) == [], log.read_text()[-2000:]
    assert not state.exists()
    assert statelib.live_runs() == [] and not list(runs.iterdir())


def test_down_finds_a_fabric_of_another_state_file(runs: Path, tmp_path: Path) -> None:
    state = tmp_path / "elsewhere" / "state.json"
    state.parent.mkdir()
    up, loaded = start_up(state)
    # 'down' as a user types it: its own state file names nothing that runs
    env = {**os.environ, "MRC_TESTBED_STATE": str(tmp_path / "default" / "state.json")}
    done = subprocess.run([tool("mrc-testbed"), "down"], env=env, capture_output=True,
                          text=True, timeout=180, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "leftovers removed" in done.stdout and str(state) in done.stdout, done.stdout
    assert up.wait(30) == 0  # the up process was stopped, and cleaned up after itself
    assert leftovers(recorded_pids(loaded)) == []
    assert not state.exists() and statelib.live_runs() == []
