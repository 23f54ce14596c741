"""What the BMv2 and switchmodel targets share: a switch process on veth pairs, over P4Runtime.

For every data-plane port ``n`` a veth pair is made: ``<prefix><id>s<n>`` stays in the root
namespace and is given to the switch process as port ``n``; its peer ``<prefix><id>t<n>`` goes
into the namespace ``<prefix><id>``, where the test sends and receives with AF_PACKET sockets.
:class:`P4RuntimeTarget` owns the namespace, the sockets, the switch process and its
:class:`controller.client.SwitchClient`; a target says only how its switch is made
(:meth:`P4RuntimeTarget.make_switch`), what it needs to run at all
(:meth:`P4RuntimeTarget.unavailable`) and what to configure once the switch is up
(:meth:`P4RuntimeTarget.configure`). ``install`` reads a table's default entry before the
first change and writes it back when the default is no longer wanted (both targets serve
default-entry reads)::

    class ModelTarget(P4RuntimeTarget[ModelSwitch]):
        name, label, prefix = "model", "switchmodel", "smd"

        def make_switch(self, grpc_addr: str) -> ModelSwitch:
            return ModelSwitch(self.switch_name, self.switch_intf, device_id=1, ...)
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from controller.client import SwitchClient
from controller.p4info import P4Info
from p4src.proto import p4r
from targets.lab import NetnsLab, PacketPort, free_port, netns_available
from targets.process import SwitchProcess

from .target import DataplaneTarget, TargetUnavailable, instance_tag

DEVICE_ID = 1
START_TIMEOUT = 30.0

S = TypeVar("S", bound=SwitchProcess)


class Stoppable(Protocol):
    """A switch a target runs: it can be stopped."""

    def stop(self) -> None: ...


W = TypeVar("W", bound=Stoppable)


class P4RuntimeDriven(DataplaneTarget, Generic[W]):
    """What a target driven over P4Runtime does the same way whatever carries its frames: the
    :class:`controller.client.SwitchClient` session, installs that replace the previous one
    (defaults restored), registers, counters and stopping. A subclass's :meth:`start` sets
    :attr:`_info` and :attr:`_switch` and calls :meth:`connect`; :meth:`stop` closes the
    session, stops the switch and calls :meth:`release` for the rest."""

    #: how messages name the target ("BMv2", "switchmodel")
    label = "P4Runtime"

    def __init__(
        self, ports: Sequence[int], workdir: Path, port_rates: Mapping[int, int] | None = None
    ) -> None:
        super().__init__(ports, workdir, port_rates)
        self.switch_name = f"{self.name}-switch"
        self._switch: W | None = None
        self._client: SwitchClient | None = None
        self._info: P4Info | None = None
        self._installed: list[Any] = []
        self._defaults_changed: dict[int, Any] = {}  # table id -> the default entry it had

    @property
    def p4info(self) -> P4Info:
        if self._info is None:
            raise RuntimeError(f"{self.label} target not started")
        return self._info

    def connect(self, grpc_addr: str, device_config: bytes = b"") -> None:
        """Become the primary controller of the switch at ``grpc_addr`` and set the pipeline
        (:attr:`p4info`, and ``device_config`` if the switch needs one)."""
        self._client = SwitchClient(
            grpc_addr, device_id=DEVICE_ID, name=self.switch_name, p4info=self.p4info
        )
        self._client.connect()
        self._client.set_pipeline(self.p4info, device_config=device_config)

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        self._installed = []
        self._defaults_changed = {}
        if self._switch is not None:
            self._switch.stop()
            self._switch = None
        self.release()

    def release(self) -> None:  # noqa: B027 -- optional hook
        """Release what :meth:`start` made besides the switch (default: nothing)."""

    def _require_switch(self) -> W:
        if self._switch is None:
            raise RuntimeError(f"{self.label} target not started")
        return self._switch

    def _require(self) -> SwitchClient:
        if self._client is None:
            raise RuntimeError(f"{self.label} target not started")
        return self._client

    def install(self, entries: Sequence[Any], defaults: Sequence[Any] = ()) -> None:
        client = self._require()
        if self._installed:
            client.delete(list(reversed(self._installed)))  # groups after the entries using them
            self._installed = []
        wanted = {int(d.table_id): d for d in defaults}
        for table_id, original in list(self._defaults_changed.items()):
            if table_id not in wanted:
                client.modify([original])
                del self._defaults_changed[table_id]
        for table_id, entry in wanted.items():
            if table_id not in self._defaults_changed:
                self._defaults_changed[table_id] = self._default_entry(client, table_id)
            client.modify([entry])
        if entries:
            client.insert(list(entries))
            self._installed = list(entries)

    def _default_entry(self, client: SwitchClient, table_id: int) -> Any:
        """The default entry table ``table_id`` has now, to restore it later; if the switch
        returns none, the entry without an action (its MODIFY restores the program's default)."""
        current = client.read_default_entry(self.p4info.name_of(table_id))
        if current is None:
            return p4r.TableEntry(table_id=table_id, is_default_action=True)
        return current

    def set_register(self, name: str, index: int, value: int) -> None:
        self._require().write_register(name, index, value)

    def counters(self, name: str) -> dict[int, tuple[int, int]]:
        return self._require().read_counter(name)


class P4RuntimeTarget(P4RuntimeDriven[S]):
    """One switch process with a veth pair per data-plane port, driven over P4Runtime."""

    #: first letters of the namespace and interface names, unique to the target
    prefix = "p4rt"

    def __init__(
        self, ports: Sequence[int], workdir: Path, port_rates: Mapping[int, int] | None = None
    ) -> None:
        super().__init__(ports, workdir, port_rates)
        tag = instance_tag()
        self.netns = f"{self.prefix}{tag}"
        self.switch_name = f"{self.prefix}-switch"
        self.switch_intf = {p: f"{self.prefix}{tag}s{p}" for p in self.ports}
        self.test_intf = {p: f"{self.prefix}{tag}t{p}" for p in self.ports}
        self._lab = NetnsLab()
        self._device_config = b""  # set_pipeline's device config (BMv2: p4c's JSON)
        self._sockets: dict[int, PacketPort] = {}

    # -- what a target provides ------------------------------------------------------------

    def unavailable(self) -> str | None:
        """Why the target cannot run here (None when it can); checked first by :meth:`start`."""
        why = netns_available()
        return f"{self.label} target {why}" if why else None

    @abc.abstractmethod
    def make_switch(self, grpc_addr: str) -> S:
        """The switch process (not started) serving P4Runtime on ``grpc_addr`` with device id
        :data:`DEVICE_ID` and :attr:`switch_intf` as its ports. Sets :attr:`_info` (and
        :attr:`_device_config` if the target needs one) unless already set. May raise
        :class:`TargetUnavailable`."""

    def configure(self, switch: S) -> None:  # noqa: B027 -- optional hook
        """Configure the switch once it serves P4Runtime, before the pipeline (default: none)."""

    # -- DataplaneTarget -------------------------------------------------------------------

    def start(self) -> None:
        why = self.unavailable()
        if why:
            raise TargetUnavailable(why)
        try:
            self._lab.add_netns(self.netns)
            for port in self.ports:
                self._lab.add_veth(self.switch_intf[port], self.test_intf[port], b_netns=self.netns)
                self._sockets[port] = PacketPort(self.test_intf[port], self.netns)
            grpc_addr = f"127.0.0.1:{free_port()}"
            self._switch = self.make_switch(grpc_addr)
            self._switch.start()
            self._switch.wait_ready(timeout=START_TIMEOUT)
            self.configure(self._switch)
            self.connect(grpc_addr, self._device_config)
        except BaseException:
            self.stop()
            raise

    def send(self, port: int, frame: bytes) -> None:
        self._sockets[port].send(frame)

    def expect(self, port: int, timeout: float) -> bytes | None:
        return self._sockets[port].recv(timeout)

    def drain(self) -> None:
        for sock in self._sockets.values():
            sock.drain()

    def release(self) -> None:
        for sock in self._sockets.values():
            sock.close()
        self._sockets.clear()
        self._lab.cleanup()
