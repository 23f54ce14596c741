"""Per-port trimming and ECN marking: the topology's defaults and persisted overrides.

Every switch port gets a ``MrcIngress.port_qos`` entry (:meth:`PortQos.action_params`). Two
ways of trimming and two of ECN marking, in packets of the port's data queue:

- trimming at a depth threshold (``trim_mode: threshold``), or only when the queue is full
  (``full``: the threshold is the queue's capacity, the UET reference simulator's behaviour);
- ECN at a fixed threshold (``ecn_mode: threshold``), or RED-like (``red``): no mark below
  ``ecn``, a probability rising linearly from 0 at ``ecn`` to ``ecn_pmax`` just below
  ``ecn_max``, every ECT packet from ``ecn_max`` on.

The default (:func:`default_qos`) is the topology's profile's (:mod:`topologies.operating`):

- ``uet`` (:func:`uet_qos`), UET's operating point derived from the fabric's bandwidth-delay
  product as its reference simulator derives it: the data queue holds 1 BDP and trims only
  when full, ECN is RED from 0.2 BDP (probability 0) to 0.8 BDP (probability 1 and above);
  each priority queue of the port holds 4 BDPs, so that trimmed headers, ACKs and NACKs
  find room (the reference queues them apart, in twice the data queue's bytes). The P4
  program decides ECN when a packet is *queued*, on the depth it finds (the reference decides
  when a packet leaves, on the depth behind it): a testbed choice, the same on BMv2 and the
  switchmodel. Small and default fabrics (100 Gb/s real, 1 us per link): a BDP of 28 frames,
  RED from 6 to 23 packets, trim at 28, priority queues of 112;
- ``testbed-2026`` (:func:`threshold_qos`), the earlier settings: trim at half the queue, mark
  ECN at a quarter (32 and 16 of 64 packets).

``mrc-ctl set-qos`` records overrides, per switch or per port, in a small JSON file kept next
to the testbed state file (:func:`overrides_path`), so that every later ``push`` and ``watch``
keeps them::

    {"t0-p0-r0": {"*": {"trim": 16, "ecn": 4}, "3": {"trim_mode": "full", "trim": 64,
                  "ecn_mode": "red", "ecn": 8, "ecn_max": 40, "ecn_pmax": 1.0}}}

``"*"`` applies to every port of the switch; a port number overrides it for that port.
:class:`QosOverrides` is immutable: :meth:`QosOverrides.with_override` returns a new one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from p4src.contract import QDEPTH_MAX, PortQosParams, params_of
from topologies import Topology
from topologies.operating import UET_PROFILE

ALL_PORTS = "*"
OVERRIDES_FILE = "qos-overrides.json"


class QosError(ValueError):
    """A threshold or an overrides file that cannot be used."""


TRIM_MODES = ("threshold", "full")
ECN_MODES = ("threshold", "red")
SLOPE_ONE = 1 << 16  # ecn_slope is a probability per packet of depth, in 1/65536
SLOPE_MAX = SLOPE_ONE - 1  # bit<16>


@dataclass(frozen=True)
class PortQos:
    """How one egress port trims and marks (depths in packets of its data queue).

    ``trim``: the trim threshold (``trim_mode`` threshold; 0 = always); with ``trim_mode``
    full, trimming starts when the queue is full and ``trim`` is ignored. ``ecn``: the fixed ECN
    threshold, or RED's lower one; ``ecn_max``: RED's upper one (``ecn_mode`` red only);
    ``ecn_pmax``: RED's marking probability just below ``ecn_max``.
    """

    trim: int
    ecn: int
    trim_mode: str = "threshold"
    ecn_mode: str = "threshold"
    ecn_max: int = 0
    ecn_pmax: float = 1.0

    def __post_init__(self) -> None:
        for name, value in (("trim", self.trim), ("ecn", self.ecn), ("ecn_max", self.ecn_max)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise QosError(f"{name} threshold {value!r}: expected an integer (packets)")
            if not 0 <= value <= QDEPTH_MAX:
                raise QosError(f"{name} threshold {value}: expected 0..{QDEPTH_MAX} packets")
        if self.trim_mode not in TRIM_MODES:
            raise QosError(f"trim_mode {self.trim_mode!r}: expected one of {', '.join(TRIM_MODES)}")
        if self.ecn_mode not in ECN_MODES:
            raise QosError(f"ecn_mode {self.ecn_mode!r}: expected one of {', '.join(ECN_MODES)}")
        if isinstance(self.ecn_pmax, bool) or not isinstance(self.ecn_pmax, (int, float)):
            raise QosError(f"ecn_pmax {self.ecn_pmax!r}: expected a probability 0..1")
        if not 0.0 <= self.ecn_pmax <= 1.0:
            raise QosError(f"ecn_pmax {self.ecn_pmax}: expected a probability 0..1")
        if self.ecn_mode == "red" and self.ecn_max <= self.ecn:
            raise QosError(
                f"ecn_max {self.ecn_max}: expected more than the ECN threshold {self.ecn} (red)"
            )

    def action_params(self, queue_depth: int, last_hop: bool = False) -> dict[str, Any]:
        """The ``set_port_qos`` parameters for a port whose data queue holds ``queue_depth``;
        ``last_hop``: the port faces a host (packets trimmed there carry DSCP 13)."""
        trim = queue_depth if self.trim_mode == "full" else self.trim
        if self.ecn_mode == "threshold":
            ecn_max, slope = self.ecn, 0
        else:
            ecn_max = self.ecn_max
            slope = min(SLOPE_MAX, round(SLOPE_ONE * self.ecn_pmax / (self.ecn_max - self.ecn)))
        return params_of(
            PortQosParams(min(trim, QDEPTH_MAX), self.ecn, ecn_max, slope, int(last_hop))
        )

    def with_(self, **changes: object) -> PortQos:
        """A copy with some fields changed (checked again)."""
        return replace(self, **changes)  # type: ignore[arg-type]

    def as_json(self) -> dict[str, object]:
        """The overrides-file form (fields at their defaults left out)."""
        data: dict[str, object] = {"trim": self.trim, "ecn": self.ecn}
        if self.trim_mode != "threshold":
            data["trim_mode"] = self.trim_mode
        if self.ecn_mode != "threshold":
            data.update(ecn_mode=self.ecn_mode, ecn_max=self.ecn_max, ecn_pmax=self.ecn_pmax)
        return data

    def describe(self) -> str:
        """One line for people: ``trim when full, ECN RED 12..51 (pmax 1)``."""
        trim = "trim when full" if self.trim_mode == "full" else f"trim {self.trim}"
        if self.ecn_mode == "red":
            return f"{trim}, ECN RED {self.ecn}..{self.ecn_max} (pmax {self.ecn_pmax:g})"
        return f"{trim}, ECN {self.ecn}"


QOS_FIELDS = frozenset({"trim", "ecn", "trim_mode", "ecn_mode", "ecn_max", "ecn_pmax"})


def default_qos(topology: Topology) -> PortQos:
    """The topology's profile's thresholds: :func:`uet_qos` (``uet``) or :func:`threshold_qos`
    (``testbed-2026``)."""
    return uet_qos(topology) if topology.profile == UET_PROFILE else threshold_qos(topology)


def uet_qos(topology: Topology) -> PortQos:
    """UET's operating point: trim only when the data queue (1 BDP) is full; ECN RED from
    0.2 BDP (probability 0) to 0.8 BDP (probability 1 and above), both within the data queue
    (:attr:`topologies.Topology.bdp_queue`). With the profile's queues (4 data queues deep)
    the trim threshold is the data queue's size; with a ``switch.queue_depth`` given, the
    queue's capacity (``full``)."""
    queue = topology.bdp_queue
    low = max(1, queue.ecn_low)
    full = queue.packets >= topology.queue_depth
    return PortQos(
        trim=topology.queue_depth if full else queue.packets,
        ecn=low,
        trim_mode="full" if full else "threshold",
        ecn_mode="red",
        ecn_max=max(low + 1, queue.ecn_high),
        ecn_pmax=1.0,
    )


