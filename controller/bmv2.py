"""BMv2 for the testbed: build the P4 program with p4c, run ``simple_switch_grpc`` per switch.

- :func:`compile_p4` compiles ``p4src/mrc_switch.p4`` with p4c; its two outputs, the P4Info and
  the BMv2 JSON, are committed beside the source (:func:`committed_pipeline`) and are the contract
  that the controller, BMv2 and switchmodel share (:func:`stale_outputs` checks them);
- :class:`Bmv2Switch` is the :class:`~topologies.switchproc.SwitchProcess` for
  ``simple_switch_grpc``: ``-i PORT@IFACE`` per port, device id, Thrift port, log file and level,
  optional pcap directory, and after ``--`` the target options (gRPC address, number of priority
  queues, CPU port). It starts without a pipeline (``--no-p4``) unless given a JSON file: the
  controller pushes the pipeline over P4Runtime. Once the switch answers, queue depth and rate of
  every port are set through the Thrift runtime CLI (``simple_switch_CLI``).

BMv2 shapes queues in packets per second, not bits per second, and paces each priority queue
of a port separately (:func:`port_queue_commands`): data at the link rate for full-size frames,
control and trimmed headers at the link rate for control-size frames. Where switchmodel shapes
both queues together in bits, BMv2 can therefore send control packets on top of a saturated data
queue (at most the control queue's own share); docs/p4-pipeline.md discusses the difference.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Mapping
from pathlib import Path

from topologies.switchproc import (
    SwitchConfigError,
    SwitchProcess,
    SwitchStartError,
    parse_grpc_addr,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
P4_SOURCE = REPO_ROOT / "p4src" / "mrc_switch.p4"
P4_P4INFO = REPO_ROOT / "p4src" / "mrc_switch.p4info.txtpb"
P4_JSON = REPO_ROOT / "p4src" / "mrc_switch.json"

SIMPLE_SWITCH_GRPC = "simple_switch_grpc"
SIMPLE_SWITCH_CLI = "simple_switch_CLI"
P4C = "p4c"

ETHERNET_OVERHEAD = 14 + 4  # header and FCS around an IP packet of ``mtu`` bytes
#: IP packet size the control queue is paced for: an MRC control packet or a trimmed header
#: (IPv6, UDP, BTH, RETH, MRC extension: about 110 bytes) with room for an SRH segment
CONTROL_BYTES = 128
LOG_LEVELS = ("trace", "debug", "info", "warn", "error", "off")


class ToolMissing(RuntimeError):
    """A program the BMv2 target needs (p4c, simple_switch_grpc, simple_switch_CLI) is absent."""


class P4BuildError(RuntimeError):
    """p4c failed; the message carries its output."""


def missing_tools(
    tools: tuple[str, ...] = (SIMPLE_SWITCH_GRPC, SIMPLE_SWITCH_CLI),
) -> list[str]:
    """The programs of ``tools`` that are not on PATH."""
    return [tool for tool in tools if shutil.which(tool) is None]


def compile_p4(out_dir: Path, source: Path = P4_SOURCE) -> tuple[Path, Path]:
    """Compile ``source`` for BMv2 (v1model) with p4c into ``out_dir``.

    p4c runs from the repository root on the source's relative path, so the source file names
    recorded in the JSON are the same on every machine. Returns ``(p4info_path,
    bmv2_json_path)``. Raises :class:`ToolMissing` when p4c is not on PATH and
    :class:`P4BuildError` (with p4c's output) when the compilation fails or warns.
    """
    source = source.resolve()
    if not source.is_file():
        raise FileNotFoundError(f"P4 source {source}: no such file")
    p4c = shutil.which(P4C)
    if p4c is None:
        raise ToolMissing(
            f"{P4C} is not on PATH: cannot compile {source.name} for BMv2 "
            "(install it with scripts/install.sh --with-bmv2, or use the committed "
            f"{P4_JSON.relative_to(REPO_ROOT)})"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = source.stem
    p4info = out_dir.resolve() / f"{stem}.p4info.txtpb"
    bmv2_json = out_dir.resolve() / f"{stem}.json"
    try:
        relative = source.relative_to(REPO_ROOT)
    except ValueError:
        relative = source
    argv = [
        p4c, "--target", "bmv2", "--arch", "v1model", "-Xp4c=--Werror",
        "--p4runtime-files", str(p4info), "-o", str(out_dir.resolve()), str(relative),
    ]  # fmt: skip
    result = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=REPO_ROOT)
    if result.returncode != 0 or not bmv2_json.is_file() or not p4info.is_file():
        output = (result.stdout + result.stderr).strip() or "(no output)"
        raise P4BuildError(f"p4c failed on {relative} (status {result.returncode}):\n{output}")
    # p4c also leaves its preprocessed source (<stem>.p4i), and names it in the JSON by its
    # absolute path in out_dir: neither belongs in the contract, so the JSON names the source.
    preprocessed = out_dir.resolve() / f"{stem}.p4i"
    text = bmv2_json.read_text()
    bmv2_json.write_text(text.replace(f'"{preprocessed}"', f'"{relative}"', 1))
    preprocessed.unlink(missing_ok=True)
    return p4info, bmv2_json


def committed_pipeline() -> tuple[Path, Path]:
    """The committed compiler outputs: ``(p4info_path, bmv2_json_path)`` (see ``mrc-ctl p4``)."""
    for path in (P4_P4INFO, P4_JSON):
        if not path.is_file():
            raise FileNotFoundError(
                f"{path.relative_to(REPO_ROOT)} is missing: regenerate it with 'mrc-ctl p4'"
            )
    return P4_P4INFO, P4_JSON


def stale_outputs(out_dir: Path) -> list[str]:
    """Compile into ``out_dir`` and name the committed outputs that differ from p4c's."""
    p4info, bmv2_json = compile_p4(out_dir)
    stale = []
    for fresh, committed in ((p4info, P4_P4INFO), (bmv2_json, P4_JSON)):
        if not committed.is_file() or committed.read_bytes() != fresh.read_bytes():
            stale.append(str(committed.relative_to(REPO_ROOT)))
    return stale


def queue_rate_pps(rate_bps: int, frame_bytes: int) -> int:
    """BMv2 queue rate (packets/s) that sends ``frame_bytes``-byte IP packets at ``rate_bps``."""
    if rate_bps <= 0 or frame_bytes <= 0:
        raise ValueError(f"rate {rate_bps} b/s, packet {frame_bytes} B: expected positive values")
    return max(1, rate_bps // (8 * (frame_bytes + ETHERNET_OVERHEAD)))


def port_queue_commands(
    port: int, rate_bps: int | None, depth: int | None, mtu: int, priority_queues: int = 2
) -> list[str]:
    """``simple_switch_CLI`` commands that give one port its depth and rates.

    BMv2 paces every priority queue of a port on its own, in packets per second; the CLI's
    priority is the program's ``standard_metadata.priority`` (the higher is served first). So the
    data queue (priority 0) is paced at the link rate for full-size packets and the control
    queue (priority 1: ACKs, NACKs, probes, trimmed headers) at the link rate for control-size
    packets: a header then costs a header's time on the link, not a full packet's.
    """
    commands = []
    if depth is not None:
        commands.append(f"set_queue_depth {depth} {port}")
    if rate_bps is not None:
        rates = {0: queue_rate_pps(rate_bps, mtu), 1: queue_rate_pps(rate_bps, CONTROL_BYTES)}
        for priority, pps in rates.items():
            if priority < priority_queues:
                commands.append(f"set_queue_rate {pps} {port} {priority}")
    return commands


class Bmv2Switch(SwitchProcess):
    """One ``simple_switch_grpc`` process (see the module docstring)."""

    kind = "BMv2"

    def __init__(
        self,
        name: str,
        ports: Mapping[int, str],
        device_id: int,
        grpc_addr: str,
        *,
        thrift_port: int,
        priority_queues: int = 2,
        rate_bps: int | None = None,
        queue_depth: int | None = None,
        pcap_dir: str | os.PathLike[str] | None = None,
        log_dir: str | os.PathLike[str] | None = None,
        mtu: int = 1500,
        json_path: str | os.PathLike[str] | None = None,
        cpu_port: int | None = None,
        log_level: str = "info",
        executable: str = SIMPLE_SWITCH_GRPC,
        cli: str = SIMPLE_SWITCH_CLI,
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
        if not 0 < thrift_port < 65536:
            raise SwitchConfigError(f"switch {name}: thrift_port {thrift_port}: expected 1..65535")
        if mtu < 64:
            raise SwitchConfigError(f"switch {name}: mtu {mtu}: expected at least 64 bytes")
        if cpu_port is not None and (not 0 < cpu_port < 511 or cpu_port in self.ports):
            raise SwitchConfigError(
                f"switch {name}: cpu_port {cpu_port}: expected 1..510 and not a data port"
            )
        if log_level not in LOG_LEVELS:
            raise SwitchConfigError(
                f"switch {name}: log_level {log_level!r}: expected one of {', '.join(LOG_LEVELS)}"
            )
        self.thrift_port = thrift_port
        self.mtu = mtu
        self.json_path = Path(json_path) if json_path is not None else None
        self.cpu_port = cpu_port
        self.log_level = log_level
        self.executable = executable
        self.cli = cli

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
                number, self.rate_bps, self.queue_depth, self.mtu, self.priority_queues
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
    "P4BuildError",
    "ToolMissing",
    "committed_pipeline",
    "compile_p4",
    "missing_tools",
    "port_queue_commands",
    "stale_outputs",
    "parse_grpc_addr",
    "queue_rate_pps",
]
