"""The intended tables of every switch, computed from the fabric model (no routing protocol).

Every entry follows from the topology (names, ports, uSIDs, MACs all come from
:class:`topologies.Fabric`):

- ``MrcIngress.my_sid``: the switch's uN SID ``block:uSID::/48`` -> ``usid_un`` and its classic
  End SID ``block:uSID::e/128`` -> ``srv6_end``;
- ``MrcIngress.ipv6_lpm``: on a T0, each local NIC's ``/48`` -> the host port (source MAC the
  T0 port, destination MAC the NIC) and each spine's ``/48`` -> the uplink to it; on a T1, each
  T0's ``/48`` -> the down port to that rack; default action ``drop_no_route``;
- ``MrcIngress.port_qos``: every port -> ``set_port_qos(trim_threshold, ecn_threshold,
  ecn_max_threshold, ecn_slope)`` (:meth:`controller.qos.PortQos.action_params`) from
  the queue depth, or from the overrides (:mod:`controller.qos`).

Entries are small frozen :class:`Entry` values whose match and parameters are canonical text
(the same text :meth:`controller.p4info.P4Info.decode` produces from a switch's reply), so the
intended and the installed state can be compared, printed and tested without gRPC.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from controller.p4info import DecodedEntry, P4Info
from controller.qos import PortQos, QosOverrides, default_qos
from topologies import Fabric, Switch, Tier
from topologies import usid as usidlib

MY_SID = "MrcIngress.my_sid"
IPV6_LPM = "MrcIngress.ipv6_lpm"
PORT_QOS = "MrcIngress.port_qos"
USID_UN = "MrcIngress.usid_un"
SRV6_END = "MrcIngress.srv6_end"
SET_NEXT_HOP = "MrcIngress.set_next_hop"
DROP_NO_ROUTE = "MrcIngress.drop_no_route"
SET_PORT_QOS = "MrcIngress.set_port_qos"
DST_ADDR = "hdr.ipv6.dst_addr"
EGRESS_SPEC = "standard_metadata.egress_spec"

#: The tables the controller owns: entries found there that are not intended are deleted.
MANAGED_TABLES: tuple[str, ...] = (MY_SID, IPV6_LPM, PORT_QOS)


def _text(value: object) -> str:
    """Canonical text of a match or parameter value (as P4Info.decode renders it)."""
    if isinstance(value, ipaddress.IPv6Network):
        return f"{value.network_address}/{value.prefixlen}"
    if isinstance(value, ipaddress.IPv6Address):
        return str(value)
    if isinstance(value, str):
        return value.lower()
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise TypeError(f"{value!r}: expected an IPv6 prefix or address, a MAC text or an integer")


@dataclass(frozen=True)
class Entry:
    """One intended (or installed) table entry in canonical readable form."""

    table: str
    match: tuple[tuple[str, str], ...]
    action: str
    params: tuple[tuple[str, str], ...] = ()
    is_default: bool = False
    priority: int = 0

    @classmethod
    def make(
        cls,
        table: str,
        match: Mapping[str, object],
        action: str,
        params: Mapping[str, object] | None = None,
    ) -> Entry:
        """An entry from values (``IPv6Network``, MAC text, integers), canonicalised."""
        return cls(
            table=table,
            match=tuple((k, _text(v)) for k, v in match.items()),
            action=action,
            params=tuple((k, _text(v)) for k, v in (params or {}).items()),
        )

    @classmethod
    def default(cls, table: str, action: str, params: Mapping[str, object] | None = None) -> Entry:
        """The default-action entry of ``table``."""
        return cls(
            table=table,
            match=(),
            action=action,
            params=tuple((k, _text(v)) for k, v in (params or {}).items()),
            is_default=True,
        )

    @classmethod
    def from_decoded(cls, decoded: DecodedEntry) -> Entry:
        """An entry from :meth:`P4Info.decode` output."""
        return cls(
            table=decoded.table,
            match=tuple(decoded.match.items()),
            action=decoded.action,
            params=tuple(decoded.params.items()),
            is_default=decoded.is_default,
            priority=decoded.priority,
        )

    @classmethod
    def from_proto(cls, info: P4Info, entry: Any) -> Entry:
        """An entry from a ``p4r.TableEntry`` read from a switch."""
        return cls.from_decoded(info.decode(entry))

    @property
    def key(self) -> tuple[str, tuple[tuple[str, str], ...], bool, int]:
        """What identifies the entry in its table (two entries with one key cannot coexist)."""
        return (self.table, tuple(sorted(self.match)), self.is_default, self.priority)

    def to_proto(self, info: P4Info) -> Any:
        """The ``p4r.TableEntry`` for this entry."""
        if self.is_default:
            return info.default_entry(self.table, self.action, dict(self.params))
        return info.table_entry(
            self.table, dict(self.match), self.action, dict(self.params), self.priority
        )

    def param(self, name: str) -> str:
        """The text of action parameter ``name``."""
        return dict(self.params)[name]

    def __str__(self) -> str:
        keys = ", ".join(f"{k}={v}" for k, v in self.match) or "default"
        args = ", ".join(f"{k}={v}" for k, v in self.params)
        short = self.table.rsplit(".", 1)[-1]
        return f"{short} [{keys}] -> {self.action.rsplit('.', 1)[-1]}({args})"


@dataclass(frozen=True)
class SwitchTables:
    """The intended state of one switch."""

    switch: str
    entries: tuple[Entry, ...]

    def by_table(self, table: str) -> list[Entry]:
        """The entries of one table."""
        return [e for e in self.entries if e.table == table]


def sid_entries(switch: Switch) -> list[Entry]:
    """The switch's own SIDs: uN ``/48`` -> usid_un, End ``/128`` -> srv6_end."""
    return [
        Entry.make(MY_SID, {DST_ADDR: switch.usid_prefix}, USID_UN),
        Entry.make(MY_SID, {DST_ADDR: ipaddress.IPv6Network((switch.end_sid, 128))}, SRV6_END),
    ]


