"""One description of a simulated fabric, in real units: what the sim and uet-htsim both build.

A :class:`SimFabric` is a two-tier multi-plane leaf-spine fabric (the shape of
:mod:`topologies`), with link rates in Gb/s, a per-hop link latency and a switch latency in
microseconds and a :class:`sim.queues.QueuePolicy`. Nothing is dilated: the contexts run on
the network's clock (dilation 1).

- :meth:`SimFabric.topology` is the :class:`topologies.Topology` the network is built from;
- :meth:`SimFabric.base_rtt`, :meth:`SimFabric.bdp_packets` and :meth:`SimFabric.port_queue`
  follow the reference simulator's arithmetic (:mod:`sim.queues`);
- :meth:`SimFabric.nscc_profile` is NSCC configured as the reference configures it for that
  round trip and rate;
- :func:`leaf_spine` builds one from a host count, as large as MRC's fabrics (8 planes, 32 or
  more spines per plane, 1,024 hosts).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from host.transport import wire
from host.transport.cc import CcProfile
from host.transport.cc.nscc import uet_defaults
from sim.queues import PortQueue, QueuePolicy, bdp_packets, unloaded_rtt
from topologies import Topology
from topologies.config import parse_topology

#: links a packet crosses one way between racks (NIC-leaf, leaf-spine, spine-leaf, leaf-NIC)
PATH_LINKS = 4
#: switches on that path
PATH_SWITCHES = 3


#: the fabric's own fields :meth:`SimFabric.with_` changes in its topology
_TOPOLOGY_FIELDS = ("racks", "hosts_per_rack", "spines_per_plane", "planes", "mtu", "name")


def real_topology(
    *,
    racks: int,
    hosts_per_rack: int,
    spines_per_plane: int,
    planes: int = 1,
    rate_gbps: float = 100.0,
    hop_latency_us: float = 1.0,
    mtu: int = 4096,
    name: str = "sim",
) -> Topology:
    """A :class:`topologies.Topology` in real units: link rate = nominal rate (no dilation)."""
    return parse_topology(
        {
            "name": name,
            "planes": planes,
            "racks": racks,
            "spines_per_plane": spines_per_plane,
            "hosts_per_rack": hosts_per_rack,
            "link": {
                "rate_mbps": rate_gbps * 1e3,
                "delay_us": hop_latency_us,
                "nominal_rate_gbps": rate_gbps,
            },
            "mtu": mtu,
        }
    )


@dataclass(frozen=True)
class SimFabric:
    """A two-tier leaf-spine fabric in real units (see the module docstring): a topology whose
    links run at their nominal rate, a switch latency and a queue policy."""

    base: Topology  #: the fabric (its queue depth is :meth:`port_queue`'s, see :meth:`topology`)
    switch_latency_us: float = 0.0  #: every switch (the reference's default)
    queues: QueuePolicy = field(default_factory=QueuePolicy)

    def __post_init__(self) -> None:
        if self.base.dilation != 1.0:
            raise ValueError(
                f"{self.base.name}: link rate {self.base.link_rate_mbps} Mb/s, nominal "
                f"{self.base.nominal_rate_gbps} Gb/s: a simulated fabric runs undilated"
            )

    racks = property(lambda self: self.base.racks, doc="Leaves per plane (one per rack).")
    hosts_per_rack = property(lambda self: self.base.hosts_per_rack, doc="Hosts per rack.")
    spines_per_plane = property(lambda self: self.base.spines_per_plane, doc="Spines per plane.")
    planes = property(lambda self: self.base.planes, doc="Planes (one NIC per host on each).")
    hosts = property(lambda self: self.base.hosts, doc="Hosts of the fabric.")
    mtu = property(lambda self: self.base.mtu, doc="MRC payload bytes per data packet.")
    name = property(lambda self: self.base.name, doc="The fabric's name.")

    @property
    def rate_gbps(self) -> float:
        """Every link's rate, Gb/s."""
        return self.base.nominal_rate_gbps

    @property
    def hop_latency_us(self) -> float:
        """Every link's one-way latency, microseconds (the reference's default: 1)."""
        return self.base.link_delay_us

    @property
    def frame_bytes(self) -> int:
        """Bytes of a full-size data frame on the wire (its headers without an SRH)."""
        return self.mtu + wire.DATA_HEADER_LEN

    @property
    def rate_bps(self) -> float:
        """One link's rate in bits per second."""
        return self.rate_gbps * 1e9

    def with_(self, **changes: Any) -> SimFabric:
        """A copy with some fields changed: the topology's (``racks``, ``hosts_per_rack``,
        ``spines_per_plane``, ``planes``, ``mtu``, ``name``), ``rate_gbps``,
        ``hop_latency_us``, ``switch_latency_us`` or ``queues``."""
        own = {k: changes.pop(k) for k in ("switch_latency_us", "queues") if k in changes}
        link = {k: changes.pop(k) for k in ("rate_gbps", "hop_latency_us") if k in changes}
        unknown = sorted(set(changes) - set(_TOPOLOGY_FIELDS))
        if unknown:
            raise TypeError(f"SimFabric.with_: no field {unknown[0]!r}")
        fields = {f: changes.get(f, getattr(self, f)) for f in _TOPOLOGY_FIELDS}
        fields["rate_gbps"] = link.get("rate_gbps", self.rate_gbps)
        fields["hop_latency_us"] = link.get("hop_latency_us", self.hop_latency_us)
        return replace(self, base=real_topology(**fields), **own)

    def topology(self) -> Topology:
        """The fabric as a :class:`topologies.Topology`, its queue depth the ports' size."""
        return self.base.with_(switch={"queue_depth": max(1, self.port_queue().packets)})

    def base_rtt(self) -> float:
        """The unloaded round trip between racks (seconds), as the reference computes it."""
        return unloaded_rtt(
            links=PATH_LINKS,
            hop_latency=self.hop_latency_us * 1e-6,
            switch_latency=self.switch_latency_us * 1e-6,
            switches=PATH_SWITCHES,
            rate_bps=self.rate_bps,
            frame_bytes=self.frame_bytes,
        )

    def bdp_packets(self) -> int:
        """One plane's bandwidth-delay product in whole data frames."""
        return bdp_packets(self.base_rtt(), self.rate_bps, self.frame_bytes)

    def port_queue(self) -> PortQueue:
        """Every switch port's resolved queue bounds."""
        return self.queues.resolve(bdp_packets=self.bdp_packets(), frame_bytes=self.frame_bytes)

    def nscc_profile(self) -> CcProfile:
        """NSCC with the reference's parameters for this fabric: the unloaded RTT as base RTT,
        one NIC's rate per plane (a QP sprays over every plane)."""
        params = uet_defaults(
            base_rtt=self.base_rtt(),
            link_rate_bps=self.planes * self.rate_bps,
            mtu=self.mtu,
            trimming=self.queues.trim,
        )
        return CcProfile("nscc", params)

    def describe(self) -> dict[str, Any]:
        """The fabric's figures, JSON-ready."""
        queue = self.port_queue()
        return {
            "hosts": self.hosts,
            "planes": self.planes,
            "racks": self.racks,
            "spines_per_plane": self.spines_per_plane,
            "rate_gbps": self.rate_gbps,
            "hop_latency_us": self.hop_latency_us,
            "switch_latency_us": self.switch_latency_us,
            "base_rtt_us": self.base_rtt() * 1e6,
            "bdp_packets": self.bdp_packets(),
            "queue_packets": queue.packets,
            "ecn_low_bytes": queue.ecn_low_bytes,
            "ecn_high_bytes": queue.ecn_high_bytes,
            "discipline": self.queues.discipline,
        }


def leaf_spine(
    hosts: int,
    *,
    planes: int = 1,
    hosts_per_rack: int | None = None,
    spines_per_plane: int | None = None,
    **options: Any,
) -> SimFabric:
    """A non-blocking leaf-spine fabric of ``hosts`` hosts: by default racks of
    ``sqrt(hosts)`` hosts (rounded up to a power of two) and as many spines as a rack has
    hosts (every leaf has as many uplinks as downlinks)."""
    if hosts < 2:
        raise ValueError(f"a fabric of {hosts} hosts: expected at least 2")
    per_rack = hosts_per_rack or min(hosts, 1 << math.ceil(math.log2(math.isqrt(hosts - 1) + 1)))
    if hosts % per_rack:
        raise ValueError(f"{hosts} hosts in racks of {per_rack}: expected a multiple")
    fields = {k: options.pop(k) for k in ("rate_gbps", "hop_latency_us", "mtu", "name")
              if k in options}  # fmt: skip
    base = real_topology(
        racks=hosts // per_rack,
        hosts_per_rack=per_rack,
        spines_per_plane=spines_per_plane or per_rack,
        planes=planes,
        **fields,
    )
    return SimFabric(base, **options)
