"""The computed tables forward every path of the shipped fabrics, hop by hop.

A small walker applies the pipeline's forwarding semantics (my_sid: uN shift or End; then
ipv6_ecmp, whose group's member the walker is told to take, else ipv6_lpm) to the intended
entries of each switch, starting at the source NIC's T0 and following the egress port to its
peer through the fabric model, for every host pair and every path, and for plain NIC addresses
(EVs that are not paths) over every uplink of the source leaf.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from support.fabric import small_fabric

from controller.entries import (
    GROUP,
    MEMBER,
    UPLINKS_GROUP,
    Entry,
    SwitchTables,
    diff,
    fabric_tables,
    switch_tables,
)
from controller.p4info import P4Info
from controller.qos import PortQos, QosError, QosOverrides, default_qos, threshold_qos, uet_qos
from p4src import contract
from p4src.contract import (
    DROP_NO_ROUTE,
    ECMP_SELECTOR,
    IPV6_ECMP,
    IPV6_LPM,
    MY_SID,
    PORT_QOS,
    SET_NEXT_HOP,
    SRV6_END,
    USID_UN,
)
from topologies import Fabric, Tier, load_topology
from topologies import usid as usidlib
from topologies.config import shipped_topology

TOPOLOGIES = ("small", "default")


@pytest.fixture(scope="module", params=TOPOLOGIES)
def fabric(request: pytest.FixtureRequest) -> Fabric:
    return Fabric(load_topology(shipped_topology(request.param)))


def longest_match(entries: list[Entry], dst: ipaddress.IPv6Address) -> Entry | None:
    best: tuple[int, Entry] | None = None
    for entry in entries:
        if entry.is_default:
            continue
        prefix = ipaddress.IPv6Network(dict(entry.match)[contract.DST_ADDR])
        if dst in prefix and (best is None or prefix.prefixlen > best[0]):
            best = (prefix.prefixlen, entry)
    return best[1] if best else None


@dataclass
class Packet:
    dst: ipaddress.IPv6Address
    segment_list: list[ipaddress.IPv6Address] = field(default_factory=list)  # wire order
    segments_left: int = 0


@dataclass
class Arrival:
    nic: str  # host NIC interface the packet left the fabric on
    plane: int
    dst: ipaddress.IPv6Address
    dmac: str
    hops: list[tuple[str, int, int]]


class Dropped(Exception):
    pass


def ecmp_route(entries: SwitchTables, dst: ipaddress.IPv6Address, pick: int) -> Entry | None:
    """The member ``ipv6_ecmp`` sends ``dst`` to, taking member ``pick`` (mod the group's size,
    members in id order) of the group, or None when ipv6_ecmp has no entry for ``dst``."""
    entry = longest_match(entries.by_table(IPV6_ECMP), dst)
    if entry is None:
        return None
    groups = {g.number: g for g in entries.by_table(ECMP_SELECTOR) if g.kind == GROUP}
    members = {m.number: m for m in entries.by_table(ECMP_SELECTOR) if m.kind == MEMBER}
    group = groups[entry.group]
    assert group.members, f"{entries.switch}: group {entry.group} is empty"
    return members[group.members[pick % len(group.members)]]


def walk(  # type: ignore[no-untyped-def]
    fabric: Fabric, tables: dict[str, SwitchTables], src_nic, packet: Packet, pick: int = 0
) -> Arrival:
    """Forward ``packet`` from ``src_nic`` through the intended tables until it leaves; an ECMP
    group sends it to its member ``pick``."""
    switch = fabric.switch(src_nic.switch)
    in_port = src_nic.switch_port
    hops: list[tuple[str, int, int]] = []
    for _ in range(8):
        entries = tables[switch.name]
        sid = longest_match(entries.by_table(MY_SID), packet.dst)
        if sid is not None:
            end = sid.action == SRV6_END or usidlib.exhausted(packet.dst)
            if sid.action == USID_UN and not end:
                packet.dst = usidlib.shift(packet.dst)
            elif packet.segment_list and packet.segments_left > 0:
                packet.segments_left -= 1
                packet.dst = packet.segment_list[packet.segments_left]
            else:
                raise Dropped(f"SID_END at {switch.name}")
        route = ecmp_route(entries, packet.dst, pick)
        if route is None:
            route = longest_match(entries.by_table(IPV6_LPM), packet.dst)
        if route is None:
            default = [e for e in entries.by_table(IPV6_LPM) if e.is_default]
            assert default and default[0].action == DROP_NO_ROUTE
            raise Dropped(f"NO_ROUTE at {switch.name} for {packet.dst}")
        hop = contract.NextHopParams(**dict(route.params))
        port = switch.port(int(hop.port))
        assert hop.smac == port.mac
        assert hop.dmac == port.peer_mac
        hops.append((switch.name, in_port, port.number))
        if fabric.node_kind(port.peer) == "host":
            nic = fabric.host(port.peer).nic(switch.plane)
            return Arrival(nic.intf, switch.plane, packet.dst, hop.dmac, hops)
        nxt = fabric.switch(port.peer)
        assert nxt.plane == switch.plane, "planes are disjoint networks"
        switch, in_port = nxt, port.peer_port
    raise AssertionError(f"forwarding loop: {hops}")


def all_paths(fabric: Fabric):  # type: ignore[no-untyped-def]
    for a in fabric.hosts:
        for b in fabric.hosts:
            if a.name != b.name:
                yield from fabric.paths(a.name, b.name)


def test_usid_carrier_reaches_the_nic_exhausted_on_every_path(fabric: Fabric) -> None:
    tables = fabric_tables(fabric)
    walked = 0
    for path in all_paths(fabric):
        arrival = walk(fabric, tables, path.src_nic, Packet(path.carrier))
        assert arrival.nic == path.dst_nic.intf
        assert arrival.plane == path.plane
        assert arrival.dst == path.dst_nic.address
        assert usidlib.exhausted(arrival.dst)
        assert arrival.dmac == path.dst_nic.mac
        assert arrival.hops == [(h.switch, h.in_port, h.out_port) for h in path.hops]
        walked += 1
    t = fabric.topology
    pairs = [(a, b) for a in fabric.hosts for b in fabric.hosts if a.name != b.name]
    expected = sum(t.planes * (1 if a.rack == b.rack else t.spines_per_plane) for a, b in pairs)
    assert walked == expected


def test_classic_srh_segments_route_on_every_path(fabric: Fabric) -> None:
    tables = fabric_tables(fabric)
    for path in all_paths(fabric):
        segments = list(path.segments)
        packet = Packet(
            dst=segments[0],
            segment_list=list(reversed(segments)),
            segments_left=len(segments) - 1,
        )
        arrival = walk(fabric, tables, path.src_nic, packet)
        assert arrival.nic == path.dst_nic.intf
        assert arrival.dst == path.dst_nic.address
        assert packet.segments_left == 0
        assert arrival.hops == [(h.switch, h.in_port, h.out_port) for h in path.hops]


def test_unknown_destination_is_dropped_no_route(fabric: Fabric) -> None:
    tables = fabric_tables(fabric)
    nic = fabric.hosts[0].nic(0)
    stranger = ipaddress.IPv6Address("2001:db8::1")
    with pytest.raises(Dropped, match="NO_ROUTE"):
        walk(fabric, tables, nic, Packet(stranger))
    # a carrier of another plane does not route inside this plane
    other = fabric.hosts[-1].nic(fabric.topology.planes - 1)
    if fabric.topology.planes > 1:
        with pytest.raises(Dropped, match="NO_ROUTE"):
            walk(fabric, tables, nic, Packet(other.address))


def test_exhausted_carrier_at_a_switch_sid_is_dropped(fabric: Fabric) -> None:
    tables = fabric_tables(fabric)
    nic = fabric.hosts[0].nic(0)
    leaf = fabric.switch(nic.switch)
    with pytest.raises(Dropped, match="SID_END"):
        walk(fabric, tables, nic, Packet(leaf.usid_prefix.network_address))


def test_every_switch_gets_its_sids_routes_qos_and_default(fabric: Fabric) -> None:
    qos = default_qos(fabric.topology)
    t = fabric.topology
    for switch in fabric.switches:
        tables = switch_tables(fabric, switch)
        sids = {dict(e.match)[contract.DST_ADDR]: e.action for e in tables.by_table(MY_SID)}
        assert sids == {
            f"{switch.usid_prefix.network_address}/48": USID_UN,
            f"{switch.end_sid}/128": SRV6_END,
        }
        routes = [e for e in tables.by_table(IPV6_LPM) if not e.is_default]
        expected = (
            t.hosts_per_rack + t.spines_per_plane
            if switch.tier is Tier.T0
            else t.racks + t.hosts  # its leaves, and every NIC of its plane
        )
        assert len(routes) == expected
        assert [e.action for e in tables.by_table(IPV6_LPM) if e.is_default] == [DROP_NO_ROUTE]
        ports = {int(dict(e.match)[contract.EGRESS_SPEC]): e for e in tables.by_table(PORT_QOS)}
        assert sorted(ports) == [p.number for p in switch.ports]
        for number, entry in ports.items():
            to_host = fabric.node_kind(switch.port(number).peer) == "host"
            params = {k: str(v) for k, v in qos.action_params(t.queue_depth, to_host).items()}
            assert dict(entry.params) == params
            # trims at a port that faces a host are the last hop's (DSCP 13)
            assert contract.PortQosParams(**dict(entry.params)).last_hop == str(int(to_host))


def test_plain_nic_address_reaches_the_nic_over_every_uplink(fabric: Fabric) -> None:
    """An EV that is not a path (STEV, UDP) is sent to the NIC's plain address: the source
    leaf's ECMP group may take any uplink, and every one of them gets it to the NIC."""
    tables = fabric_tables(fabric)
    t = fabric.topology
    for a in fabric.hosts:
        for b in fabric.hosts:
            if a.name == b.name:
                continue
            for plane in range(t.planes):
                src, dst = a.nic(plane), b.nic(plane)
                spines = set()
                picks = range(t.spines_per_plane) if a.rack != b.rack else range(1)
                for pick in picks:
                    arrival = walk(fabric, tables, src, Packet(dst.address), pick)
                    assert arrival.nic == dst.intf
                    assert arrival.dst == dst.address
                    assert arrival.dmac == dst.mac
                    if a.rack == b.rack:
                        assert arrival.hops == [(src.switch, src.switch_port, dst.switch_port)]
                    else:
                        assert len(arrival.hops) == 3
                        spines.add(arrival.hops[1][0])
                if a.rack != b.rack:
                    assert spines == {
                        fabric.t1_name(plane, s) for s in range(t.spines_per_plane)
                    }, "the ECMP group covers every spine of the plane"


