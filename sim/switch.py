"""What a sim switch forwards by: the P4 program's tables, in the form the sim's switches read.

A switch of the sim (:mod:`sim.network`) decides every frame as ``p4src/mrc_switch.p4`` does
(docs/p4-pipeline.md): the parser's checks, the hop limit, ``my_sid`` (uN shift, or End when
the carrier is exhausted or the End SID matched), ``ipv6_ecmp`` (a group's member picked by the
ECMP hash, :func:`p4src.contract.member_index`) or else ``ipv6_lpm`` (a next hop: port and
MACs), then at the egress port ``port_qos`` (trim or ECN) and the priority. What it looks up is
a :class:`SwitchTables`, built one of two ways:

- :meth:`SwitchTables.of_fabric`: from the fabric model, the entries the controller installs
  (:func:`controller.entries.switch_tables`) computed directly in this form, fast enough for
  fabrics of thousands of hosts (``tests/sim/test_sim_switch.py`` holds the two equal on the
  shipped fabrics). Port QoS is then the network's (:class:`sim.network.SimNet`'s thresholds);
- :meth:`SwitchTables.of_entries`: from table entries (:class:`controller.entries.Entry`) as a
  controller or a test installs them on one switch, ``port_qos`` included:
  ``tests/dataplane/targets_sim.py`` runs the data-plane case table against the sim's switch so.

``my_sid``, ``ipv6_ecmp`` and ``ipv6_lpm`` are the switch model's longest-prefix match,
:class:`switchmodel.tables.LpmTable` (one dict per prefix length, the longest first: what the
per-frame path walks, one probe for a table of ``/48`` s). Here:

- :class:`Hop`: the action data of ``set_next_hop`` (port and the 12 bytes of MACs);
- :data:`UN`, :data:`END`: the actions of ``my_sid`` (0 is ``NoAction``);
- :data:`DROP_COUNTERS`: the sim's counter of each drop reason the program counts.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from p4src.contract import (
    DROP_NO_ROUTE,
    ECMP_SELECTOR,
    IPV6_ECMP,
    IPV6_LPM,
    MY_SID,
    NO_ACTION,
    PORT_QOS,
    SET_NEXT_HOP,
    SET_PORT_QOS,
    SRV6_END,
    USID_UN,
    DropReason,
    PortQosParams,
)
from switchmodel.tables import LpmTable
from topologies import Fabric, Switch, Tier

if TYPE_CHECKING:
    from controller.entries import Entry

#: ``my_sid`` actions as the per-frame path compares them (0: ``NoAction``)
UN = 1
END = 2
_SID_ACTIONS = {USID_UN: UN, SRV6_END: END, NO_ACTION: 0}

#: The sim's counter (:attr:`sim.network.Network.counters`) of each drop reason the program counts.
DROP_COUNTERS: dict[DropReason, str] = {
    reason: f"drop_{reason.name.lower()}" for reason in tuple(DropReason)[:6]
}

_ADDR_BITS = 128
_INDEX_BITS = 48  # block (32) + the first uSID (16): what the fabric's entries match


class Hop(NamedTuple):
    """The action data of ``set_next_hop``: the egress port and the MACs it writes."""

    port: int
    macs: bytes  #: destination MAC + source MAC: the first 12 bytes of the frame out

    @classmethod
    def of(cls, port: int, smac: str, dmac: str) -> Hop:
        """The next hop ``set_next_hop(port, smac, dmac)``, MACs as text."""
        return cls(port, _mac(dmac) + _mac(smac))


#: ``drop_no_route`` as ``ipv6_lpm`` action data: a next hop no frame leaves by.
NO_ROUTE = Hop(-1, b"")


def _mac(text: str) -> bytes:
    raw = bytes.fromhex(text.replace(":", ""))
    if len(raw) != 6:
        raise ValueError(f"MAC {text!r}: expected six bytes, aa:bb:cc:dd:ee:ff")
    return raw


@dataclass(eq=True)
class SwitchTables:
    """The tables of one switch: what its frames are decided by.

    ``ipv6_ecmp`` maps a prefix to its group's next hops in the order BMv2 picks from (member
    handle order); a group without members is not entered (the program treats a hit on an
    empty group as a miss). ``port_qos`` maps a port to its thresholds (None: ``NoAction``,
    no trimming or ECN there); ports of neither get ``port_qos_default``.
    """

    my_sid: LpmTable[int] = field(default_factory=LpmTable)
    my_sid_default: int = 0
    ipv6_ecmp: LpmTable[tuple[Hop, ...]] = field(default_factory=LpmTable)
    ipv6_lpm: LpmTable[Hop] = field(default_factory=LpmTable)
    ipv6_lpm_default: Hop = NO_ROUTE
    port_qos: dict[int, PortQosParams | None] = field(default_factory=dict)
    port_qos_default: PortQosParams | None = None

    def qos(self, port: int) -> PortQosParams | None:
        """The thresholds of egress ``port`` (None: no trimming, no ECN)."""
        return self.port_qos.get(port, self.port_qos_default)

    @classmethod
    def of_fabric(cls, fabric: Fabric, sw: Switch) -> SwitchTables:
        """The forwarding tables the controller installs on ``sw`` (docs/controller.md):
        ``my_sid`` its uN ``/48`` and End ``/128``; ``ipv6_lpm`` a ``/48`` per neighbour (a
        host's NIC, or a switch: on a T1 only the T0s) and, on a T1, per NIC of its plane
        (down to the NIC's leaf); on a T0 with uplinks, ``ipv6_ecmp`` the ``/48`` of every NIC
        of its plane in another rack -> the uplinks, in spine order. ``port_qos`` is left
        empty (the network's thresholds apply)."""
        base = int(fabric.block.network_address) >> (_ADDR_BITS - 32) << 16
        tables = cls()
        tables.my_sid = LpmTable.of_prefixes(_INDEX_BITS, {base | sw.usid: UN})
        tables.my_sid.insert(int(sw.end_sid), _ADDR_BITS, END)
        routes: dict[int, Hop] = {}
        for port in sw.ports:
            hop = Hop.of(port.number, port.mac, port.peer_mac)
            if fabric.node_kind(port.peer) == "host":
                routes[base | fabric.host(port.peer).nic(sw.plane).usid] = hop
                continue
            peer = fabric.switch(port.peer)
            if sw.tier is Tier.T1 and peer.tier is not Tier.T0:
                continue
            routes[base | peer.usid] = hop
        nics = fabric.plane_nics(sw.plane)
        uplinks = fabric.uplinks(sw)
        if sw.tier is Tier.T1:
            down = {p.peer: Hop.of(p.number, p.mac, p.peer_mac) for p in sw.ports}
            for nic in nics:
                routes[base | nic.usid] = down[nic.switch]
        elif uplinks:
            group = tuple(Hop.of(p.number, p.mac, p.peer_mac) for p in uplinks)
            remote = {base | nic.usid: group for nic in nics if nic.switch != sw.name}
            tables.ipv6_ecmp = LpmTable.of_prefixes(_INDEX_BITS, remote)
        tables.ipv6_lpm = LpmTable.of_prefixes(_INDEX_BITS, routes)
        return tables

    @classmethod
    def of_entries(cls, entries: Iterable[Entry]) -> SwitchTables:
        """The tables these entries make (table entries, default entries, ``ecmp_selector``
        members and groups; anything a table does not set keeps the program's default).

        A group's members are ordered as BMv2 orders them on a fresh switch: in the order the
        member entries come. Raises ValueError naming the entry that is not one the program
        takes.
        """
        from controller.entries import GROUP, MEMBER

        entries = list(entries)
        members: dict[int, Hop] = {}
        for entry in entries:
            if entry.kind == MEMBER:
                _expect(entry, entry.table == ECMP_SELECTOR and entry.action == SET_NEXT_HOP)
                members[entry.number] = _hop(entry)
        groups: dict[int, tuple[Hop, ...]] = {}
        for entry in entries:
            if entry.kind == GROUP:
                _expect(entry, entry.table == ECMP_SELECTOR)
                missing = [m for m in entry.members if m not in members]
                if missing:
                    raise ValueError(f"{entry}: no member {missing[0]} in {ECMP_SELECTOR}")
                order = [m for m in members if m in entry.members]  # creation order
                groups[entry.number] = tuple(members[m] for m in order)
        tables = cls()
        for entry in entries:
            if entry.kind in (MEMBER, GROUP):
                continue
            action = entry.action
            if entry.is_default:
                if entry.table == MY_SID and action in _SID_ACTIONS:
                    tables.my_sid_default = _SID_ACTIONS[action]
                elif entry.table == IPV6_LPM and action in (SET_NEXT_HOP, DROP_NO_ROUTE):
                    tables.ipv6_lpm_default = _hop(entry) if action == SET_NEXT_HOP else NO_ROUTE
                elif entry.table == PORT_QOS and action in (SET_PORT_QOS, NO_ACTION):
                    tables.port_qos_default = _qos(entry) if action == SET_PORT_QOS else None
                elif not (entry.table == IPV6_ECMP and action == NO_ACTION):
                    _expect(entry, False)
                continue
            if entry.table == PORT_QOS:
                _expect(entry, action in (SET_PORT_QOS, NO_ACTION))
                port = int(_match(entry))
                tables.port_qos[port] = _qos(entry) if action == SET_PORT_QOS else None
                continue
            prefix = ipaddress.IPv6Network(_match(entry))
            value, length = int(prefix.network_address), prefix.prefixlen
            if entry.table == MY_SID:
                _expect(entry, action in _SID_ACTIONS)
                tables.my_sid.insert(value, length, _SID_ACTIONS[action])
            elif entry.table == IPV6_LPM:
                _expect(entry, action in (SET_NEXT_HOP, DROP_NO_ROUTE))
                tables.ipv6_lpm.insert(
                    value, length, _hop(entry) if action == SET_NEXT_HOP else NO_ROUTE
                )
            elif entry.table == IPV6_ECMP:
                if entry.group:
                    if entry.group not in groups:
                        raise ValueError(f"{entry}: no group {entry.group} in {ECMP_SELECTOR}")
                    if groups[entry.group]:
                        tables.ipv6_ecmp.insert(value, length, groups[entry.group])
                elif action == SET_NEXT_HOP:
                    tables.ipv6_ecmp.insert(value, length, (_hop(entry),))
                else:
                    _expect(entry, action == NO_ACTION)
            else:
                _expect(entry, False)
        return tables


def _expect(entry: Entry, ok: bool) -> None:
    if not ok:
        raise ValueError(
            f"{entry}: not an entry of the mrc_switch program (expected a table, action and "
            "parameters of p4src/contract.py)"
        )


def _match(entry: Entry) -> str:
    if len(entry.match) != 1:
        raise ValueError(f"{entry}: expected one match field")
    return entry.match[0][1]


def _hop(entry: Entry) -> Hop:
    params = dict(entry.params)
    try:
        return Hop.of(int(params["port"]), params["smac"], params["dmac"])
    except KeyError as missing:
        raise ValueError(f"{entry}: set_next_hop without parameter {missing}") from None


def _qos(entry: Entry) -> PortQosParams:
    params = dict(entry.params)
    try:
        return PortQosParams(**{name: int(params[name]) for name in PortQosParams._fields})
    except KeyError as missing:
        raise ValueError(f"{entry}: set_port_qos without parameter {missing}") from None
