"""Scenario files: the YAML schema of an experiment, loading and validation.

A scenario says which fabric to build, what load to offer, with which transports, and which
faults to inject when::

    name: demo
    topology: small                # a shipped topology name, or a file relative to this one
    link_rate_mbps: auto           # optional: the topology's link rate, a rate, or auto
    reference_rate_mbps: 10        # with auto: the rate the times below are written for
    duration_s: 20                 # length of each transport's run
    transports: [mrc, single-path] # each transport runs the same workload and faults in turn
    workloads:
      - kind: permutation          # permutation | incast | all-to-all
        message_bytes: 256KiB
        total_bytes: 8MiB          # per flow
        start_s: 0.5
    faults:
      - {kind: link_down, at_s: 3, link: [t0-p0-r0, t1-p0-s0]}
      - {kind: link_up,   at_s: 8, link: [t0-p0-r0, t1-p0-s0]}

``link_rate_mbps: auto`` leaves the rate to the machine (:mod:`experiments.rate` picks it before
the run): the loaded scenario stands at ``reference_rate_mbps`` (else the topology's rate) with
:attr:`Scenario.auto_rate` set, and :meth:`Scenario.at_rate` moves it to the chosen rate with
its times scaled, so that it is the same experiment in the real fabric's time.

docs/experiments.md documents every field. :func:`load_scenario` returns an immutable
:class:`Scenario` checked against the fabric (hosts, switches and links must exist); every
error is a :class:`ScenarioError` naming the file, the field, the value and what was expected.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from experiments.faults import (
    FAULT_KINDS,
    EvAllow,
    EvDeny,
    Fault,
    LinkDown,
    LinkFlap,
    LinkUp,
    NicDown,
    NicUp,
    PlaneDown,
    PlaneUp,
    Step,
    SwitchReboot,
)
from experiments.jobs.collectives import KINDS as COLLECTIVE_KINDS
from experiments.jobs.collectives import Collective, Job
from host.transport.cc import CcProfile, CcProfileError
from host.transport.config import STACK_PROFILES, UET_PROFILE
from topologies import Fabric, Link, Topology, TopologyError, load_topology
from topologies.config import FieldError, read_yaml_file, shipped_topology
from topologies.operating import FABRIC_PROFILES

WORKLOAD_KINDS = ("permutation", "incast", "all-to-all")
# MRC agent policies (the host agent's transport variants) and the kernel baselines.
MRC_TRANSPORTS = ("mrc", "single-path", "ecmp", "spray-no-failover", "no-trim-nack")
KERNEL_TRANSPORTS = ("tcp", "mptcp")
TRANSPORTS = MRC_TRANSPORTS + KERNEL_TRANSPORTS
EV_FORMATS = ("srv6", "srv6+srh", "stev", "udp")
AUTO_RATE = "auto"  # link_rate_mbps: the highest rate this machine keeps faithful

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?\s*$", re.IGNORECASE)
_UNITS = {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
}


class ScenarioError(FieldError):
    """A scenario file or value that does not describe a runnable experiment."""


@dataclass(frozen=True)
class Workload:
    """Offered load: a set of flows, each sending ``total_bytes`` in ``message_bytes`` messages."""

    kind: str
    message_bytes: int
    total_bytes: int  # per flow
    start_s: float
    hosts: tuple[str, ...]  # the hosts taking part (all of the fabric's when not given)
    pairs: tuple[tuple[str, str], ...]  # the flows: (source, destination)
    receiver: str | None = None  # incast only
    senders: tuple[str, ...] = ()  # incast only
    seed: int = 1  # permutation only

    def flows(self) -> list[tuple[str, str]]:
        """The (source, destination) pairs of this workload, in a stable order."""
        return list(self.pairs)

    def message_sizes(self) -> list[int]:
        """The size of every message of one flow (``message_bytes``; the last one the rest)."""
        size, total = self.message_bytes, self.total_bytes
        return [min(size, total - k * size) for k in range(-(-total // size))]


@dataclass(frozen=True)
class Transport:
    """One transport run: ``kind`` is the transport, ``name`` its label in results."""

    name: str
    kind: str
    trimming: bool = True  # switches trim above their threshold (off: they drop)
    cc: CcProfile | None = None  # MRC transports: the agents' CC profile (None: the default)
    ev_format: str = "srv6"  # MRC transports: the EV format (srv6, srv6+srh, stev, udp)

    @property
    def is_kernel(self) -> bool:
        """True for the kernel TCP / MPTCP baselines."""
        return self.kind in KERNEL_TRANSPORTS


@dataclass(frozen=True)
class Scenario:
    """One experiment, validated against its fabric."""

    name: str
    description: str
    topology: Topology
    duration_s: float
    workloads: tuple[Workload, ...]
    transports: tuple[Transport, ...]
    faults: tuple[Fault, ...]
    sample_interval_s: float = 0.25
    trim_threshold: int | None = None  # packets; None: the controller's default
    ecn_threshold: int | None = None  # packets; None: the controller's default
    source: str = "<memory>"
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)
    base: Path = field(default=Path("."), compare=False)  # where a topology file is looked for
    #: MRC transports: the agents' rules (host.transport.config.STACK_PROFILES)
    stack_profile: str = UET_PROFILE
    #: a training job of collectives over ranks (None: the workloads' flows alone)
    job: Job | None = None
    #: run every transport once more without faults first (``T-baseline``), to compare steps
    baseline: bool = False
    #: ``link_rate_mbps: auto``: the machine picks the rate before the run (:meth:`at_rate`)
    auto_rate: bool = False

    def with_(self, **changes: Any) -> Scenario:
        """A copy with some fields of the scenario file changed (``link_rate_mbps=5``,
        ``faults=[f.as_dict() for f in ...]``), validated like a loaded file. A fixed
        ``link_rate_mbps`` replaces ``auto`` and its ``reference_rate_mbps`` (the times are
        kept as they are: :meth:`at_rate` scales them)."""
        data = {**self.raw, **changes}
        if data.get("link_rate_mbps") != AUTO_RATE and "reference_rate_mbps" not in changes:
            data.pop("reference_rate_mbps", None)
        return parse_scenario(data, self.source, self.base)

    def at_rate(self, rate_mbps: float) -> Scenario:
        """This scenario at the link rate ``rate_mbps`` (no longer ``auto``), every time in it
        (duration, sampling interval, starts, faults, the job's compute) scaled by the ratio
        of its present rate to ``rate_mbps``: the same bytes over the same base RTTs, so the
        same experiment in the real fabric's time."""
        k = self.topology.link_rate_mbps / rate_mbps
        scaled = scale_times(self.raw, k)
        scaled.pop("reference_rate_mbps", None)
        return self.with_(**{**scaled, "link_rate_mbps": rate_mbps})

    @property
    def fabric(self) -> Fabric:
        """The fabric of this scenario's topology (with any overrides applied)."""
        return Fabric(self.topology)

    def flows(self) -> list[tuple[int, str, str]]:
        """Every flow of every workload as (workload index, source, destination)."""
        return [(i, s, d) for i, w in enumerate(self.workloads) for s, d in w.flows()]

    def timeline(self) -> list[Step]:
        """Every fault's steps, in time order."""
        return sorted((s for f in self.faults for s in f.steps()), key=lambda s: s.t)


#: the fields of a scenario mapping that are times (seconds), by where they are; rates per
#: minute scale the other way
_TIMES = ("duration_s", "sample_interval_s")
_ITEM_TIMES = {
    "workloads": ("start_s",),
    "faults": ("at_s", "down_s", "until_s"),
}
_JOB_TIMES = ("start_s", "compute_s")
MIN_SAMPLE_INTERVAL_S = 0.05


def scale_times(raw: Mapping[str, Any], k: float) -> dict[str, Any]:
    """A scenario mapping with every time multiplied by ``k`` (``rate_per_min`` divided by
    it; the sampling interval no finer than :data:`MIN_SAMPLE_INTERVAL_S`). Values that are not
    numbers are left for :func:`parse_scenario` to refuse by name."""

    def times(item: Any, keys: Sequence[str]) -> Any:
        if not isinstance(item, Mapping):
            return item
        out = dict(item)
        for key in keys:
            if isinstance(out.get(key), (int, float)) and not isinstance(out[key], bool):
                out[key] = out[key] * k
        if isinstance(out.get("rate_per_min"), (int, float)):
            out["rate_per_min"] = out["rate_per_min"] / k
        return out

    data = times(raw, _TIMES)
    if isinstance(data.get("sample_interval_s"), float):
        data["sample_interval_s"] = max(data["sample_interval_s"], MIN_SAMPLE_INTERVAL_S)
    for key, keys in _ITEM_TIMES.items():
        if isinstance(data.get(key), list):
            data[key] = [times(item, keys) for item in data[key]]
    if "job" in data:
        data["job"] = times(data["job"], _JOB_TIMES)
    return data


def permutation(
    hosts: Sequence[str], seed: int, rack_of: Mapping[str, int] | None = None
) -> list[tuple[str, str]]:
    """A seeded derangement: every host sends to exactly one other host and receives from one.

    With ``rack_of``, a permutation whose flows all cross racks is preferred (the load then
    goes through the spines); the first of a bounded number of seeded shuffles that has that
    property is taken, else the last one tried.
    """
    if len(hosts) < 2:
        return []
    rng = random.Random(seed)
    order = list(hosts)
    pairs: list[tuple[str, str]] = []
    for _ in range(200):
        rng.shuffle(order)
        # A cyclic shift of a shuffled list is a derangement with no fixed point.
        pairs = [(order[i], order[(i + 1) % len(order)]) for i in range(len(order))]
        if rack_of is None or all(rack_of[a] != rack_of[b] for a, b in pairs):
            break
    index = {h: i for i, h in enumerate(hosts)}
    return sorted(pairs, key=lambda f: index[f[0]])


def parse_size(text: object) -> int:
    """Bytes from an integer or a string such as ``64KiB``, ``1.5MB``, ``4096``."""
    if isinstance(text, bool):
        raise ValueError("a size")
    if isinstance(text, int):
        if text < 0:
            raise ValueError("a size")
        return text
    if isinstance(text, str):
        m = _SIZE.match(text)
        if m:
            unit = (m.group(2) or "B").lower()
            return int(float(m.group(1)) * _UNITS[unit])
    raise ValueError("a size")


def _find_link(fabric: Fabric, a: str, b: str) -> Link | None:
    for link in fabric.links:
        if {link.a, link.b} == {a, b}:
            return link
    return None


class _Parser:
    """Validation helpers that name the file and the field in every error."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, field: str, value: object, expected: str) -> ScenarioError:
        return ScenarioError(self.source, field, value, expected)

    def mapping(self, field: str, value: object, allowed: Sequence[str]) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.fail(field, value, "a mapping")
        for key in value:
            if key not in allowed:
                where = f"{field}.{key}" if field != "<top>" else str(key)
                raise self.fail(where, value[key], f"one of the fields {sorted(allowed)}")
        return value

    def number(self, field: str, value: object, low: float = 0.0, strict: bool = False) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
            raise self.fail(field, value, "a number")
        if value < low or (strict and value == low):
            raise self.fail(field, value, f"a number {'>' if strict else '>='} {low:g}")
        return float(value)

    def integer(self, field: str, value: object, low: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise self.fail(field, value, f"an integer >= {low}")
        return value

    def size(self, field: str, value: object, low: int = 1) -> int:
        try:
            n = parse_size(value)
        except ValueError:
            raise self.fail(field, value, "a size in bytes (e.g. 4096, 64KiB, 8MiB)") from None
        if n < low:
            raise self.fail(field, value, f"a size of at least {low} bytes")
        return n

    def string(self, field: str, value: object) -> str:
        if not isinstance(value, str) or not value:
            raise self.fail(field, value, "a non-empty string")
        return value

    def choice(self, field: str, value: object, choices: Sequence[str]) -> str:
        if value not in choices:
            raise self.fail(field, value, f"one of {list(choices)}")
        return str(value)

    def host(self, field: str, value: object, fabric: Fabric) -> str:
        name = self.string(field, value)
        try:
            fabric.host(name)
        except KeyError as exc:
            raise self.fail(field, value, f"a host of the fabric ({exc.args[0]})") from None
        return name

    def hosts(self, field: str, value: object, fabric: Fabric) -> tuple[str, ...]:
        if not isinstance(value, list) or not value:
            raise self.fail(field, value, "a non-empty list of host names")
        names = tuple(self.host(f"{field}[{i}]", v, fabric) for i, v in enumerate(value))
        if len(set(names)) != len(names):
            raise self.fail(field, value, "host names without repetition")
        return names


_TOP = (
    "name",
    "description",
    "topology",
    "link_rate_mbps",
    "reference_rate_mbps",
    "link_delay_us",
    "link_latency_us",
    "nominal_rate_gbps",
    "fabric_profile",
    "cc",
    "stack_profile",
    "queue_depth",
    "trim_threshold",
    "ecn_threshold",
    "duration_s",
    "sample_interval_s",
    "workloads",
    "transports",
    "faults",
    "job",
    "baseline",
)
_JOB = ("ranks", "steps", "compute_s", "start_s", "collectives")
_COLLECTIVE = ("kind", "size")
_WORKLOAD = (
    "kind",
    "message_bytes",
    "total_bytes",
    "start_s",
    "hosts",
    "receiver",
    "senders",
    "seed",
)
_TRANSPORT = ("name", "transport", "trimming", "cc", "ev_format")


def _topology(p: _Parser, data: Mapping[str, Any], base: Path) -> Topology:
    ref = p.string("topology", data.get("topology", "small"))
    candidate = base / ref
    if not candidate.suffix and shipped_topology(ref).exists():
        path = shipped_topology(ref)
    elif candidate.exists():
        path = candidate
    else:
        raise p.fail(
            "topology",
            ref,
            "a shipped topology name (small, default) or a YAML file relative to the scenario",
        )
    try:
        topo = load_topology(path)
        changes: dict[str, Any] = {}
        link = dict(topo.as_dict()["link"])  # latency and delay only where the file gives them
        rate = data.get("link_rate_mbps")
        if rate == AUTO_RATE:
            if "reference_rate_mbps" in data:
                link["rate_mbps"] = p.number(
                    "reference_rate_mbps", data["reference_rate_mbps"], 0.0, strict=True
                )
        elif "reference_rate_mbps" in data:
            raise p.fail(
                "reference_rate_mbps", data["reference_rate_mbps"],
                f"no such field unless link_rate_mbps is {AUTO_RATE!r}",
            )  # fmt: skip
        elif isinstance(rate, str):
            raise p.fail("link_rate_mbps", rate, f"a number > 0 or {AUTO_RATE!r}")
        elif rate is not None:
            link["rate_mbps"] = p.number("link_rate_mbps", rate, 0.0, strict=True)
        if "link_delay_us" in data:  # emulated
            link.pop("latency_us", None)
            link["delay_us"] = p.number("link_delay_us", data["link_delay_us"])
        if "link_latency_us" in data:  # real
            link.pop("delay_us", None)
            link["latency_us"] = p.number("link_latency_us", data["link_latency_us"])
        # the switches' operating point: fabric_profile, else the stack profile's name
        profile = data.get("fabric_profile", data.get("stack_profile"))
        if profile is not None:
            key = "fabric_profile" if "fabric_profile" in data else "stack_profile"
            changes["profile"] = p.choice(key, profile, list(FABRIC_PROFILES))
        if "nominal_rate_gbps" in data:
            link["nominal_rate_gbps"] = p.number(
                "nominal_rate_gbps", data["nominal_rate_gbps"], 0.0, strict=True
            )
        changes["link"] = link
        if "queue_depth" in data:
            changes["switch"] = {"queue_depth": p.integer("queue_depth", data["queue_depth"], 1)}
        return topo.with_(**changes)
    except TopologyError as exc:
        raise p.fail("topology", ref, f"a valid topology ({exc})") from None


def _workload(p: _Parser, i: int, value: object, fabric: Fabric) -> Workload:
    f = f"workloads[{i}]"
    w = p.mapping(f, value, _WORKLOAD)
    kind = p.choice(f"{f}.kind", w.get("kind"), WORKLOAD_KINDS)
    message = p.size(f"{f}.message_bytes", w.get("message_bytes", "256KiB"))
    total = p.size(f"{f}.total_bytes", w.get("total_bytes", message))
    if total < message:
        raise p.fail(
            f"{f}.total_bytes", w.get("total_bytes"), f"at least message_bytes ({message} bytes)"
        )
    start = p.number(f"{f}.start_s", w.get("start_s", 0.0))
    all_hosts = tuple(h.name for h in fabric.hosts)
    hosts = p.hosts(f"{f}.hosts", w["hosts"], fabric) if "hosts" in w else all_hosts
    seed = p.integer(f"{f}.seed", w.get("seed", 1), 0)
    receiver: str | None = None
    senders: tuple[str, ...] = ()
    if kind == "incast":
        receiver = p.host(f"{f}.receiver", w.get("receiver"), fabric)
        raw = w.get("senders")
        if isinstance(raw, int) and not isinstance(raw, bool):
            others = [h for h in all_hosts if h != receiver]
            if not 1 <= raw <= len(others):
                raise p.fail(f"{f}.senders", raw, f"a count between 1 and {len(others)}")
            senders = tuple(others[:raw])
        else:
            senders = p.hosts(f"{f}.senders", raw, fabric)
        if receiver in senders:
            raise p.fail(f"{f}.senders", list(senders), f"hosts other than the receiver {receiver}")
        pairs = [(s, receiver) for s in senders]
    else:
        for key in ("receiver", "senders"):
            if key in w:
                raise p.fail(f"{f}.{key}", w[key], "no such field outside 'incast' workloads")
        if len(hosts) < 2:
            raise p.fail(f"{f}.hosts", list(hosts), "at least two hosts")
        if kind == "all-to-all":
            pairs = [(a, b) for a in hosts for b in hosts if a != b]
        else:
            pairs = permutation(hosts, seed, {h.name: h.rack for h in fabric.hosts})
    return Workload(kind, message, total, start, hosts, tuple(pairs), receiver, senders, seed)


def _job(p: _Parser, value: object, fabric: Fabric, duration: float) -> Job:
    """A training job: ranks (hosts, default all), steps, compute time, collectives."""
    d = p.mapping("job", value, _JOB)
    all_hosts = tuple(h.name for h in fabric.hosts)
    ranks = p.hosts("job.ranks", d["ranks"], fabric) if "ranks" in d else all_hosts
    if len(ranks) < 2:
        raise p.fail("job.ranks", list(ranks), "at least two hosts")
    raw = d.get("collectives")
    if not isinstance(raw, list) or not raw:
        raise p.fail("job.collectives", raw, "a non-empty list of collectives")
    collectives = []
    for i, c in enumerate(raw):
        f = f"job.collectives[{i}]"
        m = p.mapping(f, c, _COLLECTIVE)
        kind = p.choice(f"{f}.kind", m.get("kind"), COLLECTIVE_KINDS)
        collectives.append(Collective(kind, p.size(f"{f}.size", m.get("size"))))
    start = p.number("job.start_s", d.get("start_s", 0.0))
    if start >= duration:
        raise p.fail("job.start_s", start, f"a time before duration_s ({duration:g} s)")
    return Job(
        tuple(ranks),
        tuple(collectives),
        steps=p.integer("job.steps", d.get("steps", 10), 1),
        compute_s=p.number("job.compute_s", d.get("compute_s", 0.0)),
        start_s=start,
    )


def _cc(p: _Parser, field: str, value: object, mtu: int) -> CcProfile:
    """A CC profile: ``{algorithm: nscc, config: {mrc_ctl_cc_nscc_cfg fields}}``."""
    try:
        return CcProfile.from_dict(value, mtu=mtu)
    except CcProfileError as exc:
        at = field if exc.field == "cc" else f"{field}.{exc.field}"
        raise p.fail(at, value, f"a CC profile ({exc})") from None


def _transport(
    p: _Parser, i: int, value: object, default_cc: CcProfile | None, mtu: int
) -> Transport:
    f = f"transports[{i}]"
    if isinstance(value, str):
        kind = p.choice(f, value, TRANSPORTS)
        return Transport(value, kind, cc=None if kind in KERNEL_TRANSPORTS else default_cc)
    t = p.mapping(f, value, _TRANSPORT)
    kind = p.choice(f"{f}.transport", t.get("transport"), TRANSPORTS)
    name = p.string(f"{f}.name", t.get("name", kind))
    trimming = t.get("trimming", True)
    if not isinstance(trimming, bool):
        raise p.fail(f"{f}.trimming", trimming, "true or false")
    cc = _cc(p, f"{f}.cc", t["cc"], mtu) if "cc" in t else default_cc
    if cc is not None and kind in KERNEL_TRANSPORTS:
        raise p.fail(f"{f}.cc", t.get("cc"), f"no CC profile: {kind} is a kernel transport")
    ev_format = p.choice(f"{f}.ev_format", str(t.get("ev_format", "srv6")).lower(), EV_FORMATS)
    if "ev_format" in t and kind in KERNEL_TRANSPORTS:
        raise p.fail(
            f"{f}.ev_format", t["ev_format"], f"no EV format: {kind} is a kernel transport"
        )
    return Transport(name, kind, trimming, cc, ev_format)


_FaultArgs = tuple[_Parser, str, Mapping[str, Any], float, Fabric, float]


def _link_of(p: _Parser, f: str, d: Mapping[str, Any], fabric: Fabric) -> tuple[str, str]:
    raw = d.get("link")
    if not (isinstance(raw, list) and len(raw) == 2 and all(isinstance(x, str) for x in raw)):
        raise p.fail(f"{f}.link", raw, "the two node names of a link, e.g. [t0-p0-r0, t1-p0-s0]")
    if _find_link(fabric, raw[0], raw[1]) is None:
        raise p.fail(f"{f}.link", raw, "two nodes joined by a link of the fabric")
    return (raw[0], raw[1])


def _plane_of(p: _Parser, f: str, d: Mapping[str, Any], fabric: Fabric) -> int:
    planes = fabric.topology.planes
    plane = p.integer(f"{f}.plane", d.get("plane"), 0)
    if plane >= planes:
        raise p.fail(f"{f}.plane", plane, f"a plane of the fabric (0..{planes - 1})")
    return plane


def _link_fault(make: Callable[[float, tuple[str, str]], Fault]) -> Callable[[_FaultArgs], Fault]:
    def build(a: _FaultArgs) -> Fault:
        p, f, d, at, fabric, _ = a
        return make(at, _link_of(p, f, d, fabric))

    return build


def _flap(a: _FaultArgs) -> Fault:
    p, f, d, at, fabric, duration = a
    link = _link_of(p, f, d, fabric)
    rate = p.number(f"{f}.rate_per_min", d.get("rate_per_min"), 0.0, strict=True)
    down = p.number(f"{f}.down_s", d.get("down_s", 1.0), 0.0, strict=True)
    until = p.number(f"{f}.until_s", d.get("until_s", duration))
    if until <= at:
        raise p.fail(f"{f}.until_s", until, f"a time after at_s ({at:g})")
    if down >= 60.0 / rate:
        raise p.fail(
            f"{f}.down_s", down, f"less than the flap period 60/rate_per_min ({60.0 / rate:g} s)"
        )
    return LinkFlap(at, link, rate, down, until)


def _reboot(a: _FaultArgs) -> Fault:
    p, f, d, at, fabric, _ = a
    name = p.string(f"{f}.switch", d.get("switch"))
    try:
        fabric.switch(name)
    except KeyError as exc:
        raise p.fail(f"{f}.switch", name, f"a switch of the fabric ({exc.args[0]})") from None
    return SwitchReboot(at, (name,), p.number(f"{f}.down_s", d.get("down_s", 1.0)))


def _nic_fault(
    make: Callable[[float, tuple[str, str], str, int], Fault],
) -> Callable[[_FaultArgs], Fault]:
    def build(a: _FaultArgs) -> Fault:
        p, f, d, at, fabric, _ = a
        plane = _plane_of(p, f, d, fabric)
        host = p.host(f"{f}.host", d.get("host"), fabric)
        return make(at, (host, fabric.host(host).nic(plane).switch), host, plane)

    return build


def _plane_fault(
    make: Callable[[float, tuple[str, ...], int], Fault],
) -> Callable[[_FaultArgs], Fault]:
    def build(a: _FaultArgs) -> Fault:
        p, f, d, at, fabric, _ = a
        plane = _plane_of(p, f, d, fabric)
        spines = range(fabric.topology.spines_per_plane)
        return make(at, tuple(fabric.t1_name(plane, s) for s in spines), plane)

    return build


def _ev_fault(make: type[EvDeny] | type[EvAllow]) -> Callable[[_FaultArgs], Fault]:
    def build(a: _FaultArgs) -> Fault:
        p, f, d, at, fabric, _ = a
        host = p.host(f"{f}.host", d.get("host"), fabric)
        peer = p.host(f"{f}.peer", d.get("peer"), fabric)
        if peer == host:
            raise p.fail(f"{f}.peer", peer, f"another host than {host}")
        path, ev = d.get("path"), d.get("ev")
        if (path is None) == (ev is None):
            raise p.fail(f"{f}.path", path, "exactly one of path (a label such as p0-s1) and ev")
        if ev is not None:
            return make(at, host, peer, ev=p.integer(f"{f}.ev", ev, 0))
        path = p.string(f"{f}.path", path)
        labels = {x.label for x in fabric.paths(host, peer)}
        labels |= {f"p{x}-ecmp" for x in range(fabric.topology.planes)}
        if path not in labels:
            raise p.fail(f"{f}.path", path, f"a path label of {host} -> {peer} "
                         f"({', '.join(sorted(labels))})")  # fmt: skip
        return make(at, host, peer, path=path)

    return build


#: per fault kind: the fields it takes besides ``kind`` and ``at_s``, and its builder
_FAULTS: dict[str, tuple[tuple[str, ...], Callable[[_FaultArgs], Fault]]] = {
    "link_down": (("link",), _link_fault(LinkDown)),
    "link_up": (("link",), _link_fault(LinkUp)),
    "link_flap": (("link", "rate_per_min", "down_s", "until_s"), _flap),
    "switch_reboot": (("switch", "down_s"), _reboot),
    "nic_down": (("host", "plane"), _nic_fault(NicDown)),
    "nic_up": (("host", "plane"), _nic_fault(NicUp)),
    "plane_down": (("plane",), _plane_fault(PlaneDown)),
    "plane_up": (("plane",), _plane_fault(PlaneUp)),
    "ev_deny": (("host", "peer", "path", "ev"), _ev_fault(EvDeny)),
    "ev_allow": (("host", "peer", "path", "ev"), _ev_fault(EvAllow)),
}
_FAULT = ("kind", "at_s", *sorted({name for fields, _ in _FAULTS.values() for name in fields}))


def _fault(p: _Parser, i: int, value: object, fabric: Fabric, duration: float) -> Fault:
    """One fault as its kind's class; a field the kind does not take is refused by name."""
    f = f"faults[{i}]"
    d = p.mapping(f, value, _FAULT)
    kind = p.choice(f"{f}.kind", d.get("kind"), FAULT_KINDS)
    fields, build = _FAULTS[kind]
    for name in d:
        if name not in ("kind", "at_s", *fields):
            raise p.fail(f"{f}.{name}", d[name], f"no such field for {kind}")
    at = p.number(f"{f}.at_s", d.get("at_s"))
    if at > duration:
        raise p.fail(f"{f}.at_s", at, f"a time within duration_s ({duration:g} s)")
    return build((p, f, d, at, fabric, duration))


def parse_scenario(data: object, source: str = "<memory>", base: Path | None = None) -> Scenario:
    """Validate a scenario mapping (as loaded from YAML) and return a :class:`Scenario`."""
    p = _Parser(source)
    d = p.mapping("<top>", data, _TOP)
    name = p.string("name", d.get("name", "scenario"))
    description = d.get("description", "")
    if not isinstance(description, str):
        raise p.fail("description", description, "a string")
    base = base or Path(".")
    topo = _topology(p, d, base)
    fabric = Fabric(topo)
    duration = p.number("duration_s", d.get("duration_s"), 0.0, strict=True)
    interval = p.number("sample_interval_s", d.get("sample_interval_s", 0.25), 0.05)

    job = _job(p, d["job"], fabric, duration) if "job" in d else None
    raw_workloads = d.get("workloads", [] if job is not None else None)
    if not isinstance(raw_workloads, list) or not (raw_workloads or job):
        raise p.fail("workloads", raw_workloads, "a non-empty list of workloads (or a job)")
    baseline = d.get("baseline", False)
    if not isinstance(baseline, bool):
        raise p.fail("baseline", baseline, "true or false")
    workloads = tuple(_workload(p, i, w, fabric) for i, w in enumerate(raw_workloads))
    for i, w in enumerate(workloads):
        if w.start_s >= duration:
            raise p.fail(
                f"workloads[{i}].start_s", w.start_s, f"a time before duration_s ({duration:g} s)"
            )

    raw_transports = d.get("transports", ["mrc"])
    if not isinstance(raw_transports, list) or not raw_transports:
        raise p.fail("transports", raw_transports, "a non-empty list of transports")
    default_cc = _cc(p, "cc", d["cc"], topo.mtu) if "cc" in d else None
    stack_profile = p.choice(
        "stack_profile", d.get("stack_profile", UET_PROFILE), list(STACK_PROFILES)
    )
    transports = tuple(
        _transport(p, i, t, default_cc, topo.mtu) for i, t in enumerate(raw_transports)
    )
    names = [t.name for t in transports]
    if len(set(names)) != len(names):
        raise p.fail("transports", names, "distinct transport names (give each a 'name')")

    raw_faults = d.get("faults", [])
    if not isinstance(raw_faults, list):
        raise p.fail("faults", raw_faults, "a list of faults")
    faults = tuple(_fault(p, i, f, fabric, duration) for i, f in enumerate(raw_faults))
    thresholds: list[int | None] = []
    for key in ("trim_threshold", "ecn_threshold"):
        value = d.get(key)
        if value is not None:
            value = p.integer(key, value, 0)
            if value > topo.queue_depth:
                raise p.fail(key, value, f"at most the queue depth ({topo.queue_depth} packets)")
        thresholds.append(value)
    return Scenario(
        name,
        description,
        topo,
        duration,
        workloads,
        transports,
        faults,
        interval,
        thresholds[0],
        thresholds[1],
        source,
        dict(d),
        base,
        stack_profile=stack_profile,
        job=job,
        baseline=baseline,
        auto_rate=d.get("link_rate_mbps") == AUTO_RATE,
    )


def load_scenario(path: str | Path) -> Scenario:
    """Load and validate a scenario file."""
    path = Path(path)
    return parse_scenario(read_yaml_file(path, "scenario", ScenarioError), str(path), path.parent)


def shipped_scenario(name: str) -> Path:
    """Path of a scenario shipped in experiments/scenarios (``demo``, ``incast``, ...)."""
    return Path(__file__).with_name("scenarios") / f"{name}.yaml"


__all__ = [
    "AUTO_RATE",
    "Fault",
    "Scenario",
    "ScenarioError",
    "Transport",
    "Workload",
    "load_scenario",
    "parse_scenario",
    "parse_size",
    "permutation",
    "scale_times",
    "shipped_scenario",
]
