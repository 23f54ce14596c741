"""Per-port trimming and ECN thresholds: the topology's defaults and persisted overrides.

Every switch port gets a ``MrcIngress.port_qos`` entry with a trim threshold and an ECN threshold
(in packets). By default both follow from the topology's ``switch.queue_depth``
(:func:`default_qos`: trim at half the queue, mark ECN at a quarter, never below 1).
``mrc-ctl set-qos`` records overrides, per switch or per port, in a small JSON file kept next to
the testbed state file (:func:`overrides_path`), so that every later ``push`` and ``watch``
keeps them::

    {"t0-p0-r0": {"*": {"trim": 16, "ecn": 4}, "3": {"trim": 8, "ecn": 2}}}

``"*"`` applies to every port of the switch; a port number overrides it for that port.
:class:`QosOverrides` is immutable: :meth:`QosOverrides.with_override` returns a new one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from topologies import Topology

THRESHOLD_MAX = (1 << 19) - 1  # bit<19> action parameters
ALL_PORTS = "*"
OVERRIDES_FILE = "qos-overrides.json"


class QosError(ValueError):
    """A threshold or an overrides file that cannot be used."""


@dataclass(frozen=True)
class PortQos:
    """The thresholds of one egress port, in packets (0 = always trim/mark)."""

    trim: int
    ecn: int

    def __post_init__(self) -> None:
        for name, value in (("trim", self.trim), ("ecn", self.ecn)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise QosError(f"{name} threshold {value!r}: expected an integer (packets)")
            if not 0 <= value <= THRESHOLD_MAX:
                raise QosError(f"{name} threshold {value}: expected 0..{THRESHOLD_MAX} packets")


def default_qos(topology: Topology) -> PortQos:
    """Thresholds from the queue depth: trim at depth // 2, ECN at depth // 4 (each at least 1)."""
    depth = topology.queue_depth
    return PortQos(trim=max(1, depth // 2), ecn=max(1, depth // 4))


def overrides_path(state_path: Path) -> Path:
    """Where the overrides of the testbed whose state file is ``state_path`` are kept."""
    return state_path.with_name(OVERRIDES_FILE)


def _freeze(data: Mapping[str, Mapping[str, PortQos]]) -> Mapping[str, Mapping[str, PortQos]]:
    return MappingProxyType({k: MappingProxyType(dict(v)) for k, v in data.items()})


@dataclass(frozen=True)
class QosOverrides:
    """Threshold overrides: switch name -> (port number as text, or ``"*"``) -> thresholds."""

    switches: Mapping[str, Mapping[str, PortQos]] = field(
        default_factory=lambda: MappingProxyType({})
    )

    def lookup(self, switch: str, port: int) -> PortQos | None:
        """The override for ``port`` of ``switch`` (port-specific first), or None."""
        ports = self.switches.get(switch, {})
        return ports.get(str(port)) or ports.get(ALL_PORTS)

    def with_override(self, switch: str, port: int | None, qos: PortQos) -> QosOverrides:
        """A copy with ``qos`` set for one port (or, with ``port`` None, the whole switch)."""
        data = {k: dict(v) for k, v in self.switches.items()}
        ports = data.setdefault(switch, {})
        if port is None:
            ports.clear()  # a switch-wide setting replaces the per-port ones
            ports[ALL_PORTS] = qos
        else:
            ports[str(port)] = qos
        return QosOverrides(_freeze(data))

    def as_json(self) -> dict[str, dict[str, dict[str, int]]]:
        """The JSON form written to the overrides file."""
        return {
            switch: {port: {"trim": q.trim, "ecn": q.ecn} for port, q in ports.items()}
            for switch, ports in sorted(self.switches.items())
        }

    @classmethod
    def from_json(cls, data: object, source: str = "<memory>") -> QosOverrides:
        """Parse the JSON form; :class:`QosError` names the file and the bad item."""
        if not isinstance(data, Mapping):
            raise QosError(f"{source}: expected a JSON object of switch names")
        parsed: dict[str, dict[str, PortQos]] = {}
        for switch, ports in data.items():
            if not isinstance(ports, Mapping):
                raise QosError(f"{source}: '{switch}': expected an object of ports")
            for port, values in ports.items():
                if port != ALL_PORTS and not str(port).isdigit():
                    raise QosError(f"{source}: '{switch}' port {port!r}: expected a number or '*'")
                if not isinstance(values, Mapping) or set(values) != {"trim", "ecn"}:
                    raise QosError(
                        f'{source}: \'{switch}\' port {port}: expected {{"trim": N, "ecn": N}}'
                    )
                try:
                    qos = PortQos(trim=values["trim"], ecn=values["ecn"])
                except QosError as exc:
                    raise QosError(f"{source}: '{switch}' port {port}: {exc}") from None
                parsed.setdefault(str(switch), {})[str(port)] = qos
        return cls(_freeze(parsed))

    @classmethod
    def load(cls, path: Path) -> QosOverrides:
        """Read an overrides file; a missing file means no overrides."""
        try:
            text = path.read_text()
        except FileNotFoundError:
            return cls()
        except OSError as exc:
            raise QosError(f"{path}: cannot read the QoS overrides ({exc.strerror})") from None
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise QosError(f"{path}: not a JSON QoS overrides file ({exc})") from None
        return cls.from_json(data, str(path))

    def save(self, path: Path) -> Path:
        """Write the overrides file atomically; returns its path."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.as_json(), indent=2) + "\n")
        tmp.replace(path)
        return path
