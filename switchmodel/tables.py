"""Match-action state of the mrc_switch pipeline, in the form the data path reads.

The P4Runtime server (:mod:`switchmodel.server`) translates table entries into these structures;
the pure pipeline (:mod:`switchmodel.pipeline`) only looks them up:

- :class:`LpmTable`   -- longest-prefix match over 128-bit keys, one dict per prefix length
  (lookups try the lengths in use, longest first: two dict probes for the fabric's /48 + /128);
  the sim's switches (:mod:`sim.switch`) hold their tables in it too;
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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Generic, NamedTuple, TypeVar

from p4src.contract import (
    DROP_REASON_SLOTS,
    DROPS,
    ECN_MARKED,
    PORT_ARRIVALS,
    PORT_COUNT,
    PORT_IN,
    PORT_OUT,
    PORT_QDEPTH,
    QDEPTH_BITS,
    TRIMMED,
    PortQosParams,
)

V = TypeVar("V")
W = TypeVar("W")


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


def next_hop(port: int, smac: bytes | int, dmac: bytes | int) -> NextHop:
    """The action data of ``set_next_hop(port, smac, dmac)`` (MACs as 6 bytes or integers)."""
    if isinstance(smac, int):
        smac = smac.to_bytes(6, "big")
    if isinstance(dmac, int):
        dmac = dmac.to_bytes(6, "big")
    return NextHop(port, smac, dmac, dmac + smac)


class PortQos(PortQosParams):
    """Action data of ``MrcIngress.set_port_qos`` (:class:`p4src.contract.PortQosParams`)."""

    __slots__ = ()

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
NO_QOS = PortQos(1 << QDEPTH_BITS, 1 << QDEPTH_BITS, 1 << QDEPTH_BITS, 0)


class LpmTable(Generic[V]):
    """Longest-prefix match over ``width``-bit integer keys: one dict per prefix length, from
    the leading ``length`` bits of a prefix to its data.

    The switch model's pipeline and the sim's switches (:mod:`sim.switch`) both read it; a
    per-packet path may walk :attr:`probes` itself (as :meth:`lookup` does) rather than call.
    """

    __slots__ = ("width", "_by_length", "probes")

    def __init__(self, width: int = 128) -> None:
        if width <= 0:
            raise ValueError(f"LPM key width {width}: expected a positive number of bits")
        self.width = width
        self._by_length: dict[int, dict[int, V]] = {}
        #: (shift, dict) per prefix length in use, longest first: what a lookup walks
        #: (replaced, not changed, when a length comes or goes; not to be modified)
        self.probes: tuple[tuple[int, dict[int, V]], ...] = ()

    @classmethod
    def of_prefixes(cls, length: int, values: dict[int, V], width: int = 128) -> LpmTable[V]:
        """A table of prefixes of one ``length``, given as their leading ``length`` bits
        (the table takes ``values`` over: no copy)."""
        table: LpmTable[V] = cls(width)
        table._check_length(length)
        if values:
            table._by_length[length] = values
            table._reindex()
        return table

    def _check_length(self, length: int) -> None:
        if not 0 <= length <= self.width:
            raise ValueError(f"prefix length {length}: expected 0 to {self.width}")

    def _reindex(self) -> None:
        self.probes = tuple(
            (self.width - length, self._by_length[length])
            for length in sorted(self._by_length, reverse=True)
        )

    def insert(self, value: int, length: int, data: V) -> None:
        """Add or replace the entry ``value/length`` (``value`` must have no bits past length)."""
        bucket = self._by_length.get(length)
        if bucket is None:
            self._check_length(length)
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
        for shift, bucket in self.probes:
            data = bucket.get(key >> shift)
            if data is not None:
                return data
        return None

    def map(self, convert: Callable[[V], W]) -> LpmTable[W]:
        """The same prefixes with ``convert`` of each value (called once per distinct value)."""
        done: dict[V, W] = {}
        table: LpmTable[W] = LpmTable(self.width)
        for length, bucket in self._by_length.items():
            out: dict[int, W] = {}
            for key, value in bucket.items():
                got = done.get(value)
                if got is None:
                    got = done[value] = convert(value)
                out[key] = got
            table._by_length[length] = out
        table._reindex()
        return table

    @property
    def by_length(self) -> dict[int, dict[int, V]]:
        """Prefix length -> {leading bits of the prefix: data} (not to be modified)."""
        return self._by_length

    def items(self) -> Iterator[tuple[int, int, V]]:
        """Every entry: (value, length, data), as :meth:`insert` takes them."""
        for length, bucket in self._by_length.items():
            for key, data in bucket.items():
                yield key << (self.width - length), length, data

    def __len__(self) -> int:
        return sum(len(bucket) for bucket in self._by_length.values())

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, LpmTable)
            and self.width == other.width
            and self._by_length == other._by_length
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"LpmTable({len(self)} entries, lengths {sorted(self._by_length)})"

    def clear(self) -> None:
        """Remove every entry."""
        self._by_length.clear()
        self.probes = ()


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
    drops: CounterArray = field(default_factory=lambda: CounterArray(DROP_REASON_SLOTS))
    port_out: CounterArray = field(default_factory=lambda: CounterArray(PORT_COUNT))

    def by_name(self) -> dict[str, CounterArray]:
        """The counters under their P4Info names."""
        return {
            PORT_IN: self.port_in,
            TRIMMED: self.trimmed,
            ECN_MARKED: self.ecn_marked,
            DROPS: self.drops,
            PORT_OUT: self.port_out,
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
        if name == PORT_QDEPTH:
            return self.port_qdepth
        if name == PORT_ARRIVALS:
            return self.port_arrivals
        raise KeyError(f"no register {name!r}")
