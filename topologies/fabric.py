"""The fabric derived from a topology: nodes, ports, links, uSIDs, addresses, MACs and paths.

Naming and numbering (documented with a worked example in docs/addressing.md):

- switches ``t0-p{plane}-r{rack}`` (leaf) and ``t1-p{plane}-s{spine}`` (spine); device ids
  1, 2, ... plane by plane, leaves before spines;
- hosts ``h{index}``, host ``index`` sits in rack ``index // hosts_per_rack``; its NIC for plane
  ``p`` is interface ``h{index}-p{p}``, attached to ``t0-p{p}-r{rack}``;
- T0 ports: ``1..H`` to the rack's hosts (in host order), ``H+1..H+S`` up to spines ``0..S-1``;
  T1 ports: ``1..R`` down to racks ``0..R-1``; switch interfaces are ``{switch}-eth{port}``;
- uSIDs ``plane | tier | index`` (see :mod:`topologies.usid`); a NIC's address is
  ``block:uSID(NIC)::`` (the carrier a packet has when it arrives), a switch's classic End SID
  is ``block:uSID::e``;
- MACs are locally administered and carry the uSID: ``02:UU:UU:00:PP:PP`` with the node's uSID
  and the port (0 for a host NIC).

A :class:`Path` between two hosts is one (plane, spine) choice: its uSID carrier, the same route
as a classic SRH segment list, the same route split for SRv6 with an SRH, the NICs at both ends
and the switch hops with their ports.

The SRH split (:attr:`Path.srh_carrier`, :attr:`Path.srh_segment`) cuts the path's uSIDs after
the first one, the switch where the path turns: the spine between racks, the shared leaf within
a rack. The IPv6 destination is ``block:uSID(turn)::``; the switch at the turn finds it
exhausted and performs End, which copies the single SRH segment ``block:uSID(T0 dst):uSID(NIC)::``
(or ``block:uSID(NIC)::`` within a rack) into the destination; the destination leaf shifts as
for the plain carrier. Every path is thus uN (source leaf: route on the first uSID), End, uN.
"""

from __future__ import annotations

import enum
import ipaddress
from dataclasses import dataclass
from functools import cached_property

from topologies import usid as usidlib
from topologies.config import BASE_RTT_LINKS, IFNAME_MAX, RACK_LINKS, Topology, TopologyError
from topologies.usid import TierCode

END_FUNCTION = 0xE  # the low bits of a switch's classic End SID
#: SRv6 with an SRH: the path's uSIDs are cut after this many (the turn: spine or shared leaf)
SRH_SPLIT_AT = 1


class Tier(enum.Enum):
    """Switch tiers of a two-tier plane."""

    T0 = "t0"  # leaf: one per rack per plane
    T1 = "t1"  # spine

    @property
    def code(self) -> TierCode:
        """The tier field of this tier's uSIDs."""
        return TierCode.T0 if self is Tier.T0 else TierCode.T1


def mac_for(usid: int, port: int) -> str:
    """The MAC address of a node's port (``port`` 0 for a host NIC)."""
    return f"02:{usid >> 8:02x}:{usid & 0xFF:02x}:00:{port >> 8:02x}:{port & 0xFF:02x}"


@dataclass(frozen=True)
class Port:
    """One switch port and what is at the other end of its link."""

    number: int
    intf: str
    mac: str
    peer: str  # node name of the neighbour (switch or host)
    peer_port: int  # neighbour's port number (0 for a host NIC)
    peer_intf: str
    peer_mac: str


@dataclass(frozen=True)
class Switch:
    """A T0 or T1 switch of one plane."""

    name: str
    tier: Tier
    plane: int
    index: int  # rack for T0, spine for T1
    usid: int
    device_id: int
    ports: tuple[Port, ...]
    block: ipaddress.IPv6Network

    @cached_property
    def usid_prefix(self) -> ipaddress.IPv6Network:
        """``block:uSID::/48``: the uN SID of this switch, and the route towards it."""
        return usidlib.prefix(self.block, self.usid)

    @cached_property  # every path through the switch names it: once per switch, not per path
    def end_sid(self) -> ipaddress.IPv6Address:
        """The classic (RFC 8986 End) 128-bit SID of this switch: ``block:uSID::e``."""
        return ipaddress.IPv6Address(int(self.usid_prefix.network_address) | END_FUNCTION)

    def port(self, number: int) -> Port:
        """The port with this number."""
        for port in self.ports:
            if port.number == number:
                return port
        raise KeyError(f"{self.name} has no port {number}")

    def port_to(self, peer: str) -> Port:
        """The port whose link goes to node ``peer``."""
        for port in self.ports:
            if port.peer == peer:
                return port
        raise KeyError(f"{self.name} has no link to {peer}")


