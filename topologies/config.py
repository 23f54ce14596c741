"""Topology files: schema, loading and validation.

A topology file describes one two-tier multi-plane fabric::

    name: small
    planes: 2              # disjoint networks; every host has one NIC per plane
    racks: 2               # one T0 (leaf) per rack per plane
    spines_per_plane: 2    # T1 switches per plane; every T0 links to every T1 of its plane
    hosts_per_rack: 2
    profile: uet           # the switches' operating point (topologies.operating): uet or
                           # testbed-2026
    link:
      rate_mbps: 100       # every link, shaped inside the switch (the emulated rate)
      nominal_rate_gbps: 100  # the rate of the real fabric the emulation stands for
      latency_us: 1        # one-way latency of every link in the real fabric (uet: 1)
      # delay_us: 50       # or: one-way delay of every link, emulated (testbed-2026: 50)
    switch:
      queue_depth: 28      # packets per priority queue (uet: 4 x 1 BDP; testbed-2026: 64)
    mtu: 4096              # MRC payload bytes per packet (RDMA-sized)
    usid_block: fcbb:bb00::/32

Left out, ``latency_us``, ``delay_us`` and ``queue_depth`` are the profile's: with ``uet`` a
latency of 1 us per link (:data:`~topologies.operating.HOP_LATENCY_US`), dilated for the
emulation, and a data queue of one bandwidth-delay product (:attr:`Topology.bdp_queue`) in
queues of four times that (:attr:`Topology.queue_depth`); with
``testbed-2026`` 50 us of emulated delay and 64 packets.

:func:`load_topology` returns an immutable :class:`Topology`; every error raised is a
:class:`TopologyError` that names the file, the field, the value and what was expected.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from topologies.operating import (
    HOP_LATENCY_US,
    LEGACY_DELAY_US,
    LEGACY_QUEUE_DEPTH,
    UET_PROFILE,
    UET_QUEUE_FACTOR,
    BdpQueue,
    bdp_packets,
    bdp_queue,
    check_profile,
    header_queue_depth,
    unloaded_rtt,
)

# The uSID encoding (see topologies.usid) leaves 4 bits for the plane and 10 for the index.
MAX_PLANES = 16
MAX_INDEX = 1 << 10
# Linux interface names hold at most 15 characters.
IFNAME_MAX = 15
# Bytes an MRC data packet carries besides its payload, up to the end of the MRC extension:
# Ethernet 14 + IPv6 40 + SRH with 4 segments 72 + UDP 8 + BTH 12 + RETH 16 + ImmDt 4 + ext 24.
MAX_HEADER_BYTES = 14 + 40 + 8 + 4 * 16 + 8 + 12 + 16 + 4 + 24
MAX_LINK_MTU = 9500
CONTROL_FRAME_BYTES = 128  # an ACK, NACK or probe frame of the host stack, rounded up


def control_queue_depth(depth: int, link_mtu: int) -> int:
    """Packets of :data:`CONTROL_FRAME_BYTES` a port's high-priority queue holds beside a data
    queue of ``depth`` full frames on links of ``link_mtu``: the reference's bytes
    (:func:`topologies.operating.header_queue_depth`), on every target."""
    return header_queue_depth(depth, link_mtu + 14, CONTROL_FRAME_BYTES)


BASE_RTT_LINKS = 4  # links a packet crosses between racks: NIC, leaf, spine, leaf, NIC
RACK_LINKS = 2  # links a packet crosses within a rack: NIC, leaf, NIC
BASE_RTT_SWITCHES = 3  # switches on that path: leaf, spine, leaf


def path_rtt(base_rtt: float, links: int) -> float:
    """The unloaded RTT of a path of ``links`` links each way, given ``base_rtt``, the one
    between racks (:data:`BASE_RTT_LINKS`): every link adds the same to it, a frame and its
    ACK serialised and its delay both ways (:attr:`Topology.base_rtt`)."""
    return base_rtt * links / BASE_RTT_LINKS


class FieldError(ValueError):
    """A file or value with a field at fault: names the file, the field, the value and what
    was expected. ``field`` is ``<file>``, ``<yaml>`` or ``<top>`` for the file as a whole."""

    def __init__(self, source: str, field: str, value: object, expected: str) -> None:
        self.source = source
        self.field = field
        self.value = value
        self.expected = expected
        if field.startswith("<"):
            shown = value if isinstance(value, str) else type(value).__name__
            message = f"{source}: {shown}: expected {expected}"
        else:
            message = f"{source}: field '{field}' = {value!r}: expected {expected}"
        super().__init__(message)


class TopologyError(FieldError):
    """A topology file or value that does not describe a valid fabric."""


def read_yaml_file(path: Path, kind: str, error: type[FieldError]) -> object:
    """The YAML document of a ``kind`` file ("topology", "scenario"), its ``name`` defaulting
    to the file's stem; unreadable files and bad YAML raise ``error``."""
    source = str(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise error(source, "<file>", "no such file", f"an existing {kind} YAML file") from None
    except OSError as exc:
        raise error(source, "<file>", exc.strerror, f"a readable {kind} file") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "the file"
        problem = getattr(exc, "problem", None) or "not YAML"
        raise error(source, "<yaml>", f"{problem} at {where}", "valid YAML") from None
    if isinstance(data, Mapping) and "name" not in data:
        data = {**data, "name": path.stem}
    return data


@dataclass(frozen=True)
class Topology:
    """One fabric as described by a topology file (immutable; use :meth:`with_` to vary)."""

    name: str
    planes: int
    racks: int
    spines_per_plane: int
    hosts_per_rack: int
    link_rate_mbps: float
    nominal_rate_gbps: float
    mtu: int
    usid_block: ipaddress.IPv6Network
    source: str = "<memory>"
    profile: str = UET_PROFILE  #: the switches' operating point (topologies.operating)
    latency_us: float | None = None  #: the file's ``link.latency_us`` (real), None: the profile's
    delay_us: float | None = None  #: the file's ``link.delay_us`` (emulated), None: not given
    queue_packets: int | None = None  #: the file's ``switch.queue_depth``, None: the profile's

    @property
    def hosts(self) -> int:
        """Number of hosts in the fabric."""
        return self.racks * self.hosts_per_rack

    @property
    def dilation(self) -> float:
        """How many times slower the emulated fabric runs than the real one it stands for:
        nominal (real) link rate / emulated link rate. Protocol timers are dilated by it."""
        return self.nominal_rate_gbps * 1e3 / self.link_rate_mbps

    @property
    def hop_latency_us(self) -> float:
        """One link's one-way latency in the real fabric, microseconds: ``link.latency_us``,
        or ``link.delay_us`` undilated, or the profile's (uet: 1; testbed-2026: 50 us emulated)."""
        if self.delay_us is not None:
            return self.delay_us / self.dilation
        if self.latency_us is not None:
            return self.latency_us
        if self.profile == UET_PROFILE:
            return HOP_LATENCY_US
        return LEGACY_DELAY_US / self.dilation

    @property
    def link_delay_us(self) -> float:
        """One link's one-way delay in the emulation, microseconds: the real latency dilated."""
        if self.delay_us is not None:
            return self.delay_us
        if self.latency_us is None and self.profile != UET_PROFILE:
            return LEGACY_DELAY_US
        return self.hop_latency_us * self.dilation

    @property
    def real_base_rtt(self) -> float:
        """The unloaded round trip between racks in the real fabric (seconds), as UET's reference
        simulator computes it (:func:`topologies.operating.unloaded_rtt`): four links each way at
        the nominal rate, each crossed by a full-size data frame and an ACK, and their latency."""
        return unloaded_rtt(
            links=BASE_RTT_LINKS,
            hop_latency=self.hop_latency_us * 1e-6,
            switch_latency=0.0,
            switches=BASE_RTT_SWITCHES,
            rate_bps=self.nominal_rate_gbps * 1e9,
            frame_bytes=self.link_mtu + 14,
        )

    @property
    def bdp_packets(self) -> int:
        """One link's bandwidth-delay product in full-size frames (the same number in the real
        fabric and in the emulation, whose rate and latencies are dilated alike)."""
        return bdp_packets(self.real_base_rtt, self.nominal_rate_gbps * 1e9, self.link_mtu + 14)

    @property
    def bdp_queue(self) -> BdpQueue:
        """Every egress port's data queue and RED thresholds derived from the BDP, in packets:
        the data queue is 1 BDP (or ``switch.queue_depth``), RED runs between 0.2 and 0.8 BDP."""
        return bdp_queue(self.bdp_packets, packets=self.queue_packets)

    @property
    def queue_depth(self) -> int:
        """Packets each priority queue of an egress port holds: ``switch.queue_depth``, or the
        profile's (uet: four times the 1-BDP data queue, which trims when it holds 1 BDP, so that
        the high-priority queue has room for trimmed headers, ACKs and NACKs as the reference's,
        twice the data queue's bytes, has: :data:`~topologies.operating.UET_QUEUE_FACTOR`;
        testbed-2026: 64)."""
        if self.queue_packets is not None:
            return self.queue_packets
        if self.profile == UET_PROFILE:
            return UET_QUEUE_FACTOR * bdp_queue(self.bdp_packets).packets
        return LEGACY_QUEUE_DEPTH

    @property
    def base_rtt(self) -> float:
        """The unloaded round trip (emulated seconds) of a full-size data frame and its ACK
        between racks: four links each way, each serialising the frame at the link rate, plus
        the links' propagation delay. The floor under any data packet's RTT, and the base RTT
        that times are reported in."""
        frame = self.link_mtu + 14
        rate = self.link_rate_mbps * 1e6
        links = BASE_RTT_LINKS
        return (
            links * (frame + CONTROL_FRAME_BYTES) * 8 / rate + 2 * links * self.link_delay_us / 1e6
        )

    @property
    def frame_time(self) -> float:
        """Emulated seconds one full-size data frame takes on a link."""
        return (self.link_mtu + 14) * 8 / (self.link_rate_mbps * 1e6)

    @property
    def link_mtu(self) -> int:
        """Interface MTU (IPv6 packet bytes) that carries a full MRC data packet."""
        return self.mtu + MAX_HEADER_BYTES - 14

    def with_(self, **changes: Any) -> Topology:
        """Return a copy with some fields changed, validated like a loaded file."""
        data = {**self.as_dict(), **changes}
        return parse_topology(data, self.source)

    def as_dict(self) -> dict[str, Any]:
        """The flat field dictionary that :func:`parse_topology` accepts back (the latency and
        queue depth only where given, so that the profile's follow a changed rate or profile)."""
        link: dict[str, Any] = {
            "rate_mbps": self.link_rate_mbps,
            "nominal_rate_gbps": self.nominal_rate_gbps,
        }
        if self.latency_us is not None:
            link["latency_us"] = self.latency_us
        if self.delay_us is not None:
            link["delay_us"] = self.delay_us
        switch = {} if self.queue_packets is None else {"queue_depth": self.queue_packets}
        return {
            "name": self.name,
            "profile": self.profile,
            "planes": self.planes,
            "racks": self.racks,
            "spines_per_plane": self.spines_per_plane,
            "hosts_per_rack": self.hosts_per_rack,
            "link": link,
            "switch": switch,
            "mtu": self.mtu,
            "usid_block": str(self.usid_block),
        }


_TOP_FIELDS = {
    "name",
    "planes",
    "racks",
    "spines_per_plane",
    "hosts_per_rack",
    "link",
    "switch",
    "mtu",
    "usid_block",
    "description",
    "profile",
}
_DEFAULTS: dict[str, Any] = {
    "link": {"rate_mbps": 100.0, "latency_us": None, "delay_us": None, "nominal_rate_gbps": 100.0},
    "switch": {"queue_depth": None},
    "mtu": 4096,
    "usid_block": "fcbb:bb00::/32",
}


def load_topology(path: str | Path) -> Topology:
    """Load and validate a topology file."""
    path = Path(path)
    return parse_topology(read_yaml_file(path, "topology", TopologyError), str(path))


def parse_topology(data: object, source: str = "<memory>") -> Topology:
    """Validate a topology mapping (as loaded from YAML) and return a :class:`Topology`."""
    if not isinstance(data, Mapping):
        raise TopologyError(
            source, "<top>", f"a {type(data).__name__}", "a mapping of topology fields"
        )
    unknown = sorted(set(map(str, data)) - _TOP_FIELDS)
    if unknown:
        raise TopologyError(source, unknown[0], data[unknown[0]], f"one of {sorted(_TOP_FIELDS)}")

    def section(key: str) -> Mapping[str, Any]:
        value = data.get(key, _DEFAULTS[key])
        if not isinstance(value, Mapping):
            raise TopologyError(source, key, value, "a mapping")
        merged = {**_DEFAULTS[key], **value}
        extra = sorted(set(merged) - set(_DEFAULTS[key]))
        if extra:
            raise TopologyError(
                source, f"{key}.{extra[0]}", merged[extra[0]], f"one of {sorted(_DEFAULTS[key])}"
            )
        return merged

    def integer(field: str, value: object, low: int, high: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TopologyError(source, field, value, "an integer")
        if value < low or (high is not None and value > high):
            bound = f"between {low} and {high}" if high is not None else f"at least {low}"
            raise TopologyError(source, field, value, f"an integer {bound}")
        return value

    def number(field: str, value: object, low: float, strict: bool) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
            raise TopologyError(source, field, value, "a number")
        if value < low or (strict and value == low):
            raise TopologyError(source, field, value, f"a number {'>' if strict else '>='} {low}")
        return float(value)

    def required(key: str) -> object:
        if key not in data:
            raise TopologyError(source, key, None, "a value (the field is required)")
        return data[key]

    name = data.get("name", "fabric")
    if (
        not isinstance(name, str)
        or not name
        or not name.replace("-", "").replace("_", "").isalnum()
    ):
        raise TopologyError(source, "name", name, "a non-empty name of letters, digits, - and _")

    planes = integer("planes", required("planes"), 1, MAX_PLANES)
    racks = integer("racks", required("racks"), 1)
    spines = integer("spines_per_plane", required("spines_per_plane"), 1)
    hosts_per_rack = integer("hosts_per_rack", required("hosts_per_rack"), 1)
    if racks > MAX_INDEX:
        raise TopologyError(
            source, "racks", racks, f"at most {MAX_INDEX} (uSID space overflow: 10-bit T0 index)"
        )
    if spines > MAX_INDEX:
        raise TopologyError(
            source,
            "spines_per_plane",
            spines,
            f"at most {MAX_INDEX} (uSID space overflow: 10-bit T1 index)",
        )
    if racks * hosts_per_rack > MAX_INDEX:
        raise TopologyError(
            source,
            "hosts_per_rack",
            hosts_per_rack,
            f"racks x hosts_per_rack <= {MAX_INDEX} (uSID space overflow: 10-bit host index, "
            f"{racks} racks give {racks * hosts_per_rack} hosts)",
        )

    link = section("link")
    rate = number("link.rate_mbps", link["rate_mbps"], 0.0, strict=True)
    latency = link["latency_us"]
    if latency is not None:
        latency = number("link.latency_us", latency, 0.0, strict=False)
    delay = link["delay_us"]
    if delay is not None:
        delay = number("link.delay_us", delay, 0.0, strict=False)
        if latency is not None:
            raise TopologyError(
                source, "link.delay_us", delay, "no value beside link.latency_us (give one)"
            )
    nominal = number("link.nominal_rate_gbps", link["nominal_rate_gbps"], 0.0, strict=True)
    switch = section("switch")
    queue_depth = switch["queue_depth"]
    if queue_depth is not None:
        queue_depth = integer("switch.queue_depth", queue_depth, 1, 1 << 18)
    profile = data.get("profile", UET_PROFILE)
    try:
        check_profile(str(profile))
    except ValueError:
        raise TopologyError(source, "profile", profile, "uet or testbed-2026") from None
    mtu = integer("mtu", data.get("mtu", _DEFAULTS["mtu"]), 256, MAX_LINK_MTU - MAX_HEADER_BYTES)

    block_text = data.get("usid_block", _DEFAULTS["usid_block"])
    try:
        block = ipaddress.IPv6Network(str(block_text), strict=True)
    except ValueError:
        raise TopologyError(
            source, "usid_block", block_text, "an IPv6 /32 prefix with host bits zero"
        ) from None
    if block.prefixlen != 32:
        raise TopologyError(source, "usid_block", block_text, "a /32 locator block (32-bit block)")

    return Topology(
        name=name,
        planes=planes,
        racks=racks,
        spines_per_plane=spines,
        hosts_per_rack=hosts_per_rack,
        link_rate_mbps=rate,
        nominal_rate_gbps=nominal,
        mtu=mtu,
        usid_block=block,
        source=source,
        profile=str(profile),
        latency_us=latency,
        delay_us=delay,
        queue_packets=queue_depth,
    )


def shipped_topology(name: str) -> Path:
    """Path of a topology shipped in this package (``small``, ``default``, ``medium``, ``mrc8``)."""
    return Path(__file__).with_name(f"{name}.yaml")


def shipped_topologies() -> list[Path]:
    """Every topology shipped in this package, by name."""
    return sorted(Path(__file__).parent.glob("*.yaml"))


__all__ = [
    "FieldError",
    "Topology",
    "TopologyError",
    "load_topology",
    "parse_topology",
    "path_rtt",
    "read_yaml_file",
    "shipped_topologies",
    "shipped_topology",
]