def test_every_leaf_gets_one_ecmp_group_of_its_uplinks(fabric: Fabric) -> None:
    t = fabric.topology
    for switch in fabric.switches:
        tables = switch_tables(fabric, switch)
        profile = tables.by_table(ECMP_SELECTOR)
        routes = tables.by_table(IPV6_ECMP)
        if switch.tier is Tier.T1:
            assert profile == [] and routes == []
            continue
        uplinks = fabric.uplinks(switch)
        assert [p.peer for p in uplinks] == [
            fabric.t1_name(switch.plane, s) for s in range(t.spines_per_plane)
        ]
        members = [e for e in profile if e.kind == MEMBER]
        assert [(m.number, m.action) for m in members] == [
            (p.number, SET_NEXT_HOP) for p in uplinks
        ]
        for member, port in zip(members, uplinks, strict=True):
            assert dict(member.params) == contract.params_of(
                contract.NextHopParams(str(port.number), port.mac, port.peer_mac)
            )
        groups = [e for e in profile if e.kind == GROUP]
        assert [(g.number, g.members) for g in groups] == [
            (UPLINKS_GROUP, tuple(p.number for p in uplinks))
        ]
        remote = [
            f"{usidlib.prefix(fabric.block, n.usid)}"
            for n in fabric.plane_nics(switch.plane)
            if n.switch != switch.name
        ]
        assert [dict(e.match)[contract.DST_ADDR] for e in routes] == remote
        assert {e.group for e in routes} == {UPLINKS_GROUP}
        assert len(remote) == t.hosts - t.hosts_per_rack


