"""``mrc-testbed up`` / ``down``: nothing of the testbed is left, also after a crash."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.fabric import small_fabric

from experiments.testbed import node_names, teardown, tool
from targets import state as statelib
from targets.state import StateError

from .conftest import TARGET_PARAMS, target_skip_reason

pytestmark = [pytest.mark.mininet, pytest.mark.slow]
FABRIC = small_fabric()


@pytest.fixture
def state_file(fabric_free: None, tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "state.json"
    yield path
    teardown(path)  # whatever a failing test left behind


def leftovers(recorded: list[int]) -> list[str]:
    """Interfaces, node shells and recorded processes of the fabric that still exist."""
    found = [
        f"interface {p.intf}"
        for sw in FABRIC.switches
        for p in sw.ports
        if Path(f"/sys/class/net/{p.intf}").exists()
    ]
    shells = {f"mininet:{name}" for name in node_names(FABRIC)}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            words = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        text = [w.decode(errors="replace") for w in words if w]
        if text and text[-1] in shells:
            found.append(f"node shell {entry.name} ({text[-1]})")
        if int(entry.name) in recorded and text:
            found.append(f"process {entry.name} ({' '.join(text[:2])})")
    return found


def start_up(
    state: Path, target: str = "model"
) -> tuple[subprocess.Popen[bytes], statelib.TestbedState]:
    """``mrc-testbed up`` on ``target`` in the background, once its state file lists every
    host (skips when the target cannot run here)."""
    reason = target_skip_reason(target)
    if reason:
        pytest.skip(reason)
    env = {**os.environ, "MRC_TESTBED_STATE": str(state)}
    log = open(state.with_name("up.log"), "wb")  # noqa: SIM115 -- closed by the child's exit
    up = subprocess.Popen(
        [tool("mrc-testbed"), "up", "--topo", "small", "--target", target],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 90
    while True:
        try:
            loaded = statelib.TestbedState.load(state)
            if len(loaded.hosts) == len(FABRIC.hosts):
                break
        except StateError:
            pass
        if up.poll() is not None or time.monotonic() > deadline:
            up.kill()
            pytest.fail(
                "mrc-testbed up did not come up:\n" + state.with_name("up.log").read_text()[-2000:]
            )
        time.sleep(0.2)
    return up, loaded


def down(state: Path) -> subprocess.CompletedProcess[str]:
    """``mrc-testbed down`` of the testbed recorded in ``state``; it must succeed."""
    env = {**os.environ, "MRC_TESTBED_STATE": str(state)}
    done = subprocess.run(
        [tool("mrc-testbed"), "down"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done


def recorded_pids(state: statelib.TestbedState) -> list[int]:
    pids = [sw.pid for sw in state.switches.values()] + [h.pid for h in state.hosts.values()]
    return pids + [int(p["pid"]) for p in state.processes]


@pytest.mark.parametrize("target", TARGET_PARAMS)
def test_down_stops_a_running_testbed(state_file: Path, target: str) -> None:
    up, state = start_up(state_file, target)
    down(state_file)
    assert up.wait(30) == 0
    assert leftovers(recorded_pids(state)) == []
    assert not state_file.exists()


@pytest.mark.parametrize("target", TARGET_PARAMS)
def test_down_cleans_up_after_a_crash(state_file: Path, target: str) -> None:
    up, state = start_up(state_file, target)
    up.send_signal(signal.SIGKILL)  # the up process dies without cleaning anything
    up.wait(10)
    assert leftovers(recorded_pids(state)), "a crashed testbed should leave something behind"
    done = down(state_file)
    assert "leftovers removed" in done.stdout
    assert leftovers(recorded_pids(state)) == []
    assert not state_file.exists()
