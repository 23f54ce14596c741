"""The switchmodel data-plane target: mrc-switch on veth pairs, driven over real P4Runtime.

For every data-plane port ``n`` a veth pair is made: ``smd<id>s<n>`` stays in the root namespace
and is given to ``mrc-switch`` (:class:`switchmodel.launcher.ModelSwitch`) as port ``n``; its
peer ``smd<id>t<n>`` goes into the namespace ``smd<id>``, where the test sends and receives with
AF_PACKET sockets. The pipeline is the committed P4Info, pushed with
:class:`controller.client.SwitchClient` (no device config: switchmodel implements the program
itself); entries and counters go over the same gRPC session. ``port_rates`` become
``--port-rate-bps-of PORT=BPS`` options: mrc-switch shapes those ports from the start.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from p4.v1 import p4runtime_pb2 as p4r

from controller.client import SwitchClient
from controller.p4info import P4Info
from switchmodel.launcher import ModelSwitch

from .netns import NetnsLab, PacketPort, netns_available
from .target import DataplaneTarget, TargetUnavailable, instance_tag


def _free_tcp_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ModelTarget(DataplaneTarget):
    """One mrc-switch with a veth pair per data-plane port."""

    name = "model"
    cannot_shape = None  # mrc-switch --port-rate-bps-of

    def __init__(
        self, ports: Sequence[int], workdir: Path, port_rates: Mapping[int, int] | None = None
    ) -> None:
        super().__init__(ports, workdir, port_rates)
        tag = instance_tag()
        self.netns = f"smd{tag}"
        self.switch_intf = {p: f"smd{tag}s{p}" for p in self.ports}
        self.test_intf = {p: f"smd{tag}t{p}" for p in self.ports}
        self._lab = NetnsLab()
        self._switch: ModelSwitch | None = None
        self._client: SwitchClient | None = None
        self._info = P4Info.load()
        self._sockets: dict[int, PacketPort] = {}
        self._installed: list[Any] = []
        self._defaults: set[int] = set()  # tables whose default entry was changed

    @property
    def p4info(self) -> P4Info:
        return self._info

    def start(self) -> None:
        why = netns_available()
        if why:
            raise TargetUnavailable(f"switchmodel target {why}")
        try:
            self._lab.add_netns(self.netns)
            for port in self.ports:
                self._lab.add_veth(self.switch_intf[port], self.test_intf[port], b_netns=self.netns)
                self._sockets[port] = PacketPort(self.test_intf[port], self.netns)
            grpc_addr = f"127.0.0.1:{_free_tcp_port()}"
            self._switch = ModelSwitch(
                "smd-switch",
                self.switch_intf,
                device_id=1,
                grpc_addr=grpc_addr,
                log_dir=self.workdir,
                log_level="debug",  # every frame sent is logged: port, priority, queue depth
                port_rates=self.port_rates,
            )
            self._switch.start()
            self._switch.wait_ready(timeout=30.0)
            self._client = SwitchClient(
                grpc_addr, device_id=1, name="smd-switch", p4info=self._info
            )
            self._client.connect()
            self._client.set_pipeline(self._info)
        except BaseException:
            self.stop()
            raise

    def _require(self) -> SwitchClient:
        if self._client is None:
            raise RuntimeError("switchmodel target not started")
        return self._client

    def install(self, entries: Sequence[Any], defaults: Sequence[Any] = ()) -> None:
        client = self._require()
        if self._installed:
            client.delete(self._installed)
            self._installed = []
        wanted = {int(d.table_id): d for d in defaults}
        for table_id in sorted(self._defaults - set(wanted)):
            # MODIFY of a default entry without an action restores the program's default
            reset = p4r.TableEntry(table_id=table_id, is_default_action=True)
            client.write([_update(p4r.Update.MODIFY, reset)])
            self._defaults.discard(table_id)
        for table_id, entry in wanted.items():
            client.write([_update(p4r.Update.MODIFY, entry)])
            self._defaults.add(table_id)
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