def test_diff_covers_the_ecmp_groups() -> None:
    fabric = small_fabric()
    intended = switch_tables(fabric, "t0-p0-r0").entries
    members = [e for e in intended if e.kind == MEMBER]
    group = next(e for e in intended if e.kind == GROUP)
    ecmp = [e for e in intended if e.table == IPV6_ECMP]
    # nothing installed: members, the group and its routes are all inserts
    changes = diff(intended, [])
    assert set(members + [group] + ecmp) <= set(changes.inserts)
    # a group that lost a member is a modify of the group, shown with what is installed
    shrunk = Entry.group_of(ECMP_SELECTOR, group.number, group.members[:1])
    stray = Entry.member(ECMP_SELECTOR, 99, SET_NEXT_HOP, dict(members[0].params))
    installed = [e for e in intended if e != group] + [shrunk, stray]
    changes = diff(intended, installed)
    assert changes.modifies == (group,) and changes.inserts == ()
    assert changes.deletes == (stray,)
    assert changes.lines()[0] == (
        f"~ ecmp_selector group 1 -> members 3, 4  (installed: members {group.members[0]})"
    )
    # a route pointing at another group is a modify too
    moved = Entry.to_group(IPV6_ECMP, dict(ecmp[0].match), 2)
    changes = diff(intended, [e for e in intended if e != ecmp[0]] + [moved])
    assert changes.modifies == (ecmp[0],)


