"""The state file of a running testbed: what ``mrc-testbed up`` started and where to reach it.

``mrc-testbed up`` writes it, ``mrc-ctl`` and ``mrc-testbed down`` read it. It is JSON::

    {"topology": "topologies/small.yaml", "target": "model", "started": 1763758800.0,
     "switches": {"t0-p0-r0": {"grpc": "127.0.0.1:50001", "device_id": 1, "pid": 1234,
                               "log": "/run/mrc-testbed/t0-p0-r0.log"}, ...},
     "hosts": {"h0": {"pid": 2345, "control": "/run/mrc-testbed/h0.sock"}, ...},
     "processes": [{"name": "mrc-ctl watch", "pid": 3456}]}

The default location is ``/run/mrc-testbed/state.json``; the environment variable
``MRC_TESTBED_STATE`` overrides it.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

RUN_DIR = Path("/run/mrc-testbed")


def default_path() -> Path:
    """Where the state file of the running testbed lives."""
    return Path(os.environ.get("MRC_TESTBED_STATE", str(RUN_DIR / "state.json")))


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
