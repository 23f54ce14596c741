"""The state file of a running testbed: what ``mrc-testbed up`` started and where to reach it.

``mrc-testbed up`` writes it, ``mrc-ctl`` and ``mrc-testbed down`` read it. It is JSON::

    {"topology": "topologies/small.yaml", "target": "model", "started": 1763758800.0,
     "switches": {"t0-p0-r0": {"grpc": "127.0.0.1:50001", "device_id": 1, "pid": 1234,
                               "log": "/run/mrc-testbed/t0-p0-r0.log"}, ...},
     "hosts": {"h0": {"pid": 2345, "control": "/run/mrc-testbed/h0.sock"}, ...},
     "processes": [{"name": "mrc-ctl watch", "pid": 3456}]}

The default location is ``/run/mrc-testbed/state.json``; the environment variable
``MRC_TESTBED_STATE`` overrides it, and runs and benchmarks keep theirs in their own folders.
So that ``mrc-testbed down`` finds every running fabric whatever its state file, each testbed
lists its state file in the registry of live runs while it is up (:func:`register_run`,
:func:`live_runs`): a folder of symbolic links, ``/run/mrc-testbed/runs`` unless
``MRC_TESTBED_RUNS`` names another.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

RUN_DIR = Path("/run/mrc-testbed")


def default_path() -> Path:
    """Where the state file of the running testbed lives."""
    return Path(os.environ.get("MRC_TESTBED_STATE", str(RUN_DIR / "state.json")))


def runs_dir() -> Path:
    """The registry of live runs: one symbolic link per running testbed's state file."""
    return Path(os.environ.get("MRC_TESTBED_RUNS", str(RUN_DIR / "runs")))


def _run_entry(state_path: Path) -> Path:
    key = hashlib.sha256(str(state_path.absolute()).encode()).hexdigest()[:16]
    return runs_dir() / f"{key}.state"


def register_run(state_path: Path) -> None:
    """List ``state_path`` in the registry of live runs (again after a restart is harmless)."""
    entry = _run_entry(state_path)
    entry.parent.mkdir(parents=True, exist_ok=True)
    target = str(state_path.absolute())
    with contextlib.suppress(OSError):
        if os.readlink(entry) == target:
            return
        entry.unlink()
    tmp = entry.with_suffix(f".{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    tmp.symlink_to(target)
    tmp.replace(entry)


def forget_run(state_path: Path) -> None:
    """Take ``state_path`` off the registry of live runs (its testbed is down)."""
    with contextlib.suppress(FileNotFoundError):
        _run_entry(state_path).unlink()


def live_runs() -> list[Path]:
    """The state files of the registry whose file still exists (entries of state files that are
    gone are removed), oldest entry first."""
    folder = runs_dir()
    if not folder.is_dir():
        return []
    found: list[tuple[float, Path]] = []
    for entry in folder.glob("*.state"):
        try:
            target = Path(os.readlink(entry))
            since = entry.lstat().st_mtime
        except OSError:
            continue
        if target.exists():
            found.append((since, target))
        else:
            with contextlib.suppress(OSError):
                entry.unlink()
    return [path for _, path in sorted(found)]


class StateError(RuntimeError):
    """The state file is missing or does not describe a testbed."""


@dataclass
class SwitchState:
    """A running switch: its P4Runtime address and process."""

    grpc: str
    device_id: int
    pid: int = 0
    log: str = ""


@dataclass
class HostState:
    """A running host agent: its process and control socket."""

    pid: int = 0
    control: str = ""


@dataclass
class TestbedState:
    """Everything a running testbed consists of."""

    topology: str
    target: str
    started: float = 0.0
    switches: dict[str, SwitchState] = field(default_factory=dict)
    hosts: dict[str, HostState] = field(default_factory=dict)
    processes: list[dict[str, Any]] = field(default_factory=list)

    def save(self, path: Path | None = None) -> Path:
        """Write the state file atomically; returns its path."""
        path = path or default_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: Path | None = None) -> TestbedState:
        """Read the state file; :class:`StateError` names the file when it is missing or bad."""
        path = path or default_path()
        if not path.exists():
            raise StateError(
                f"{path}: no running testbed (start one with 'mrc-testbed up', "
                "or give switch addresses with --switch NAME=HOST:PORT)"
            )
        try:
            data = json.loads(path.read_text())
            return cls(
                topology=data["topology"],
                target=data["target"],
                started=float(data.get("started", 0.0)),
                switches={k: SwitchState(**v) for k, v in data.get("switches", {}).items()},
                hosts={k: HostState(**v) for k, v in data.get("hosts", {}).items()},
                processes=list(data.get("processes", [])),
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            reason = f"missing {exc}" if isinstance(exc, KeyError) else str(exc)
            raise StateError(f"{path}: not a testbed state file ({reason})") from None