@dataclass(frozen=True)
class Nic:
    """A host's NIC on one plane."""

    host: str
    plane: int
    intf: str
    usid: int
    address: ipaddress.IPv6Address
    mac: str
    switch: str  # the T0 it attaches to
    switch_port: int
    gateway_mac: str  # MAC of that T0 port: the destination MAC of every frame the NIC sends


@dataclass(frozen=True)
class Host:
    """A host (GPU server) with one NIC per plane."""

    name: str
    index: int
    rack: int
    nics: tuple[Nic, ...]

    def nic(self, plane: int) -> Nic:
        """This host's NIC on ``plane``."""
        return self.nics[plane]


@dataclass(frozen=True)
class Link:
    """A cable: host NIC to T0, or T0 to T1. ``a_port`` is 0 for a host NIC."""

    plane: int
    a: str
    a_port: int
    a_intf: str
    b: str
    b_port: int
    b_intf: str


@dataclass(frozen=True)
class Hop:
    """A switch on a path, with the ports the packet enters and leaves by."""

    switch: str
    in_port: int
    out_port: int


@dataclass(frozen=True)
class Path:
    """One route between two hosts: a plane and, between racks, a spine."""

    src: str
    dst: str
    plane: int
    spine: int | None  # None within a rack
    carrier: ipaddress.IPv6Address  # the uSID carrier the sender puts in the destination
    segments: tuple[ipaddress.IPv6Address, ...]  # the same route as classic SIDs, in order
    #: SRv6 with an SRH: the IPv6 destination (a carrier up to the turn, spine or shared leaf)
    srh_carrier: ipaddress.IPv6Address
    #: ... and the SRH's single segment (a carrier of the rest, ending with the NIC's uSID)
    srh_segment: ipaddress.IPv6Address
    src_nic: Nic
    dst_nic: Nic
    hops: tuple[Hop, ...]

    @property
    def links(self) -> int:
        """Links the path crosses each way: :data:`RACK_LINKS` within a rack, else
        :data:`BASE_RTT_LINKS`."""
        return RACK_LINKS if self.spine is None else BASE_RTT_LINKS

    @property
    def label(self) -> str:
        """Short name such as ``p1-s0`` (plane 1, spine 0) or ``p1`` within a rack."""
        return f"p{self.plane}" if self.spine is None else f"p{self.plane}-s{self.spine}"


