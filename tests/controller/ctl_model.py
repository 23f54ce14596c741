"""Real ``mrc-switch`` processes on loopback gRPC ports, for the controller tests.

The switches are :class:`targets.model.ModelSwitch` processes without data-plane ports
(no ``-i``): the controller only needs their P4Runtime service. Ports are chosen free at start.
Tests that need them skip, naming the reason, while the switchmodel's P4Runtime server
(``switchmodel.server``) does not exist.
"""

from __future__ import annotations

import importlib.util
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from targets.lab import free_port
from targets.model import ModelSwitch
from targets.state import SwitchState, TestbedState
from topologies import Fabric, load_topology
from topologies.config import shipped_topology

HAVE_MODEL = importlib.util.find_spec("switchmodel.server") is not None
requires_model = pytest.mark.skipif(
    not HAVE_MODEL,
    reason="switchmodel.server (the mrc-switch P4Runtime target) is not available yet",
)
START_TIMEOUT = 20.0


class ModelProcess(ModelSwitch):
    """One mrc-switch serving one switch of the fabric on ``127.0.0.1:port``, logging to
    ``log_dir/<name>.log``; ``veth`` (if given) is attached as data-plane port 1, otherwise the
    switch has no data-plane port. It can be stopped and started again on the same port."""

    def __init__(self, name: str, device_id: int, port: int, log_dir: Path, veth: str = "") -> None:
        super().__init__(
            name,
            {1: veth} if veth else {},
            device_id,
            f"127.0.0.1:{port}",
            log_dir=log_dir,
            log_level="warning",
        )
        self.port = port

    @property
    def address(self) -> str:
        """The P4Runtime address, ``127.0.0.1:port``."""
        return self.grpc_addr

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        super().wait_ready(timeout)


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
                name: SwitchState(grpc=p.address, device_id=p.device_id, pid=p.pid or 0)
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
            proc = ModelProcess(switch.name, switch.device_id, free_port(), directory)
            model.switches[switch.name] = proc
            proc.start()
        for proc in model.switches.values():
            proc.wait_ready()
    except BaseException:
        model.stop()
        raise
    model.write_state()
    return model
