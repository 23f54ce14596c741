"""ModelSwitch: run ``mrc-switch`` as a switch process of the testbed (the BMv2 launcher's twin).

:class:`ModelSwitch` is the :class:`topologies.switchproc.SwitchProcess` of the switchmodel: the
same configuration as ``controller.bmv2.Bmv2Switch`` (ports, device id, gRPC address, priority
queues, rate, queue depth, pcap and log directories) turned into an ``mrc-switch`` command line.
Shaping and queue depth are command-line options here, so nothing is configured after start.
``netns`` (or any ``wrapper`` command such as ``["mnexec", "-a", PID]``) runs it inside a
network namespace::

    switch = ModelSwitch("t0-p0-r0", {1: "t0-p0-r0-eth1", 2: "t0-p0-r0-eth2"}, device_id=1,
                         grpc_addr="127.0.0.1:50001", rate_bps=100_000_000, queue_depth=64)
    switch.start()
    switch.wait_ready()
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from topologies.switchproc import SwitchConfigError, SwitchProcess

LOG_LEVELS = ("debug", "info", "warning", "error")


def mrc_switch_command() -> list[str]:
    """How to run mrc-switch: the script next to this Python, on PATH, or ``python -m``."""
    beside = Path(sys.executable).parent / "mrc-switch"
    if beside.is_file() and os.access(beside, os.X_OK):
        return [str(beside)]
    found = shutil.which("mrc-switch")
    if found:
        return [found]
    return [sys.executable, "-m", "switchmodel.cli"]


class ModelSwitch(SwitchProcess):
    """One ``mrc-switch`` process."""

    kind = "switchmodel"

    def __init__(
        self,
        name: str,
        ports: Mapping[int, str],
        device_id: int,
        grpc_addr: str,
        *,
        priority_queues: int = 2,
        rate_bps: int | None = None,
        queue_depth: int | None = None,
        pcap_dir: str | os.PathLike[str] | None = None,
        log_dir: str | os.PathLike[str] | None = None,
        port_rates: Mapping[int, int] | None = None,
        mtu: int | None = None,
        log_level: str = "info",
        netns: str | None = None,
        wrapper: Sequence[str] = (),
        executable: Sequence[str] | None = None,
    ) -> None:
        super().__init__(
            name,
            ports,
            device_id,
            grpc_addr,
            priority_queues=priority_queues,
            rate_bps=rate_bps,
            queue_depth=queue_depth,
            pcap_dir=pcap_dir,
            log_dir=log_dir,
        )
        self.port_rates = dict(port_rates or {})
        for number, rate in self.port_rates.items():
            if number not in self.ports:
                raise SwitchConfigError(f"switch {name}: port_rates: port {number} is not a port")
            if rate <= 0:
                raise SwitchConfigError(f"switch {name}: port_rates[{number}] {rate}: expected > 0")
        if mtu is not None and mtu < 64:
            raise SwitchConfigError(f"switch {name}: mtu {mtu}: expected at least 64 bytes")
        if log_level not in LOG_LEVELS:
            raise SwitchConfigError(
                f"switch {name}: log_level {log_level!r}: expected one of {', '.join(LOG_LEVELS)}"
            )
        if netns is not None and wrapper:
            raise SwitchConfigError(f"switch {name}: give netns or wrapper, not both")
        self.mtu = mtu
        self.log_level = log_level
        self.wrapper = ["ip", "netns", "exec", netns] if netns else list(wrapper)
        self.executable = list(executable) if executable is not None else mrc_switch_command()

    def command(self) -> list[str]:
        """The ``mrc-switch`` command line (inside the wrapper, if any)."""
        argv = [*self.wrapper, *self.executable]
        for number, intf in self.ports.items():
            argv += ["-i", f"{number}@{intf}"]
        argv += [
            "--device-id", str(self.device_id),
            "--grpc-addr", self.grpc_addr,
            "--priority-queues", str(self.priority_queues),
            "--log-level", self.log_level,
        ]  # fmt: skip
        if self.rate_bps is not None:
            argv += ["--port-rate-bps", str(self.rate_bps)]
        for number, rate in sorted(self.port_rates.items()):
            argv += ["--port-rate-bps-of", f"{number}={rate}"]
        if self.queue_depth is not None:
            argv += ["--queue-depth", str(self.queue_depth)]
        if self.mtu is not None:
            argv += ["--mtu", str(self.mtu)]
        if self.pcap_dir is not None:
            argv += ["--pcap", str(self.pcap_dir)]
        return argv
