"""The intended tables of every switch, computed from the fabric model (no routing protocol).

Every entry follows from the topology (names, ports, uSIDs, MACs all come from
:class:`topologies.Fabric`):

- ``MrcIngress.my_sid``: the switch's uN SID ``block:uSID::/48`` -> ``usid_un`` and its classic
  End SID ``block:uSID::e/128`` -> ``srv6_end``;
- ``MrcIngress.ipv6_lpm``: on a T0, each local NIC's ``/48`` -> the host port (source MAC the
  T0 port, destination MAC the NIC) and each spine's ``/48`` -> the uplink to it; on a T1, each
  T0's ``/48`` -> the down port to that rack; default action ``drop_no_route``;
- ``MrcIngress.ipv6_lpm`` also routes plain host NIC addresses (``block:uSID(NIC)::``, the
  destination of EVs that are not paths: the STEV and UDP formats): on a T1, each NIC of its
  plane's ``/48`` -> the down port to that NIC's rack;
- ECMP, on a T0: one member of ``MrcIngress.ecmp_selector`` per uplink (member id = the uplink's
  port number, ``set_next_hop`` to the spine), one group (id :data:`UPLINKS_GROUP`) holding
  them all, and in ``MrcIngress.ipv6_ecmp`` each NIC of another rack of its plane's ``/48`` ->
  that group: the switch hashes each flow onto one uplink (:func:`p4src.contract.member_index`);
- ``MrcIngress.port_qos``: every port -> ``set_port_qos(trim_threshold, ecn_threshold,
  ecn_max_threshold, ecn_slope)`` (:meth:`controller.qos.PortQos.action_params`) from
  the queue depth, or from the overrides (:mod:`controller.qos`).

Entries are small frozen :class:`Entry` values whose match and parameters are canonical text
(the same text :meth:`controller.p4info.P4Info.decode` produces from a switch's reply), so the
intended and the installed state can be compared, printed and tested without gRPC. Action
profile members and groups are entries too (:attr:`Entry.kind` ``member`` and ``group``, their
``table`` the action profile), so the same walk, diff, push and ``show`` cover them.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from controller.p4info import DecodedEntry, DecodedGroup, DecodedMember, P4Info
from controller.qos import PortQos, QosOverrides, default_qos
from p4src.contract import (
    DROP_NO_ROUTE,
    DST_ADDR,
    ECMP_SELECTOR,
    EGRESS_SPEC,
    IPV6_ECMP,
    IPV6_LPM,
    MY_SID,
    PORT_QOS,
    SET_NEXT_HOP,
    SET_PORT_QOS,
    SRV6_END,
    USID_UN,
    NextHopParams,
    params_of,
)
from p4src.proto import p4r
from topologies import Fabric, Port, Switch, Tier
from topologies import usid as usidlib

#: The tables the controller owns: entries found there that are not intended are deleted.
MANAGED_TABLES: tuple[str, ...] = (MY_SID, IPV6_LPM, IPV6_ECMP, PORT_QOS)
#: The action profiles the controller owns (their members and groups), likewise.
MANAGED_PROFILES: tuple[str, ...] = (ECMP_SELECTOR,)
#: The group of a T0's uplinks in ``ecmp_selector`` (every T0 has exactly one).
UPLINKS_GROUP = 1

#: :attr:`Entry.kind` values
TABLE_ENTRY = "table"
MEMBER = "member"
GROUP = "group"
MEMBER_ID = "member_id"
GROUP_ID = "group_id"


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
    """One intended (or installed) table entry in canonical readable form.

    ``kind`` is :data:`TABLE_ENTRY` for a table entry, :data:`MEMBER` for an action profile
    member (``table`` the profile, ``match`` its ``member_id``, ``action`` and ``params`` its
    action) or :data:`GROUP` for an action profile group (``match`` its ``group_id``,
    ``members`` its member ids, sorted). A table entry with ``group`` set points at that group
    of its table's action profile instead of carrying an action.
    """

    table: str
    match: tuple[tuple[str, str], ...]
    action: str
    params: tuple[tuple[str, str], ...] = ()
    is_default: bool = False
    priority: int = 0
    kind: str = TABLE_ENTRY
    members: tuple[int, ...] = ()
    group: int = 0

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
    def to_group(cls, table: str, match: Mapping[str, object], group_id: int) -> Entry:
        """A table entry of ``table`` that points at action profile group ``group_id``."""
        if group_id < 1:
            raise ValueError(f"{table}: group id {group_id}, expected a positive integer")
        return cls(
            table=table,
            match=tuple((k, _text(v)) for k, v in match.items()),
            action="",
            group=group_id,
        )

    @classmethod
    def member(
        cls, profile: str, member_id: int, action: str, params: Mapping[str, object] | None = None
    ) -> Entry:
        """Member ``member_id`` of action profile ``profile``: ``action(params)``."""
        if member_id < 1:
            raise ValueError(f"{profile}: member id {member_id}, expected a positive integer")
        return cls(
            table=profile,
            match=((MEMBER_ID, str(member_id)),),
            action=action,
            params=tuple((k, _text(v)) for k, v in (params or {}).items()),
            kind=MEMBER,
        )

    @classmethod
    def group_of(cls, profile: str, group_id: int, members: Sequence[int]) -> Entry:
        """Group ``group_id`` of action profile ``profile`` holding ``members``."""
        if group_id < 1:
            raise ValueError(f"{profile}: group id {group_id}, expected a positive integer")
        return cls(
            table=profile,
            match=((GROUP_ID, str(group_id)),),
            action="",
            kind=GROUP,
            members=tuple(sorted(set(members))),
        )

    @classmethod
    def from_member(cls, decoded: DecodedMember) -> Entry:
        """A member entry from :meth:`P4Info.decode_member` output."""
        return cls(
            table=decoded.profile,
            match=((MEMBER_ID, str(decoded.member_id)),),
            action=decoded.action,
            params=tuple(decoded.params.items()),
            kind=MEMBER,
        )

    @classmethod
    def from_group(cls, decoded: DecodedGroup) -> Entry:
        """A group entry from :meth:`P4Info.decode_group` output."""
        return cls(
            table=decoded.profile,
            match=((GROUP_ID, str(decoded.group_id)),),
            action="",
            kind=GROUP,
            members=tuple(sorted(decoded.members)),
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
            group=decoded.group,
        )

    @classmethod
    def from_proto(cls, info: P4Info, entry: Any) -> Entry:
        """An entry from a ``p4r.TableEntry`` read from a switch."""
        return cls.from_decoded(info.decode(entry))

    @classmethod
    def from_entity(cls, info: P4Info, entity: Any) -> Entry | None:
        """An entry from a ``p4r.Entity`` read from a switch (None for other entities)."""
        which = entity.WhichOneof("entity")
        if which == "table_entry":
            return cls.from_proto(info, entity.table_entry)
        if which == "action_profile_member":
            return cls.from_member(info.decode_member(entity.action_profile_member))
        if which == "action_profile_group":
            return cls.from_group(info.decode_group(entity.action_profile_group))
        return None

    @property
    def key(self) -> tuple[str, tuple[tuple[str, str], ...], bool, int, str]:
        """What identifies the entry in its table (two entries with one key cannot coexist)."""
        return (self.table, tuple(sorted(self.match)), self.is_default, self.priority, self.kind)

    @property
    def value(self) -> tuple[str, tuple[tuple[str, str], ...], tuple[int, ...], int]:
        """What the entry says under its key: a difference here is a modify."""
        return (self.action, tuple(sorted(self.params)), self.members, self.group)

    @property
    def number(self) -> int:
        """The member or group id of a member or group entry."""
        if self.kind == TABLE_ENTRY:
            raise ValueError(f"{self}: a table entry has no member or group id")
        return int(self.match[0][1])

    def to_proto(self, info: P4Info) -> Any:
        """The ``p4r.TableEntry`` (``ActionProfileMember``, ``ActionProfileGroup``) for this
        entry."""
        if self.kind == MEMBER:
            return info.profile_member(self.table, self.number, self.action, dict(self.params))
        if self.kind == GROUP:
            return info.profile_group(self.table, self.number, self.members)
        if self.is_default:
            return info.default_entry(self.table, self.action, dict(self.params))
        return info.table_entry(
            self.table,
            dict(self.match),
            self.action,
            dict(self.params),
            self.priority,
            group_id=self.group,
        )

    def to_entity(self, info: P4Info) -> Any:
        """The ``p4r.Entity`` holding :meth:`to_proto`."""
        entity = p4r.Entity()
        field_name = {MEMBER: "action_profile_member", GROUP: "action_profile_group"}.get(
            self.kind, "table_entry"
        )
        getattr(entity, field_name).CopyFrom(self.to_proto(info))
        return entity

    def param(self, name: str) -> str:
        """The text of action parameter ``name``."""
        return dict(self.params)[name]

    @property
    def outcome(self) -> str:
        """What the entry does, as printed after ``->``: ``set_next_hop(port=3, ...)``,
        ``group 1``, ``members 3, 4``."""
        if self.kind == GROUP:
            return f"members {', '.join(str(m) for m in self.members) or 'none'}"
        if self.group:
            return f"group {self.group}"
        args = ", ".join(f"{k}={v}" for k, v in self.params)
        return f"{self.action.rsplit('.', 1)[-1]}({args})"

    def __str__(self) -> str:
        short = self.table.rsplit(".", 1)[-1]
        if self.kind == GROUP:
            return f"{short} group {self.number} -> {self.outcome}"
        if self.kind == MEMBER:
            return f"{short} member {self.number} -> {self.outcome}"
        keys = ", ".join(f"{k}={v}" for k, v in self.match) or "default"
        return f"{short} [{keys}] -> {self.outcome}"


@dataclass(frozen=True)
class SwitchTables:
    """The intended state of one switch."""

    switch: str
    entries: tuple[Entry, ...]

    def by_table(self, table: str) -> list[Entry]:
        """The entries of one table."""
        return [e for e in self.entries if e.table == table]


def next_hop(port: Port) -> dict[str, object]:
    """``set_next_hop`` parameters that send a packet out of ``port`` to its peer."""
    return params_of(NextHopParams(port.number, port.mac, port.peer_mac))


def sid_entries(switch: Switch) -> list[Entry]:
    """The switch's own SIDs: uN ``/48`` -> usid_un, End ``/128`` -> srv6_end."""
    return [
        Entry.make(MY_SID, {DST_ADDR: switch.usid_prefix}, USID_UN),
        Entry.make(MY_SID, {DST_ADDR: ipaddress.IPv6Network((switch.end_sid, 128))}, SRV6_END),
    ]