def lpm_entries(fabric: Fabric, switch: Switch) -> list[Entry]:
    """Forwarding: T0 -> local NICs and spines; T1 -> the T0s of its plane."""
    found = []
    for port in switch.ports:
        if fabric.node_kind(port.peer) == "host":
            nic = fabric.host(port.peer).nic(switch.plane)
            prefix = usidlib.prefix(fabric.block, nic.usid)
        else:
            peer = fabric.switch(port.peer)
            if switch.tier is Tier.T1 and peer.tier is not Tier.T0:
                continue
            prefix = peer.usid_prefix
        found.append(
            Entry.make(
                IPV6_LPM,
                {DST_ADDR: prefix},
                SET_NEXT_HOP,
                {"port": port.number, "smac": port.mac, "dmac": port.peer_mac},
            )
        )
    return found


def qos_entries(
    fabric: Fabric, switch: Switch, overrides: QosOverrides | None = None
) -> list[Entry]:
    """One ``port_qos`` entry per port: the override if any, else the topology's defaults."""
    default = default_qos(fabric.topology)
    found = []
    for port in switch.ports:
        qos: PortQos = (
            overrides.lookup(switch.name, port.number) if overrides else None
        ) or default
        found.append(
            Entry.make(
                PORT_QOS,
                {EGRESS_SPEC: port.number},
                SET_PORT_QOS,
                qos.action_params(
                    fabric.topology.queue_depth, fabric.node_kind(port.peer) == "host"
                ),
            )
        )
    return found


def default_entries() -> list[Entry]:
    """Default actions the controller sets: ``ipv6_lpm`` drops what has no route."""
    return [Entry.default(IPV6_LPM, DROP_NO_ROUTE)]


def switch_tables(
    fabric: Fabric, switch: Switch | str, overrides: QosOverrides | None = None
) -> SwitchTables:
    """The whole intended state of one switch."""
    sw = fabric.switch(switch) if isinstance(switch, str) else switch
    entries = (
        sid_entries(sw) + lpm_entries(fabric, sw) + qos_entries(fabric, sw, overrides)
    ) + default_entries()
    return SwitchTables(sw.name, tuple(entries))


def fabric_tables(
    fabric: Fabric, overrides: QosOverrides | None = None, switches: Sequence[str] | None = None
) -> dict[str, SwitchTables]:
    """The intended state of every switch (or of the named ones), in device-id order."""
    wanted = set(switches) if switches is not None else None
    return {
        sw.name: switch_tables(fabric, sw, overrides)
        for sw in fabric.switches
        if wanted is None or sw.name in wanted
    }


@dataclass(frozen=True)
class Diff:
    """What turns the installed state into the intended one."""

    inserts: tuple[Entry, ...] = ()
    modifies: tuple[Entry, ...] = ()
    deletes: tuple[Entry, ...] = ()
    replaced: tuple[Entry, ...] = ()  # the installed entries the modifies replace, in order

    @property
    def empty(self) -> bool:
        """True when nothing needs writing."""
        return not (self.inserts or self.modifies or self.deletes)

    @property
    def count(self) -> int:
        """Number of updates."""
        return len(self.inserts) + len(self.modifies) + len(self.deletes)

    def lines(self) -> list[str]:
        """``+ entry`` / ``~ entry`` / ``- entry`` lines, as ``mrc-ctl diff`` prints them."""
        modified = [
            f"~ {new}  (installed: {old.action.rsplit('.', 1)[-1]}"
            f"({', '.join(f'{k}={v}' for k, v in old.params)}))"
            for new, old in zip(self.modifies, self.replaced, strict=False)
        ]
        if len(self.replaced) != len(self.modifies):
            modified = [f"~ {e}" for e in self.modifies]
        return [f"+ {e}" for e in self.inserts] + modified + [f"- {e}" for e in self.deletes]


def diff(
    intended: Sequence[Entry],
    installed: Sequence[Entry],
    managed: Sequence[str] = MANAGED_TABLES,
) -> Diff:
    """Compare the intended and the installed entries of one switch.

    Entries of tables outside ``managed`` are left alone. A default entry that differs is a
    modify (default entries are never inserted or deleted).
    """
    have = {e.key: e for e in installed if e.table in managed}
    want = {e.key: e for e in intended}
    inserts: list[Entry] = []
    modifies: list[tuple[Entry, Entry | None]] = []
    for key, entry in want.items():
        current = have.get(key)
        if current is None:
            if entry.is_default:
                modifies.append((entry, None))
            else:
                inserts.append(entry)
        elif (current.action, sorted(current.params)) != (entry.action, sorted(entry.params)):
            modifies.append((entry, current))
    deletes = [e for k, e in have.items() if k not in want and not e.is_default]
    unknown = Entry(table="", match=(), action="(not read)")
    return Diff(
        tuple(inserts),
        tuple(new for new, _ in modifies),
        tuple(deletes),
        tuple(old or unknown for _, old in modifies),
    )
