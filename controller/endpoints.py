"""Which fabric the controller serves and where its switches are: state file or flags.

``mrc-ctl`` finds its switches in one of two ways:

- the running testbed's state file (:class:`targets.state.TestbedState`; default
  ``/run/mrc-testbed/state.json``, or ``$MRC_TESTBED_STATE``, or ``--state FILE``), which names
  the topology file, the target kind and every switch's gRPC address and device id;
- flags: ``--topo FILE --switch NAME=HOST:PORT ...`` (device ids from the fabric model) and
  ``--target model|bmv2``.

:func:`resolve` returns an immutable :class:`Endpoints`; every problem is an
:class:`EndpointsError` whose message says what was wrong and what to give instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from controller.push import SwitchAddress
from controller.qos import overrides_path
from targets.state import StateError, TestbedState, default_path
from topologies import Fabric, load_topology

TARGETS = ("model", "bmv2")
_TARGET_ALIASES = {"switchmodel": "model", "mrc-switch": "model", "simple_switch_grpc": "bmv2"}
REPO_ROOT = Path(__file__).resolve().parent.parent


class EndpointsError(RuntimeError):
    """The switches to talk to could not be determined (``usage``: because of bad flags)."""

    def __init__(self, message: str, usage: bool = False) -> None:
        super().__init__(message)
        self.usage = usage


@dataclass(frozen=True)
class Endpoints:
    """A fabric, its target kind and the switches to talk to."""

    fabric: Fabric
    target: str  # "model" (switchmodel) or "bmv2"
    switches: tuple[SwitchAddress, ...]
    overrides_path: Path

    def address_of(self, name: str) -> SwitchAddress:
        """The address of switch ``name``; a clear error when it is unknown."""
        for switch in self.switches:
            if switch.name == name:
                return switch
        self.fabric.switch(name)  # raises "no switch ... in fabric ..." for a bad name
        raise EndpointsError(
            f"no address for switch {name} (give --switch {name}=HOST:PORT, "
            "or start the testbed with 'mrc-testbed up')"
        )

    def select(self, names: Sequence[str]) -> tuple[SwitchAddress, ...]:
        """The named switches (all when ``names`` is empty), in the order given."""
        if not names:
            return self.switches
        return tuple(self.address_of(n) for n in names)


def parse_switch_flag(text: str) -> tuple[str, str]:
    """``NAME=HOST:PORT`` as (name, address)."""
    name, sep, address = text.partition("=")
    host, colon, port = address.rpartition(":")
    if not sep or not name or not colon or not host or not port.isdigit():
        raise EndpointsError(
            f"--switch {text!r}: expected NAME=HOST:PORT, e.g. t0-p0-r0=127.0.0.1:50001"
        )
    return name, address


def _find_topology(text: str, state_file: Path) -> Path:
    path = Path(text)
    if path.is_absolute() or path.exists():
        return path
    for base in (state_file.parent, REPO_ROOT):
        if (base / path).exists():
            return base / path
    return path


def resolve(
    topo: str | None = None,
    switch_flags: Sequence[str] = (),
    target: str | None = None,
    state: Path | None = None,
    overrides: Path | None = None,
) -> Endpoints:
    """Work out the fabric and switch addresses from flags, else from the state file.

    Raises :class:`EndpointsError` (or :class:`topologies.TopologyError` for a bad topology).
    """
    state_file = state or default_path()
    if target is not None and target not in TARGETS:
        raise EndpointsError(
            f"--target {target!r}: expected one of {', '.join(TARGETS)}", usage=True
        )
    flags = [parse_switch_flag(s) for s in switch_flags]
    if topo is not None:
        fabric = Fabric(load_topology(topo))
        addresses = dict(flags)
        if not flags and state_file.exists():
            try:
                loaded = TestbedState.load(state_file)
            except StateError as exc:
                raise EndpointsError(str(exc)) from None
            addresses = {k: v.grpc for k, v in loaded.switches.items()}
            target = target or _TARGET_ALIASES.get(loaded.target, loaded.target)
        switches = []
        for name, address in addresses.items():
            try:
                switch = fabric.switch(name)
            except KeyError as exc:
                raise EndpointsError(f"--switch {name}: {exc.args[0]}", usage=True) from None
            switches.append(SwitchAddress(name, address, switch.device_id))
        switches.sort(key=lambda s: fabric.switch(s.name).device_id)
        return Endpoints(
            fabric, target or "model", tuple(switches), overrides or overrides_path(state_file)
        )
    if flags:
        raise EndpointsError(
            "--switch needs --topo FILE (the fabric the switches belong to)", usage=True
        )
    try:
        loaded = TestbedState.load(state_file)
    except StateError as exc:
        raise EndpointsError(f"{exc}; or give --topo FILE for a dry run") from None
    fabric = Fabric(load_topology(_find_topology(loaded.topology, state_file)))
    switches = []
    for name, entry in loaded.switches.items():
        try:
            fabric.switch(name)
        except KeyError as exc:
            raise EndpointsError(f"{state_file}: {exc.args[0]}") from None
        switches.append(SwitchAddress(name, entry.grpc, entry.device_id))
    kind = target or _TARGET_ALIASES.get(loaded.target, loaded.target)
    if kind not in TARGETS:
        raise EndpointsError(f"{state_file}: target {kind!r}: expected one of {', '.join(TARGETS)}")
    return Endpoints(fabric, kind, tuple(switches), overrides or overrides_path(state_file))
