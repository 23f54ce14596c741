"""SIGTERM handled as Ctrl-C (``targets.interrupt``) and the registry of live runs
(``targets.state``), without a fabric: a process that handles SIGTERM runs its ``finally``
blocks; state files come and go in the registry, and entries of state files that are gone are
dropped. The fabric-level checks are ``tests/integration/test_cleanup.py``."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from targets import state as statelib

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import signal, sys, time
from targets.interrupt import handle_termination
if sys.argv[1] == "handled":
    handle_termination()
elif sys.argv[1] == "exit":  # as under Mininet's CLI, which swallows KeyboardInterrupt
    handle_termination(SystemExit)
try:
    print("ready", flush=True)
    time.sleep(60)
except KeyboardInterrupt:
    print("interrupted", flush=True)
finally:
    print("cleaned up", flush=True)
"""


@pytest.mark.parametrize("mode", ["handled", "exit", "default"])
def test_sigterm_runs_the_cleanup_once_handled(mode: str) -> None:
    child = subprocess.Popen([sys.executable, "-c", CHILD, mode], cwd=ROOT, text=True,
                             stdout=subprocess.PIPE)  # fmt: skip
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    child.send_signal(signal.SIGTERM)
    out, _ = child.communicate(timeout=30)
    if mode == "handled":
        assert out.split("\n")[:2] == ["interrupted", "cleaned up"]
    elif mode == "exit":
        assert out.strip() == "cleaned up" and child.returncode == 128 + signal.SIGTERM
    else:  # Python's default: the process ends with no cleanup
        assert child.returncode == -signal.SIGTERM and "cleaned up" not in out


def test_live_runs_lists_state_files_while_they_exist(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MRC_TESTBED_RUNS", str(tmp_path / "runs"))
    assert statelib.live_runs() == []
    first, second = tmp_path / "a" / "state.json", tmp_path / "b" / "state.json"
    for path in (first, second):
        statelib.TestbedState(topology="small", target="model").save(path)
        statelib.register_run(path)
    statelib.register_run(first)  # again: still one entry
    assert sorted(statelib.live_runs()) == sorted([first, second])
    statelib.forget_run(first)
    assert statelib.live_runs() == [second]
    second.unlink()  # a state file removed by hand: its entry goes too
    assert statelib.live_runs() == [] and not list((tmp_path / "runs").iterdir())
