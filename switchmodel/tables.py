"""Match-action state of the mrc_switch pipeline, in the form the data path reads.

The P4Runtime server (:mod:`switchmodel.server`) translates table entries into these structures;
the pure pipeline (:mod:`switchmodel.pipeline`) only looks them up:

- :class:`LpmTable`   -- longest-prefix match over 128-bit keys, one dict per prefix length
  (lookups try the lengths in use, longest first: two dict probes for the fabric's /48 + /128);
- :class:`ExactTable` -- exact match (a dict);
- :class:`NextHop`, :class:`PortQos` -- the action data of ``set_next_hop`` and ``set_port_qos``;
- :class:`EcmpGroup` -- an ECMP group of ``ipv6_ecmp``: its members' next hops in BMv2's order;
- :class:`Counters`, :class:`PipelineState` -- counter arrays, the ``port_qdepth`` register and
  the three tables with their default actions: everything the pipeline reads and writes.

Nothing here locks: the data path and the server share one :class:`PipelineState` under the
data path's lock (see :mod:`switchmodel.dataplane`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Generic, NamedTuple, TypeVar

V = TypeVar("V")

PORT_COUNT = 512  # bit<9> ports: counters and the register are indexed by port
DROP_REASONS = 16  # size of MrcIngress.drops


class DropReason(enum.IntEnum):
    """Index of ``MrcIngress.drops``: why a packet was dropped."""

    NOT_IPV6 = 1
    PARSE_ERROR = 2
    SRH_INVALID = 3
    HOP_LIMIT = 4
    NO_ROUTE = 5
    SID_END = 6
    QUEUE_FULL = 7  # counted by the target's queue
    OVERSIZE = 8  # counted by the target: frame larger than the port MTU


class SidAction(enum.IntEnum):
    """Actions of ``MrcIngress.my_sid``."""

    NO_ACTION = 0
    USID_UN = 1
    SRV6_END = 2


class NextHop(NamedTuple):
    """Action data of ``MrcIngress.set_next_hop`` (build it with :func:`next_hop`)."""

    port: int
    smac: bytes  # 6 bytes
    dmac: bytes  # 6 bytes
    macs: bytes  # dmac + smac: the first 12 bytes of the rewritten Ethernet header


def next_hop(port: int, smac: bytes, dmac: bytes) -> NextHop:
    """The action data of ``set_next_hop(port, smac, dmac)``."""
    return NextHop(port, smac, dmac, dmac + smac)


class PortQos(NamedTuple):
    """Action data of ``MrcIngress.set_port_qos`` (thresholds in packets; ``ecn_slope``: RED's
    marking probability per packet of depth above ``ecn_threshold``, in 1/65536)."""

    trim_threshold: int
    ecn_threshold: int
    ecn_max_threshold: int
    ecn_slope: int
    last_hop: int = 0  #: 1: the port faces a host (trimmed packets get DSCP 13)

    @classmethod
    def fixed(cls, trim_threshold: int, ecn_threshold: int, last_hop: int = 0) -> PortQos:
        """Trimming and ECN marking at fixed thresholds (no RED)."""
        return cls(trim_threshold, ecn_threshold, ecn_threshold, 0, last_hop)


class EcmpGroup:
    """An action profile group of ``ecmp_selector`` as the data path sees it: the next hops of
    its members in the order BMv2 picks from (by member handle). ``ipv6_ecmp`` entries hold
    the group object itself, so a change of its members is seen at once."""

    __slots__ = ("hops",)

    def __init__(self, hops: tuple[NextHop, ...] = ()) -> None:
        self.hops = hops


# ``drop_no_route`` as ipv6_lpm action data: a next hop no packet can leave by.
DROP_NO_ROUTE = NextHop(-1, b"", b"", b"")
# ``NoAction`` as port_qos action data: thresholds no bit<19> queue depth ever reaches.
NO_QOS = PortQos(1 << 19, 1 << 19, 1 << 19, 0)


class LpmTable(Generic[V]):
    """Longest-prefix match over ``width``-bit integer keys."""

    def __init__(self, width: int = 128) -> None:
        self.width = width
        self._by_length: dict[int, dict[int, V]] = {}
        # (shift, dict) pairs, longest prefix first: what lookup() walks
        self._probes: list[tuple[int, dict[int, V]]] = []

    def _reindex(self) -> None:
        self._probes = [
            (self.width - length, self._by_length[length])
            for length in sorted(self._by_length, reverse=True)
        ]

    def insert(self, value: int, length: int, data: V) -> None:
        """Add or replace the entry ``value/length`` (``value`` must have no bits past length)."""
        bucket = self._by_length.get(length)
        if bucket is None:
            bucket = self._by_length[length] = {}
            bucket[value >> (self.width - length)] = data
            self._reindex()
        else:
            bucket[value >> (self.width - length)] = data

    def remove(self, value: int, length: int) -> None:
        """Remove the entry ``value/length`` (KeyError when absent)."""
        bucket = self._by_length[length]
        del bucket[value >> (self.width - length)]
        if not bucket:
            del self._by_length[length]
            self._reindex()

    def lookup(self, key: int) -> V | None:
        """The data of the longest prefix containing ``key``, or None."""
        for shift, bucket in self._probes:
            data = bucket.get(key >> shift)
            if data is not None:
                return data
        return None

    def __len__(self) -> int:
        return sum(len(bucket) for bucket in self._by_length.values())

    def clear(self) -> None:
        """Remove every entry."""
        self._by_length.clear()
        self._probes = []


class ExactTable(Generic[V]):
    """Exact match: a dict from key to action data."""

    def __init__(self) -> None:
        self.entries: dict[int, V] = {}

    def lookup(self, key: int) -> V | None:
        """The data of ``key``, or None."""
        return self.entries.get(key)

    def __len__(self) -> int:
        return len(self.entries)


class CounterArray:
    """An indirect PACKETS_AND_BYTES counter: parallel lists of packets and bytes."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.packets = [0] * size
        self.bytes = [0] * size

    def count(self, index: int, length: int) -> None:
        """Count one packet of ``length`` bytes at ``index`` (out of range: ignored, as BMv2)."""
        if 0 <= index < self.size:
            self.packets[index] += 1
            self.bytes[index] += length

    def reset(self) -> None:
        """Zero every cell."""
        self.packets = [0] * self.size
        self.bytes = [0] * self.size