class Fabric:
    """Everything derived from one :class:`Topology`, computed once."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self.block = topology.usid_block
        self._switches: dict[str, Switch] = {}
        self._hosts: dict[str, Host] = {}
        self._links: list[Link] = []
        self._build()

    # -- construction ------------------------------------------------------------------------

    @staticmethod
    def t0_name(plane: int, rack: int) -> str:
        """Name of the leaf of ``rack`` in ``plane``."""
        return f"t0-p{plane}-r{rack}"

    @staticmethod
    def t1_name(plane: int, spine: int) -> str:
        """Name of spine ``spine`` of ``plane``."""
        return f"t1-p{plane}-s{spine}"

    @staticmethod
    def host_name(index: int) -> str:
        """Name of host ``index``."""
        return f"h{index}"

    def _build(self) -> None:
        topo = self.topology
        hpr, spines, racks = topo.hosts_per_rack, topo.spines_per_plane, topo.racks
        longest = f"{self.t0_name(topo.planes - 1, racks - 1)}-eth{hpr + spines}"
        if len(longest) > IFNAME_MAX:
            raise TopologyError(
                topo.source,
                "racks",
                racks,
                f"a fabric whose interface names fit Linux's {IFNAME_MAX} characters "
                f"('{longest}' is {len(longest)})",
            )

        def switch_intf(name: str, port: int) -> str:
            return f"{name}-eth{port}"

        device_id = 0
        nics_of: dict[int, list[Nic]] = {h: [] for h in range(topo.hosts)}
        for plane in range(topo.planes):
            t0_usids = [usidlib.encode(plane, TierCode.T0, r) for r in range(racks)]
            t1_usids = [usidlib.encode(plane, TierCode.T1, s) for s in range(spines)]
            for rack in range(racks):
                name = self.t0_name(plane, rack)
                ports = []
                for k in range(hpr):
                    host = rack * hpr + k
                    nic_usid = usidlib.encode(plane, TierCode.HOST, host)
                    nic = Nic(
                        host=self.host_name(host),
                        plane=plane,
                        intf=f"{self.host_name(host)}-p{plane}",
                        usid=nic_usid,
                        address=usidlib.carrier(self.block, [nic_usid]),
                        mac=mac_for(nic_usid, 0),
                        switch=name,
                        switch_port=k + 1,
                        gateway_mac=mac_for(t0_usids[rack], k + 1),
                    )
                    nics_of[host].append(nic)
                    ports.append(
                        Port(
                            number=k + 1,
                            intf=switch_intf(name, k + 1),
                            mac=mac_for(t0_usids[rack], k + 1),
                            peer=nic.host,
                            peer_port=0,
                            peer_intf=nic.intf,
                            peer_mac=nic.mac,
                        )
                    )
                    self._links.append(
                        Link(plane, nic.host, 0, nic.intf, name, k + 1, switch_intf(name, k + 1))
                    )
                for spine in range(spines):
                    number = hpr + 1 + spine
                    peer = self.t1_name(plane, spine)
                    ports.append(
                        Port(
                            number=number,
                            intf=switch_intf(name, number),
                            mac=mac_for(t0_usids[rack], number),
                            peer=peer,
                            peer_port=rack + 1,
                            peer_intf=switch_intf(peer, rack + 1),
                            peer_mac=mac_for(t1_usids[spine], rack + 1),
                        )
                    )
                    self._links.append(
                        Link(
                            plane,
                            name,
                            number,
                            switch_intf(name, number),
                            peer,
                            rack + 1,
                            switch_intf(peer, rack + 1),
                        )
                    )
                device_id += 1
                self._switches[name] = Switch(
                    name, Tier.T0, plane, rack, t0_usids[rack], device_id, tuple(ports), self.block
                )
            for spine in range(spines):
                name = self.t1_name(plane, spine)
                ports = [
                    Port(
                        number=rack + 1,
                        intf=switch_intf(name, rack + 1),
                        mac=mac_for(t1_usids[spine], rack + 1),
                        peer=self.t0_name(plane, rack),
                        peer_port=hpr + 1 + spine,
                        peer_intf=switch_intf(self.t0_name(plane, rack), hpr + 1 + spine),
                        peer_mac=mac_for(t0_usids[rack], hpr + 1 + spine),
                    )
                    for rack in range(racks)
                ]
                device_id += 1
                self._switches[name] = Switch(
                    name,
                    Tier.T1,
                    plane,
                    spine,
                    t1_usids[spine],
                    device_id,
                    tuple(ports),
                    self.block,
                )
        for host in range(topo.hosts):
            name = self.host_name(host)
            self._hosts[name] = Host(name, host, host // hpr, tuple(nics_of[host]))

    # -- lookups -----------------------------------------------------------------------------

    @property
    def switches(self) -> list[Switch]:
        """All switches, in device-id order."""
        return list(self._switches.values())

    @property
    def hosts(self) -> list[Host]:
        """All hosts, in index order."""
        return list(self._hosts.values())

    @property
    def links(self) -> list[Link]:
        """All links: host NICs first within each plane's leaves, then leaf-spine links."""
        return list(self._links)

    def switch(self, name: str) -> Switch:
        """The switch called ``name``."""
        try:
            return self._switches[name]
        except KeyError:
            raise KeyError(f"no switch '{name}' in fabric {self.topology.name}") from None

    def host(self, name: str) -> Host:
        """The host called ``name``."""
        try:
            return self._hosts[name]
        except KeyError:
            raise KeyError(
                f"no host '{name}' in fabric {self.topology.name} "
                f"(hosts are h0..h{self.topology.hosts - 1})"
            ) from None

    def node_kind(self, name: str) -> str:
        """``"switch"`` or ``"host"``."""
        if name in self._switches:
            return "switch"
        if name in self._hosts:
            return "host"
        raise KeyError(f"no node '{name}' in fabric {self.topology.name}")

    @cached_property
    def _by_usid(self) -> dict[int, Switch | Nic]:
        table: dict[int, Switch | Nic] = {s.usid: s for s in self._switches.values()}
        for host in self._hosts.values():
            table.update({nic.usid: nic for nic in host.nics})
        return table

    def node_of_usid(self, usid: int) -> Switch | Nic:
        """The switch or host NIC that owns ``usid``."""
        try:
            return self._by_usid[usid]
        except KeyError:
            raise KeyError(f"uSID {usid:#06x} belongs to no node of {self.topology.name}") from None

    def nic_of_address(self, address: ipaddress.IPv6Address) -> Nic:
        """The host NIC whose address is ``address``."""
        node = self._by_usid.get(usidlib.active(address))
        if isinstance(node, Nic) and node.address == address:
            return node
        raise KeyError(f"{address} is no host NIC address of {self.topology.name}")

    def links_to(self, nic: Nic, destination: ipaddress.IPv6Address) -> int:
        """The links a packet that ``nic`` sends to ``destination`` crosses to its last NIC:
        :data:`RACK_LINKS` when it turns at the NIC's own T0 (a carrier whose active uSID is
        that T0, or the address of a NIC of the same rack and plane), :data:`BASE_RTT_LINKS`
        otherwise (through a T1 to another rack; also a destination that names no node of the
        fabric, which the T0 sends up or drops: the longest path is the bound)."""
        node = self._by_usid.get(usidlib.active(destination))
        if destination not in self.block or node is None:
            return BASE_RTT_LINKS
        turn = node.name if isinstance(node, Switch) else node.switch
        return RACK_LINKS if turn == nic.switch else BASE_RTT_LINKS

    def uplinks(self, switch: Switch | str) -> tuple[Port, ...]:
        """A T0's ports up to the spines of its plane, in spine order (its ECMP choices);
        empty for a T1."""
        sw = self.switch(switch) if isinstance(switch, str) else switch
        if sw.tier is not Tier.T0:
            return ()
        return tuple(
            p
            for p in sw.ports
            if p.peer in self._switches and self._switches[p.peer].tier is Tier.T1
        )

    def plane_nics(self, plane: int) -> list[Nic]:
        """The host NICs of ``plane``, in host order."""
        if not 0 <= plane < self.topology.planes:
            raise ValueError(
                f"plane {plane}: fabric {self.topology.name} has planes 0..{self.topology.planes - 1}"
            )
        return [host.nic(plane) for host in self._hosts.values()]

    # -- paths -------------------------------------------------------------------------------

    def paths(self, src: str, dst: str) -> list[Path]:
        """Every path from host ``src`` to host ``dst``: planes outer, spines inner."""
        a, b = self.host(src), self.host(dst)
        if a.name == b.name:
            raise ValueError(f"no path from {src} to itself")
        found = []
        for plane in range(self.topology.planes):
            sa, sb = a.nic(plane), b.nic(plane)
            leaf_a = self.switch(self.t0_name(plane, a.rack))
            leaf_b = self.switch(self.t0_name(plane, b.rack))
            if a.rack == b.rack:
                hop = Hop(leaf_a.name, sa.switch_port, sb.switch_port)
                found.append(self._path(sa, sb, None, [leaf_b], (hop,)))
                continue
            for spine_index in range(self.topology.spines_per_plane):
                spine = self.switch(self.t1_name(plane, spine_index))
                up = leaf_a.port_to(spine.name)
                down = spine.port_to(leaf_b.name)
                hops = (
                    Hop(leaf_a.name, sa.switch_port, up.number),
                    Hop(spine.name, up.peer_port, down.number),
                    Hop(leaf_b.name, down.peer_port, sb.switch_port),
                )
                found.append(self._path(sa, sb, spine_index, [spine, leaf_b], hops))
        return found

    def _path(
        self, sa: Nic, sb: Nic, spine: int | None, via: list[Switch], hops: tuple[Hop, ...]
    ) -> Path:
        """The path from NIC ``sa`` to NIC ``sb`` through the End SIDs of ``via``."""
        route = [*(switch.usid for switch in via), sb.usid]
        srh_carrier, srh_segment = usidlib.split(self.block, route, SRH_SPLIT_AT)
        return Path(
            src=sa.host,
            dst=sb.host,
            plane=sa.plane,
            spine=spine,
            carrier=usidlib.carrier(self.block, route),
            segments=(*(switch.end_sid for switch in via), sb.address),
            srh_carrier=srh_carrier,
            srh_segment=srh_segment,
            src_nic=sa,
            dst_nic=sb,
            hops=hops,
        )

    def summary(self) -> str:
        """One line such as ``2 planes x 2 racks x 2 spines/plane, 8 switches, 4 hosts x 2 NICs``."""
        t = self.topology
        return (
            f"fabric {t.name}: {t.planes} planes x {t.racks} racks x {t.spines_per_plane} "
            f"spines/plane, {len(self._switches)} switches, {t.hosts} hosts x {t.planes} NICs, "
            f"{len(self._links)} links at {t.link_rate_mbps:g} Mb/s, {t.link_delay_us:g} us"
        )