def test_ecmp_entries_build_p4runtime_messages() -> None:
    info = P4Info.load()
    fabric = small_fabric()
    tables = switch_tables(fabric, "t0-p0-r0")
    member, group = (next(e for e in tables.entries if e.kind == kind) for kind in (MEMBER, GROUP))
    route = tables.by_table(IPV6_ECMP)[0]
    m = member.to_proto(info)
    assert (m.action_profile_id, m.member_id) == (info.action_profile_id(ECMP_SELECTOR), 3)
    assert m.action.action_id == info.action_id(SET_NEXT_HOP)
    g = group.to_proto(info)
    assert [x.member_id for x in g.members] == [3, 4] and {x.weight for x in g.members} == {1}
    r = route.to_proto(info)
    assert r.action.action_profile_group_id == UPLINKS_GROUP
    # and back
    assert Entry.from_entity(info, member.to_entity(info)) == member
    assert Entry.from_entity(info, group.to_entity(info)) == group
    assert Entry.from_entity(info, route.to_entity(info)) == route
    assert str(route) == "ipv6_ecmp [hdr.ipv6.dst_addr=fcbb:bb00:c02::/48] -> group 1"


def test_qos_defaults_follow_the_profile() -> None:
    """uet (the default): trim only when the queue (1 BDP) is full, ECN RED from 0.2 to 0.8 BDP;
    testbed-2026: trim at half the queue, ECN at a quarter."""
    topo = small_fabric().topology
    # 100 Gb/s, 1 us per link, 4 links each way, a 4,286-byte frame and a 64-byte ACK per link:
    # RTT = 8 us + 4 x 4,350 x 8 / 100e9 s = 9.392 us; x 100 Gb/s / 8 = 117,400 B = 27.4
    # frames -> a BDP of 28; RED from ceil(5.6) = 6 to ceil(22.4) = 23; trim when 28 are queued
    # (the 1-BDP data queue is full), in priority queues of 4 x 28 = 112
    assert topo.queue_depth == 112
    qos = default_qos(topo)
    assert qos == uet_qos(topo)
    assert (qos.trim_mode, qos.ecn_mode) == ("threshold", "red")
    assert (qos.trim, qos.ecn, qos.ecn_max, qos.ecn_pmax) == (28, 6, 23, 1.0)
    assert qos.action_params(112) == contract.params_of(
        contract.PortQosParams(28, 6, 23, round(65536 / (23 - 6)), 0)
    )
    # a queue given in the topology is the data queue: trim when it is full
    given = uet_qos(topo.with_(switch={"queue_depth": 16}))
    assert (given.trim_mode, given.trim, given.ecn, given.ecn_max) == ("full", 16, 6, 16)
    tiny = uet_qos(topo.with_(switch={"queue_depth": 1}))
    assert (tiny.ecn, tiny.ecn_max) == (1, 2)
    legacy = topo.with_(profile="testbed-2026")
    depth = legacy.queue_depth
    assert depth == 64
    assert default_qos(legacy) == threshold_qos(legacy)
    fixed = threshold_qos(legacy)
    assert fixed == PortQos(trim=depth // 2, ecn=depth // 4)
    assert fixed.action_params(depth) == contract.params_of(
        contract.PortQosParams(depth // 2, depth // 4, depth // 4, 0, 0)
    )


def test_qos_rejects_what_the_program_cannot_take() -> None:
    with pytest.raises(QosError, match="trim_mode 'sometimes'"):
        PortQos(trim=1, ecn=1, trim_mode="sometimes")
    with pytest.raises(QosError, match="ecn_pmax 1.5"):
        PortQos(trim=1, ecn=1, ecn_mode="red", ecn_max=4, ecn_pmax=1.5)
    with pytest.raises(QosError, match="ecn_max 1: expected more than the ECN threshold 3"):
        PortQos(trim=1, ecn=3, ecn_mode="red", ecn_max=1)
    # the slope saturates at bit<16>: a one-packet RED band with pmax 1
    red = PortQos(trim=1, ecn=3, ecn_mode="red", ecn_max=4).action_params(8)
    assert contract.PortQosParams(**red).ecn_slope == 65535


def test_qos_overrides_per_switch_and_port_and_persisted(tmp_path) -> None:  # type: ignore[no-untyped-def]
    fabric = small_fabric()
    overrides = (
        QosOverrides()
        .with_override("t0-p0-r0", None, PortQos(trim=10, ecn=5))
        .with_override("t0-p0-r0", 3, PortQos(trim=2, ecn=1))
    )
    path = overrides.save(tmp_path / "qos-overrides.json")
    loaded = QosOverrides.load(path)
    assert loaded == overrides or loaded.as_json() == overrides.as_json()
    tables = switch_tables(fabric, "t0-p0-r0", loaded)
    got = {
        int(dict(e.match)[contract.EGRESS_SPEC]): contract.PortQosParams(**dict(e.params))[:2]
        for e in tables.by_table(PORT_QOS)
    }
    assert got == {1: ("10", "5"), 2: ("10", "5"), 3: ("2", "1"), 4: ("10", "5")}
    other = switch_tables(fabric, "t0-p0-r1", loaded).by_table(PORT_QOS)
    trims = {contract.PortQosParams(**dict(e.params)).trim_threshold for e in other}
    assert trims == {str(default_qos(fabric.topology).trim)}


def test_entries_round_trip_through_p4info(fabric: Fabric) -> None:
    info = P4Info.load()
    for tables in fabric_tables(fabric).values():
        for entry in tables.entries:
            assert Entry.from_entity(info, entry.to_entity(info)) == entry


def test_diff_inserts_modifies_and_deletes() -> None:
    fabric = small_fabric()
    intended = list(switch_tables(fabric, "t1-p0-s0").entries)
    assert diff(intended, intended).empty
    changed = list(intended)
    route = next(e for e in changed if e.table == IPV6_LPM and not e.is_default)
    changed.remove(route)
    wrong = Entry.make(
        IPV6_LPM,
        dict(route.match),
        route.action,
        contract.params_of(contract.NextHopParams(9, "02:00:00:00:00:01", "02:00:00:00:00:02")),
    )
    stray = Entry.make(
        IPV6_LPM,
        {contract.DST_ADDR: ipaddress.IPv6Network("fcbb:bb00:ffff::/48")},
        route.action,
        dict(route.params),
    )
    missing = next(e for e in intended if e.table == MY_SID)
    changed.remove(missing)
    changed += [wrong, stray]
    d = diff(intended, changed)
    assert d.inserts == (missing,)
    assert d.modifies == (route,)
    assert d.deletes == (stray,)
    assert d.count == 3
    assert any(line.startswith("- ") and "fcbb:bb00:ffff::/48" in line for line in d.lines())


@settings(max_examples=25, deadline=None)
@given(
    planes=st.integers(1, 3),
    racks=st.integers(1, 3),
    spines=st.integers(1, 3),
    hosts_per_rack=st.integers(1, 3),
)
def test_any_small_fabric_routes_every_path(
    planes: int, racks: int, spines: int, hosts_per_rack: int
) -> None:
    topology = small_fabric().topology.with_(
        name="generated",
        planes=planes,
        racks=racks,
        spines_per_plane=spines,
        hosts_per_rack=hosts_per_rack,
    )
    assume(topology.hosts >= 2)
    fabric = Fabric(topology)
    tables = fabric_tables(fabric)
    for path in all_paths(fabric):
        arrival = walk(fabric, tables, path.src_nic, Packet(path.carrier))
        assert (arrival.nic, arrival.dst) == (path.dst_nic.intf, path.dst_nic.address)
        assert arrival.hops == [(h.switch, h.in_port, h.out_port) for h in path.hops]