@dataclass
class Counters:
    """The five counters of the program."""

    port_in: CounterArray = field(default_factory=lambda: CounterArray(PORT_COUNT))
    trimmed: CounterArray = field(default_factory=lambda: CounterArray(PORT_COUNT))
    ecn_marked: CounterArray = field(default_factory=lambda: CounterArray(PORT_COUNT))
    drops: CounterArray = field(default_factory=lambda: CounterArray(DROP_REASONS))
    port_out: CounterArray = field(default_factory=lambda: CounterArray(PORT_COUNT))

    def by_name(self) -> dict[str, CounterArray]:
        """The counters under their P4Info names."""
        return {
            "MrcIngress.port_in": self.port_in,
            "MrcIngress.trimmed": self.trimmed,
            "MrcIngress.ecn_marked": self.ecn_marked,
            "MrcIngress.drops": self.drops,
            "MrcEgress.port_out": self.port_out,
        }


@dataclass
class PipelineState:
    """Everything the mrc_switch pipeline reads and writes: tables, counters, register."""

    my_sid: LpmTable[SidAction] = field(default_factory=LpmTable)
    my_sid_default: SidAction = SidAction.NO_ACTION
    ipv6_lpm: LpmTable[NextHop] = field(default_factory=LpmTable)
    ipv6_lpm_default: NextHop = DROP_NO_ROUTE
    ipv6_ecmp: LpmTable[EcmpGroup] = field(default_factory=LpmTable)
    port_qos: ExactTable[PortQos] = field(default_factory=ExactTable)
    port_qos_default: PortQos = NO_QOS
    counters: Counters = field(default_factory=Counters)
    port_qdepth: list[int] = field(default_factory=lambda: [0] * PORT_COUNT)
    port_arrivals: list[int] = field(default_factory=lambda: [0] * PORT_COUNT)

    def register(self, name: str) -> list[int]:
        """The register array called ``name`` (``port_qdepth`` or ``port_arrivals``)."""
        if name == "port_qdepth":
            return self.port_qdepth
        if name == "port_arrivals":
            return self.port_arrivals
        raise KeyError(f"no register {name!r}")
