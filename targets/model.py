"""The switchmodel target: ``mrc-switch`` as a switch process of the testbed (BMv2's twin).

:class:`ModelSwitch` is the :class:`targets.process.SwitchProcess` of the switchmodel: the
same configuration as :class:`targets.bmv2.Bmv2Switch` (ports, device id, gRPC address, priority
queues, rate, queue depth, MTU, pcap and log directories) turned into an ``mrc-switch`` command
line.
Shaping, queue depth and the ports' latency (``port_latency_us``: the switchmodel's delay lines,
used where the kernel has no ``netem``) are command-line options here, so nothing is configured
after start.
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
from dataclasses import dataclass, field
from pathlib import Path

from targets.process import SwitchConfigError, SwitchProcess

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


@dataclass(eq=False, repr=False, kw_only=True)
class ModelSwitch(SwitchProcess):
    """One ``mrc-switch`` process."""

    kind = "switchmodel"

    port_rates: Mapping[int, int] = field(default_factory=dict)  # port -> its own rate
    #: port -> the latency (us) its delay line holds frames before the wire (none: no delay line)
    port_latency_us: Mapping[int, float] = field(default_factory=dict)
    #: port -> the links its delay line stands for (default 1: each adds a frame's serialisation)
    port_links: Mapping[int, int] = field(default_factory=dict)
    log_level: str = "info"
    netns: str | None = None  # run inside this network namespace
    wrapper: Sequence[str] = ()  # or inside this command, e.g. ["mnexec", "-a", PID]
    executable: Sequence[str] | None = None  # default: mrc_switch_command()

    def __post_init__(self) -> None:
        super().__post_init__()
        name = self.name
        for number, rate in self.port_rates.items():
            if number not in self.ports:
                raise SwitchConfigError(f"switch {name}: port_rates: port {number} is not a port")
            if rate <= 0:
                raise SwitchConfigError(f"switch {name}: port_rates[{number}] {rate}: expected > 0")
        for number, latency in self.port_latency_us.items():
            if number not in self.ports:
                raise SwitchConfigError(
                    f"switch {name}: port_latency_us: port {number} is not a port"
                )
            if not latency >= 0:
                raise SwitchConfigError(
                    f"switch {name}: port_latency_us[{number}] {latency}: expected >= 0"
                )
        for number, links in self.port_links.items():
            if number not in self.ports or links < 1:
                raise SwitchConfigError(
                    f"switch {name}: port_links[{number}] {links}: expected a port and >= 1"
                )
        if self.log_level not in LOG_LEVELS:
            raise SwitchConfigError(
                f"switch {name}: log_level {self.log_level!r}: expected one of "
                f"{', '.join(LOG_LEVELS)}"
            )
        if self.netns is not None and self.wrapper:
            raise SwitchConfigError(f"switch {name}: give netns or wrapper, not both")

    def command(self) -> list[str]:
        """The ``mrc-switch`` command line (inside the wrapper, if any)."""
        wrapper = ["ip", "netns", "exec", self.netns] if self.netns else list(self.wrapper)
        executable = self.executable if self.executable is not None else mrc_switch_command()
        argv = [*wrapper, *executable]
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
        for number, latency in sorted(self.port_latency_us.items()):
            argv += ["--port-latency-us-of", f"{number}={latency:g}"]
        for number, links in sorted(self.port_links.items()):
            argv += ["--port-links-of", f"{number}={links}"]
        if self.queue_depth is not None:
            argv += ["--queue-depth", str(self.queue_depth)]
        if self.control_queue_depth is not None:
            argv += ["--control-queue-depth", str(self.control_queue_depth)]
        if self.mtu is not None:
            argv += ["--mtu", str(self.mtu)]
        if self.pcap_dir is not None:
            argv += ["--pcap", str(self.pcap_dir)]
        return [*argv, "--stats-file", str(self.stats_path)]

    @property
    def stats_path(self) -> Path:
        """``NAME.stats.json`` beside the log: the queues' service lag (``--stats-file``)."""
        return self._log_dir() / f"{self.name}.stats.json"
