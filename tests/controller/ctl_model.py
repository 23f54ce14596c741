"""Real ``mrc-switch`` processes on loopback gRPC ports, for the controller tests.

The switches run without data-plane ports (no ``-i``): the controller only needs their
P4Runtime service. Ports are chosen free at start. Tests that need them skip, naming the reason,
while the switchmodel's P4Runtime server (``switchmodel.server``) does not exist.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from experiments.state import SwitchState, TestbedState
from topologies import Fabric, load_topology
from topologies.config import shipped_topology

HAVE_MODEL = importlib.util.find_spec("switchmodel.server") is not None
requires_model = pytest.mark.skipif(
    not HAVE_MODEL,
    reason="switchmodel.server (the mrc-switch P4Runtime target) is not available yet",
)
START_TIMEOUT = 20.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def mrc_switch_command() -> list[str]:
    """The mrc-switch command: $MRC_SWITCH, the script beside this Python, else ``python -m``."""
    if os.environ.get("MRC_SWITCH"):
        return os.environ["MRC_SWITCH"].split()
    beside = Path(sys.executable).parent / "mrc-switch"
    if beside.is_file() and os.access(beside, os.X_OK):
        return [str(beside)]
    return [sys.executable, "-m", "switchmodel.cli"]


@dataclass
class ModelProcess:
    """One mrc-switch process serving one switch of the fabric."""

    name: str
    device_id: int
    port: int
    log: Path
    process: subprocess.Popen[bytes] | None = None
    veth: str = ""  # an interface to attach as data-plane port 1 (none by default)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        argv = (
            mrc_switch_command()
            + (["-i", f"1@{self.veth}"] if self.veth else [])
            + [
                "--device-id",
                str(self.device_id),
                "--grpc-addr",
                self.address,
                "--log-level",
                "warning",
            ]
        )
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"mrc-switch {self.name} exited ({self.process.returncode}): "
                    f"{self.log.read_text(errors='replace')[-2000:]}"
                )
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"mrc-switch {self.name} did not listen on {self.address}")

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)
        self.process = None


@dataclass
class ModelFabric:
    """A fabric of mrc-switch processes, one per switch, and a state file describing it."""

    fabric: Fabric
    topo_path: Path
    directory: Path
    switches: dict[str, ModelProcess] = field(default_factory=dict)

    @property
    def state_path(self) -> Path:
        return self.directory / "state.json"

    def switch_flags(self, names: list[str] | None = None) -> list[str]:
        """``--topo FILE --switch NAME=ADDR ...`` for the CLI."""
        flags = ["--topo", str(self.topo_path)]
        for name, proc in self.switches.items():
            if names is None or name in names:
                flags += ["--switch", f"{name}={proc.address}"]
        return flags

    def state_flags(self) -> list[str]:
        return ["--state", str(self.state_path)]

    def write_state(self) -> None:
        TestbedState(
            topology=str(self.topo_path),
            target="model",
            started=time.time(),
            switches={
                name: SwitchState(
                    grpc=p.address, device_id=p.device_id, pid=p.process.pid if p.process else 0
                )
                for name, p in self.switches.items()
            },
        ).save(self.state_path)

    def restart(self, name: str) -> None:
        """Kill one switch process and start a fresh one (empty, no pipeline) on its port."""
        proc = self.switches[name]
        proc.stop()
        proc.start()
        proc.wait_ready()

    def stop(self) -> None:
        for proc in self.switches.values():
            proc.stop()


def start_model_fabric(topology: str, directory: Path) -> ModelFabric:
    """Start one mrc-switch per switch of a shipped topology."""
    topo_path = shipped_topology(topology)
    fabric = Fabric(load_topology(topo_path))
    model = ModelFabric(fabric, topo_path, directory)
    try:
        for switch in fabric.switches:
            proc = ModelProcess(
                switch.name, switch.device_id, free_port(), directory / f"{switch.name}.log"
            )
            model.switches[switch.name] = proc
            proc.start()
        for proc in model.switches.values():
            proc.wait_ready()
    except BaseException:
        model.stop()
        raise
    model.write_state()
    return model
