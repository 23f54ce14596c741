"""The switchmodel data-plane target: mrc-switch on veth pairs, driven over real P4Runtime.

The namespace is ``smd<id>``, its interfaces ``smd<id>t<n>`` and mrc-switch's ``smd<id>s<n>``
(:class:`targets_p4rt.P4RuntimeTarget` makes them, the sockets and the P4Runtime session); the
switch is :class:`targets.model.ModelSwitch`. The pipeline is the committed P4Info, with
no device config: switchmodel implements the program itself. ``port_rates`` become
``--port-rate-bps-of PORT=BPS`` options: mrc-switch shapes those ports from the start.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from controller.p4info import P4Info
from targets.model import ModelSwitch

from .targets_p4rt import DEVICE_ID, P4RuntimeTarget


class ModelTarget(P4RuntimeTarget[ModelSwitch]):
    """One mrc-switch with a veth pair per data-plane port."""

    name = "model"
    label = "switchmodel"
    prefix = "smd"
    cannot_shape = None  # mrc-switch --port-rate-bps-of

    def __init__(
        self, ports: Sequence[int], workdir: Path, port_rates: Mapping[int, int] | None = None
    ) -> None:
        super().__init__(ports, workdir, port_rates)
        self._info = P4Info.load()

    def make_switch(self, grpc_addr: str) -> ModelSwitch:
        return ModelSwitch(
            self.switch_name,
            self.switch_intf,
            device_id=DEVICE_ID,
            grpc_addr=grpc_addr,
            log_dir=self.workdir,
            log_level="debug",  # every frame sent is logged: port, priority, queue depth
            port_rates=self.port_rates,
        )
