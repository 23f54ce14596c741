"""The BMv2 data-plane target: simple_switch_grpc on veth pairs, driven over P4Runtime.

For every data-plane port ``n`` a veth pair is made: ``dpb<id>s<n>`` stays in the root namespace
and is given to BMv2 as port ``n``; its peer ``dpb<id>t<n>`` goes into the namespace
``dpb<id>``, where the test sends and receives with AF_PACKET sockets. The pipeline is the
program compiled by p4c (:func:`controller.bmv2.p4_build`), pushed with
:class:`controller.client.SwitchClient` together with p4c's P4Info. ``port_rates`` are set once
the switch is up with ``set_queue_rate`` through its Thrift runtime CLI, in packets per second
(:func:`controller.bmv2.queue_rate_pps`: the bit rate as if every frame were full size).
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from p4.v1 import p4runtime_pb2 as p4r

from controller.bmv2 import Bmv2Switch, ToolMissing, missing_tools, p4_build, queue_rate_pps
from controller.client import SwitchClient
from controller.p4info import P4Info

from .netns import NetnsLab, PacketPort, netns_available
from .target import DataplaneTarget, TargetUnavailable, instance_tag


def _free_tcp_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Bmv2Target(DataplaneTarget):
    """One BMv2 switch with a veth pair per data-plane port."""

    name = "bmv2"
    cannot_shape = None  # simple_switch_CLI set_queue_rate

    def __init__(
        self, ports: Sequence[int], workdir: Path, port_rates: Mapping[int, int] | None = None
    ) -> None:
        super().__init__(ports, workdir, port_rates)
        tag = instance_tag()
        self.netns = f"dpb{tag}"
        self.switch_intf = {p: f"dpb{tag}s{p}" for p in self.ports}
        self.test_intf = {p: f"dpb{tag}t{p}" for p in self.ports}
        self._lab = NetnsLab()
        self._switch: Bmv2Switch | None = None
        self._client: SwitchClient | None = None
        self._info: P4Info | None = None
        self._sockets: dict[int, PacketPort] = {}
        self._installed: list[Any] = []
        self._defaults_changed: dict[int, Any] = {}  # table id -> original default entry

    @property
    def p4info(self) -> P4Info:
        if self._info is None:
            raise RuntimeError("BMv2 target not started")
        return self._info

    def start(self) -> None:
        missing = missing_tools()
        if missing:
            raise TargetUnavailable(f"BMv2 target needs {', '.join(missing)} on PATH")
        why = netns_available()
        if why:
            raise TargetUnavailable(f"BMv2 target {why}")
        try:
            p4info_path, json_path = p4_build()
        except ToolMissing as exc:
            raise TargetUnavailable(str(exc)) from exc
        self._info = P4Info.load(p4info_path)
        try:
            self._lab.add_netns(self.netns)
            for port in self.ports:
                self._lab.add_veth(self.switch_intf[port], self.test_intf[port], b_netns=self.netns)
                self._sockets[port] = PacketPort(self.test_intf[port], self.netns)
            grpc_addr = f"127.0.0.1:{_free_tcp_port()}"
            self._switch = Bmv2Switch(
                "dpb-switch",
                self.switch_intf,
                device_id=1,
                grpc_addr=grpc_addr,
                thrift_port=_free_tcp_port(),
                log_dir=self.workdir,
                log_level="debug",
            )
            self._switch.start()
            self._switch.wait_ready(timeout=30.0)
            self._shape(self._switch)
            self._client = SwitchClient(grpc_addr, device_id=1, name="dpb-switch")
            self._client.connect()
            self._client.set_pipeline(self._info, device_config=json_path.read_bytes())
        except BaseException:
            self.stop()
            raise

    def _shape(self, switch: Bmv2Switch) -> None:
        """``set_queue_rate`` of every port of ``port_rates`` (all its priority queues)."""
        if not self.port_rates:
            return
        commands = [
            f"set_queue_rate {queue_rate_pps(rate, switch.mtu)} {port}"
            for port, rate in sorted(self.port_rates.items())
        ]
        result = subprocess.run(
            switch.cli_command(),
            input="\n".join(commands) + "\n",
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        output = result.stdout + result.stderr
        bad = [line for line in output.splitlines() if "Error" in line or "Invalid" in line]
        if result.returncode != 0 or bad:
            raise RuntimeError(
                f"BMv2 target: {' '.join(switch.cli_command())} could not shape the ports "
                f"({'; '.join(commands)}): {'; '.join(bad) or f'status {result.returncode}'}"
            )

    def _require(self) -> SwitchClient:
        if self._client is None:
            raise RuntimeError("BMv2 target not started")
        return self._client

    def install(self, entries: Sequence[Any], defaults: Sequence[Any] = ()) -> None:
        client = self._require()
        if self._installed:
            client.delete(self._installed)
            self._installed = []
        wanted = {int(d.table_id): d for d in defaults}
        for table_id, original in list(self._defaults_changed.items()):
            if table_id not in wanted:
                client.write([_update(p4r.Update.MODIFY, original)])
                del self._defaults_changed[table_id]
        for table_id, entry in wanted.items():
            if table_id not in self._defaults_changed:
                table = next(t.preamble.name for t in self.p4info.proto.tables
                             if t.preamble.id == table_id)  # fmt: skip
                self._defaults_changed[table_id] = client.read_default_entry(table)
            client.write([_update(p4r.Update.MODIFY, entry)])
        if entries:
            client.insert(list(entries))
            self._installed = list(entries)

    def send(self, port: int, frame: bytes) -> None:
        self._sockets[port].send(frame)

    def expect(self, port: int, timeout: float) -> bytes | None:
        return self._sockets[port].recv(timeout)

    def drain(self) -> None:
        for sock in self._sockets.values():
            sock.drain()

    def counters(self, name: str) -> dict[int, tuple[int, int]]:
        return self._require().read_counter(name)

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._switch is not None:
            self._switch.stop()
            self._switch = None
        for sock in self._sockets.values():
            sock.close()
        self._sockets.clear()
        self._lab.cleanup()


def _update(kind: Any, entry: Any) -> Any:
    update = p4r.Update()
    update.type = kind
    update.entity.table_entry.CopyFrom(entry)
    return update