def lpm_entries(fabric: Fabric, switch: Switch) -> list[Entry]:
    """Forwarding: T0 -> local NICs and spines; T1 -> the T0s of its plane and their NICs."""
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
                next_hop(port),
            )
        )
    if switch.tier is Tier.T1:
        for nic in fabric.plane_nics(switch.plane):
            port = switch.port_to(nic.switch)
            found.append(
                Entry.make(
                    IPV6_LPM,
                    {DST_ADDR: usidlib.prefix(fabric.block, nic.usid)},
                    SET_NEXT_HOP,
                    next_hop(port),
                )
            )
    return found


def ecmp_entries(fabric: Fabric, switch: Switch) -> list[Entry]:
    """ECMP on a T0: a member per uplink, the group of them all, and every NIC of another rack
    of the plane -> that group. A T1 has none (one down port per rack: nothing to choose)."""
    if switch.tier is not Tier.T0:
        return []
    uplinks = fabric.uplinks(switch)
    if not uplinks:
        return []
    found = [
        Entry.member(
            ECMP_SELECTOR,
            port.number,
            SET_NEXT_HOP,
            next_hop(port),
        )
        for port in uplinks
    ]
    found.append(Entry.group_of(ECMP_SELECTOR, UPLINKS_GROUP, [p.number for p in uplinks]))
    found.extend(
        Entry.to_group(IPV6_ECMP, {DST_ADDR: usidlib.prefix(fabric.block, nic.usid)}, UPLINKS_GROUP)
        for nic in fabric.plane_nics(switch.plane)
        if nic.switch != switch.name
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
        sid_entries(sw)
        + lpm_entries(fabric, sw)
        + ecmp_entries(fabric, sw)
        + qos_entries(fabric, sw, overrides)
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
            f"~ {new}  (installed: {old.outcome})"
            for new, old in zip(self.modifies, self.replaced, strict=False)
        ]
        if len(self.replaced) != len(self.modifies):
            modified = [f"~ {e}" for e in self.modifies]
        return [f"+ {e}" for e in self.inserts] + modified + [f"- {e}" for e in self.deletes]


def diff(
    intended: Sequence[Entry],
    installed: Sequence[Entry],
    managed: Sequence[str] = MANAGED_TABLES + MANAGED_PROFILES,
) -> Diff:
    """Compare the intended and the installed entries of one switch.

    Entries of tables (and action profiles) outside ``managed`` are left alone. A default
    entry that differs is a modify (default entries are never inserted or deleted).
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
        elif current.value != entry.value:
            modifies.append((entry, current))
    deletes = [e for k, e in have.items() if k not in want and not e.is_default]
    unknown = Entry(table="", match=(), action="(not read)")
    return Diff(
        tuple(inserts),
        tuple(new for new, _ in modifies),
        tuple(deletes),
        tuple(old or unknown for _, old in modifies),
    )
