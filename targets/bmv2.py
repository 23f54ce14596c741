"""The BMv2 target: ``simple_switch_grpc`` as a switch process of the testbed.

:class:`Bmv2Switch` is the :class:`~targets.process.SwitchProcess` for ``simple_switch_grpc``:
``-i PORT@IFACE`` per port, device id, Thrift port, log file and level, optional pcap directory,
and after ``--`` the target options (gRPC address, number of priority queues, CPU port). It starts
without a pipeline (``--no-p4``) unless given a JSON file: the controller pushes the pipeline
(p4c's committed output, :func:`p4src.compile.committed_pipeline`) over P4Runtime. Once the switch
answers, queue depth and rate of every port are set through the Thrift runtime CLI
(``simple_switch_CLI``).

BMv2 shapes queues in packets per second, not bits per second, and paces each priority queue
of a port separately (:func:`port_queue_commands`): data at the link rate for full-size frames,
control and trimmed headers at the link rate for control-size frames. Where switchmodel shapes
both queues together in bits, BMv2 can therefore send control packets on top of a saturated data
queue (at most the control queue's own share); docs/p4-pipeline.md discusses the difference.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from targets.process import StrPath, SwitchConfigError, SwitchProcess, SwitchStartError

SIMPLE_SWITCH_GRPC = "simple_switch_grpc"
SIMPLE_SWITCH_CLI = "simple_switch_CLI"

ETHERNET_OVERHEAD = 14 + 4  # header and FCS around an IP packet of ``mtu`` bytes
#: IP packet size the control queue is paced for: an MRC control packet or a trimmed header
#: (IPv6, UDP, BTH, RETH, MRC extension: about 110 bytes) with room for an SRH segment
CONTROL_BYTES = 128
DEFAULT_MTU = 1500  # the IP packet size the data queue is paced for when none is given
LOG_LEVELS = ("trace", "debug", "info", "warn", "error", "off")


def missing_tools(
    tools: tuple[str, ...] = (SIMPLE_SWITCH_GRPC, SIMPLE_SWITCH_CLI),
) -> list[str]:
    """The programs of ``tools`` that are not on PATH."""
    return [tool for tool in tools if shutil.which(tool) is None]


def queue_rate_pps(rate_bps: int, frame_bytes: int) -> int:
    """BMv2 queue rate (packets/s) that sends ``frame_bytes``-byte IP packets at ``rate_bps``
    at least: BMv2 takes whole packets a second, so the rate is rounded up. Rounded down, a
    port at the low rates ``auto`` picks ran slower than asked (13 instead of 13.98 packets a
    second at 0.47 Mb/s: 7 %, more than the ports' 2 % speed-up over the NICs), and a fully
    loaded uplink queued and trimmed where nothing was oversubscribed."""
    if rate_bps <= 0 or frame_bytes <= 0:
        raise ValueError(f"rate {rate_bps} b/s, packet {frame_bytes} B: expected positive values")
    return -(-rate_bps // (8 * (frame_bytes + ETHERNET_OVERHEAD)))


def port_queue_commands(
    port: int,
    rate_bps: int | None,
    depth: int | None,
    mtu: int,
    priority_queues: int = 2,
    control_depth: int | None = None,
) -> list[str]:
    """``simple_switch_CLI`` commands that give one port its depths and rates.

    The data queue (priority 0) holds ``depth`` packets, the higher ones ``control_depth``
    (default ``depth``): headers, ACKs and NACKs are small, and the reference bounds their queue
    in bytes (``topologies.operating.header_queue_depth``).

    BMv2 paces every priority queue of a port on its own, in packets per second; the CLI's
    priority is the program's ``standard_metadata.priority`` (the higher is served first). So the
    data queue (priority 0) is paced at the link rate for full-size packets and the control
    queue (priority 1: ACKs, NACKs, probes, trimmed headers) at the link rate for control-size
    packets: a header then costs a header's time on the link, not a full packet's.
    """
    commands = []
    if depth is not None:
        for priority in range(priority_queues):
            size = depth if priority == 0 or control_depth is None else control_depth
            commands.append(f"set_queue_depth {size} {port} {priority}")
    if rate_bps is not None:
        rates = {0: queue_rate_pps(rate_bps, mtu), 1: queue_rate_pps(rate_bps, CONTROL_BYTES)}
        for priority, pps in rates.items():
            if priority < priority_queues:
                commands.append(f"set_queue_rate {pps} {port} {priority}")
    return commands


@dataclass(eq=False, repr=False, kw_only=True)
class Bmv2Switch(SwitchProcess):
    """One ``simple_switch_grpc`` process (see the module docstring)."""

    kind = "BMv2"
    #: BMv2 reads all its ports in one thread through libpcap, and libpcap blocks that thread in
    #: a read of an interface that went down until a frame arrives on it: one interface taken
    #: down would stop the whole switch and, across that link, its neighbour, for good
    interface_down_stalls = True

    #: the Thrift runtime server (simple_switch_CLI); BMv2 listens on it on every address (it
    #: has no option for the address: docs/p4-pipeline.md, "Run on BMv2")
    thrift_port: int
    json_path: StrPath | None = None  # a pipeline to start with (None: --no-p4)
    cpu_port: int | None = None
    log_level: str = "info"
    executable: str = SIMPLE_SWITCH_GRPC
    cli: str = SIMPLE_SWITCH_CLI
    #: the IP packet a data queue is paced for (None: ``mtu``). BMv2 paces in packets a second,
    #: the NICs in bytes: paced for an MTU larger than any frame the NICs send, a port runs
    #: fewer of their frames a second than its rate says (the fabric's: 0.6 % over the NICs'
    #: data frames where the ports are 2 % faster than the NICs), and every jitter of the
    #: emulation stays in its queue
    paced_packet_bytes: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        name = self.name
        if not 0 < self.thrift_port < 65536:
            raise SwitchConfigError(
                f"switch {name}: thrift_port {self.thrift_port}: expected 1..65535"
            )
        if self.cpu_port is not None and (
            not 0 < self.cpu_port < 511 or self.cpu_port in self.ports
        ):
            raise SwitchConfigError(
                f"switch {name}: cpu_port {self.cpu_port}: expected 1..510 and not a data port"
            )
        if self.log_level not in LOG_LEVELS:
            raise SwitchConfigError(
                f"switch {name}: log_level {self.log_level!r}: expected one of "
                f"{', '.join(LOG_LEVELS)}"
            )

    @property
    def frame_mtu(self) -> int:
        """The IP packet size the data queues are paced for: ``paced_packet_bytes`` (no larger
        than ``mtu``), else ``mtu``, else 1500."""
        mtu = self.mtu if self.mtu is not None else DEFAULT_MTU
        paced = self.paced_packet_bytes
        return mtu if paced is None or paced > mtu else paced

    @property
    def bmv2_log_path(self) -> Path:
        """The file BMv2 itself logs to (``--log-file``)."""
        return self.log_path.with_suffix(".bmv2.log")

    def command(self) -> list[str]:
        """``simple_switch_grpc`` general options, then ``--`` and the target options."""
        argv = [self.executable]
        for number, intf in self.ports.items():
            argv += ["-i", f"{number}@{intf}"]
        argv += [
            "--device-id", str(self.device_id),
            "--thrift-port", str(self.thrift_port),
            "--log-file", str(self.bmv2_log_path),
            "--log-level", self.log_level,
            "--log-flush",
        ]  # fmt: skip
        if self.pcap_dir is not None:
            argv += ["--pcap", str(self.pcap_dir)]
        argv.append(str(self.json_path) if self.json_path is not None else "--no-p4")
        argv += [
            "--",
            "--grpc-server-addr", self.grpc_addr,
            "--priority-queues", str(self.priority_queues),
        ]  # fmt: skip
        if self.cpu_port is not None:
            argv += ["--cpu-port", str(self.cpu_port)]
        return argv

    def queue_commands(self) -> list[str]:
        """The runtime CLI commands that set depth and rate of every port's queues.

        ``set_queue_depth``/``set_queue_rate`` without a priority apply to every priority queue
        of the port; BMv2 reports ``enq_qdepth`` summed over them.
        """
        commands = []
        for number in self.ports:
            commands += port_queue_commands(
                number,
                self.rate_bps,
                self.queue_depth,
                self.frame_mtu,
                self.priority_queues,
                self.control_queue_depth,
            )
        return commands

    def cli_command(self) -> list[str]:
        """The Thrift runtime CLI of this switch."""
        return [self.cli, "--thrift-port", str(self.thrift_port)]

    def ready(self) -> bool:
        """Both the gRPC server and the Thrift runtime server accept connections."""
        if not super().ready():
            return False
        try:
            with socket.create_connection(("127.0.0.1", self.thrift_port), timeout=0.5):
                return True
        except OSError:
            return False

    def configure(self) -> None:
        """Set queue depth and rate through the Thrift runtime CLI."""
        commands = self.queue_commands()
        if commands:
            self.run_cli(commands, "could not set the queues")

    def run_cli(self, commands: list[str], failure: str) -> str:
        """Run ``commands`` through ``simple_switch_CLI``; raise :class:`SwitchStartError`
        saying ``failure`` when it cannot run or reports an error."""
        try:
            result = subprocess.run(
                self.cli_command(),
                input="\n".join(commands) + "\n",
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SwitchStartError(
                self.name, f"cannot run {self.cli}: {exc}", self.log_tail()
            ) from exc
        output = result.stdout + result.stderr
        bad = [line for line in output.splitlines() if "Error" in line or "Invalid" in line]
        if result.returncode != 0 or bad:
            raise SwitchStartError(
                self.name,
                f"{self.cli} {failure} ({'; '.join(bad) or result.returncode})",
                output + "\n" + self.log_tail(),
            )
        return output

    def log_tail(self, n: int = 20) -> str:
        """The end of the process output and of BMv2's own log file."""
        tail = super().log_tail(n)
        try:
            lines = self.bmv2_log_path.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return tail
        return (tail + f"\n--- {self.bmv2_log_path.name} ---\n" + "\n".join(lines[-n:])).strip()


__all__ = [
    "Bmv2Switch",
    "missing_tools",
    "port_queue_commands",
    "queue_rate_pps",
]