def threshold_qos(topology: Topology) -> PortQos:
    """The fixed thresholds of ``testbed-2026``: trim at half the queue, mark ECN at a quarter."""
    depth = topology.queue_depth
    return PortQos(trim=max(1, depth // 2), ecn=max(1, depth // 4))


def operating_point(topology: Topology) -> dict[str, Any]:
    """The switches' operating point (JSON-ready): the profile, the BDP, the queue, the default
    thresholds and the per-link latency in real and emulated microseconds."""
    return {
        "profile": topology.profile,
        "bdp_packets": topology.bdp_packets,
        "queue_depth": topology.queue_depth,
        "qos": default_qos(topology).as_json(),
        "hop_latency_us": topology.hop_latency_us,
        "link_delay_us": topology.link_delay_us,
    }


def describe_operating_point(point: Mapping[str, Any]) -> str:
    """One line for people, from :func:`operating_point` and what applies the latency
    (``latency_by``)."""
    qos = PortQos(**point["qos"]).describe()
    latency = (
        f"{point['hop_latency_us']:g} us per link ({point['link_delay_us']:g} us emulated), "
        f"applied by {point.get('latency_by', 'none')}"
    )
    return (
        f"operating point {point['profile']}: BDP {point['bdp_packets']} packets, queues of "
        f"{point['queue_depth']}, {qos}; latency {latency}"
    )


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

    def as_json(self) -> dict[str, dict[str, dict[str, object]]]:
        """The JSON form written to the overrides file."""
        return {
            switch: {port: q.as_json() for port, q in ports.items()}
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
                if (
                    not isinstance(values, Mapping)
                    or not {"trim", "ecn"} <= set(values)
                    or not set(values) <= QOS_FIELDS
                ):
                    raise QosError(
                        f"{source}: '{switch}' port {port}: expected an object with trim and ecn "
                        f"and optionally {', '.join(sorted(QOS_FIELDS - {'trim', 'ecn'}))}"
                    )
                try:
                    qos = PortQos(**values)
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
