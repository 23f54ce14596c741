"""The BMv2 data-plane target: simple_switch_grpc on veth pairs, driven over P4Runtime.

The namespace is ``dpb<id>``, its interfaces ``dpb<id>t<n>`` and BMv2's ``dpb<id>s<n>``
(:class:`targets_p4rt.P4RuntimeTarget` makes them, the sockets and the P4Runtime session). The
pipeline is p4c's committed output (:func:`p4src.compile.committed_pipeline`): the BMv2 JSON
pushed together with its P4Info. ``port_rates`` are set once the switch is up with
``set_queue_rate`` through its Thrift runtime CLI, in packets per second per priority queue, as
the fabric's switches get them (:func:`targets.bmv2.port_queue_commands`).
"""

from __future__ import annotations

import os
import subprocess

from controller.p4info import P4Info
from p4src.compile import committed_pipeline
from targets.bmv2 import Bmv2Switch, missing_tools, port_queue_commands
from targets.lab import free_port

from .target import TargetUnavailable
from .targets_p4rt import DEVICE_ID, P4RuntimeTarget

PROMPT = b"RuntimeCmd: "


class RuntimeCli:
    """One ``simple_switch_CLI`` kept open: commands in, output up to the next prompt out.

    BMv2's P4Runtime server does not write registers (UNIMPLEMENTED), its Thrift runtime does;
    one CLI process for many writes avoids starting Python for each.
    """

    def __init__(self, argv: list[str]) -> None:
        self.process = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self._read_to_prompt()

    def _read_to_prompt(self) -> str:
        assert self.process.stdout is not None
        out = b""
        while not out.endswith(PROMPT):
            chunk = self.process.stdout.read1(4096)
            if not chunk:
                raise RuntimeError(f"simple_switch_CLI ended: {out.decode(errors='replace')}")
            out += chunk
        return out[: -len(PROMPT)].decode(errors="replace")

    def run(self, command: str) -> str:
        assert self.process.stdin is not None
        self.process.stdin.write(command.encode() + b"\n")
        self.process.stdin.flush()
        out = self._read_to_prompt()
        if "Error" in out or "Invalid" in out:
            raise RuntimeError(f"simple_switch_CLI: {command}: {out.strip()}")
        return out

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


class Bmv2Target(P4RuntimeTarget[Bmv2Switch]):
    """One BMv2 switch with a veth pair per data-plane port."""

    _cli: RuntimeCli | None = None

    def set_register(self, name: str, index: int, value: int) -> None:
        """Through the Thrift runtime CLI (BMv2's P4Runtime server cannot write registers)."""
        if self._switch is None:
            raise RuntimeError("BMv2 target not started")
        if self._cli is None:
            self._cli = RuntimeCli(self._switch.cli_command())
        self._cli.run(f"register_write {name} {index} {value}")

    def stop(self) -> None:
        if self._cli is not None:
            self._cli.close()
            self._cli = None
        super().stop()

    name = "bmv2"
    label = "BMv2"
    prefix = "dpb"
    cannot_shape = None  # simple_switch_CLI set_queue_rate

    def unavailable(self) -> str | None:
        missing = missing_tools()
        if missing:
            return f"BMv2 target needs {', '.join(missing)} on PATH"
        return super().unavailable()

    def make_switch(self, grpc_addr: str) -> Bmv2Switch:
        try:
            p4info_path, json_path = committed_pipeline()
        except FileNotFoundError as exc:
            raise TargetUnavailable(str(exc)) from exc
        self._info = P4Info.load(p4info_path)
        self._device_config = json_path.read_bytes()
        return Bmv2Switch(
            self.switch_name,
            self.switch_intf,
            device_id=DEVICE_ID,
            grpc_addr=grpc_addr,
            thrift_port=free_port(),
            log_dir=self.workdir,
            log_level="debug",
        )

    def configure(self, switch: Bmv2Switch) -> None:
        """``set_queue_rate`` of every port of ``port_rates`` (all its priority queues)."""
        if not self.port_rates:
            return
        commands = [
            command
            for port, rate in sorted(self.port_rates.items())
            for command in port_queue_commands(port, rate, None, switch.frame_mtu)
        ]
        switch.run_cli(commands, f"could not shape the ports ({'; '.join(commands)})")
