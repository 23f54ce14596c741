"""The fabric model: counts, uniqueness, and every path walked hop by hop with the uN shift."""

from __future__ import annotations

import ipaddress
import itertools

import pytest

from topologies import Fabric, Nic, Tier, load_topology
from topologies import usid as usidlib
from topologies.config import BASE_RTT_LINKS, RACK_LINKS, shipped_topology

SHIPPED = {
    # name: (planes, switches, hosts, links)
    "small": (2, 8, 4, 2 * (4 + 4)),
    "default": (4, 16, 4, 4 * (4 + 4)),
}


@pytest.fixture(scope="module", params=sorted(SHIPPED))
def fabric(request: pytest.FixtureRequest) -> Fabric:
    return Fabric(load_topology(shipped_topology(request.param)))


def test_counts(fabric: Fabric) -> None:
    planes, switches, hosts, links = SHIPPED[fabric.topology.name]
    assert fabric.topology.planes == planes
    assert len(fabric.switches) == switches
    assert len(fabric.hosts) == hosts
    assert len(fabric.links) == links
    assert all(len(h.nics) == planes for h in fabric.hosts)
    t0 = [s for s in fabric.switches if s.tier is Tier.T0]
    t1 = [s for s in fabric.switches if s.tier is Tier.T1]
    topo = fabric.topology
    assert len(t0) == planes * topo.racks
    assert len(t1) == planes * topo.spines_per_plane
    assert all(len(s.ports) == topo.hosts_per_rack + topo.spines_per_plane for s in t0)
    assert all(len(s.ports) == topo.racks for s in t1)


def test_identifiers_unique(fabric: Fabric) -> None:
    nics = [nic for host in fabric.hosts for nic in host.nics]
    usids = [s.usid for s in fabric.switches] + [n.usid for n in nics]
    assert len(set(usids)) == len(usids)
    assert 0 not in usids
    addresses = [n.address for n in nics] + [s.end_sid for s in fabric.switches]
    assert len(set(addresses)) == len(addresses)
    macs = [n.mac for n in nics] + [p.mac for s in fabric.switches for p in s.ports]
    assert len(set(macs)) == len(macs)
    intfs = [n.intf for n in nics] + [p.intf for s in fabric.switches for p in s.ports]
    assert len(set(intfs)) == len(intfs)
    assert all(len(name) <= 15 for name in intfs)
    assert sorted(s.device_id for s in fabric.switches) == list(range(1, len(fabric.switches) + 1))
    for sw in fabric.switches:
        numbers = [p.number for p in sw.ports]
        assert len(set(numbers)) == len(numbers)
        assert min(numbers) == 1


def test_usids_say_plane_tier_index(fabric: Fabric) -> None:
    for sw in fabric.switches:
        fields = usidlib.decode(sw.usid)
        assert (fields.plane, fields.tier, fields.index) == (sw.plane, sw.tier.code, sw.index)
    for host in fabric.hosts:
        for nic in host.nics:
            fields = usidlib.decode(nic.usid)
            assert (fields.plane, fields.tier, fields.index) == (
                nic.plane,
                usidlib.TierCode.HOST,
                host.index,
            )


def test_links_are_symmetric(fabric: Fabric) -> None:
    for sw in fabric.switches:
        for port in sw.ports:
            if fabric.node_kind(port.peer) == "switch":
                back = fabric.switch(port.peer).port(port.peer_port)
                assert (back.peer, back.peer_port, back.mac) == (
                    sw.name,
                    port.number,
                    port.peer_mac,
                )
            else:
                nic = next(n for n in fabric.host(port.peer).nics if n.intf == port.peer_intf)
                assert (nic.switch, nic.switch_port, nic.mac) == (
                    sw.name,
                    port.number,
                    port.peer_mac,
                )
                assert nic.gateway_mac == port.mac
                assert nic.plane == sw.plane


def test_path_counts(fabric: Fabric) -> None:
    topo = fabric.topology
    for a, b in itertools.permutations(fabric.hosts, 2):
        found = fabric.paths(a.name, b.name)
        expected = topo.planes if a.rack == b.rack else topo.planes * topo.spines_per_plane
        assert len(found) == expected
        assert len({p.carrier for p in found}) == expected


def _walk_un(fabric: Fabric, path_hops: list[str], carrier: object) -> object:
    """Apply the uN shift at every switch of the hop list whose uSID is active."""
    address = carrier
    for name in path_hops:
        sw = fabric.switch(name)
        if usidlib.active(address) == sw.usid:  # type: ignore[arg-type]
            address = usidlib.shift(address)  # type: ignore[arg-type]
    return address


def test_every_path_ends_at_the_destination_nic(fabric: Fabric) -> None:
    for a, b in itertools.permutations(fabric.hosts, 2):
        for path in fabric.paths(a.name, b.name):
            # The hops form a chain of links from the source NIC to the destination NIC.
            first = fabric.switch(path.hops[0].switch)
            assert first.port(path.hops[0].in_port).peer_intf == path.src_nic.intf
            for here, there in itertools.pairwise(path.hops):
                port = fabric.switch(here.switch).port(here.out_port)
                assert (port.peer, port.peer_port) == (there.switch, there.in_port)
            last = fabric.switch(path.hops[-1].switch)
            assert last.port(path.hops[-1].out_port).peer_intf == path.dst_nic.intf
            assert {fabric.switch(h.switch).plane for h in path.hops} == {path.plane}
            # Every switch after the first consumes its uSID; the carrier ends as the NIC address.
            end = _walk_un(fabric, [h.switch for h in path.hops], path.carrier)
            assert end == path.dst_nic.address == b.nic(path.plane).address
            assert usidlib.exhausted(end)  # type: ignore[arg-type]
            assert fabric.nic_of_address(end) == b.nic(path.plane)  # type: ignore[arg-type]
            # The classic segment list names the carrier's switches, then the NIC.
            carried = [fabric.node_of_usid(u) for u in usidlib.usids(path.carrier)]
            assert [node.end_sid for node in carried[:-1]] == list(path.segments[:-1])  # type: ignore[union-attr]
            assert path.segments[-1] == path.dst_nic.address


def test_source_leaf_routes_on_the_first_usid(fabric: Fabric) -> None:
    for a, b in itertools.permutations(fabric.hosts, 2):
        for path in fabric.paths(a.name, b.name):
            first = fabric.switch(path.hops[0].switch)
            out = first.port(path.hops[0].out_port)
            target = fabric.node_of_usid(usidlib.active(path.carrier))
            if a.rack == b.rack:
                assert target == first  # same rack: the leaf's own uSID, then the NIC
            else:
                assert target == fabric.switch(out.peer)  # the spine behind the uplink


def test_lookups_reject_unknown_names(fabric: Fabric) -> None:
    with pytest.raises(KeyError, match="no host 'h99'"):
        fabric.host("h99")
    with pytest.raises(KeyError, match="no switch"):
        fabric.switch("t9-p0-r0")
    with pytest.raises(ValueError, match="itself"):
        fabric.paths("h0", "h0")
    with pytest.raises(KeyError, match="no host NIC address"):
        fabric.nic_of_address(fabric.switches[0].end_sid)


def test_uplinks_and_plane_nics(fabric: Fabric) -> None:
    t = fabric.topology
    for sw in fabric.switches:
        uplinks = fabric.uplinks(sw)
        if sw.tier is Tier.T1:
            assert uplinks == ()
            continue
        assert [p.peer for p in uplinks] == [
            fabric.t1_name(sw.plane, s) for s in range(t.spines_per_plane)
        ]
        assert fabric.uplinks(sw.name) == uplinks
    for plane in range(t.planes):
        nics = fabric.plane_nics(plane)
        assert [n.host for n in nics] == [h.name for h in fabric.hosts]
        assert {n.plane for n in nics} == {plane}
    with pytest.raises(ValueError, match=f"plane {t.planes}: fabric"):
        fabric.plane_nics(t.planes)


def _walk_srh(
    fabric: Fabric, src_nic: object, dst: ipaddress.IPv6Address, segment: ipaddress.IPv6Address
) -> tuple[list[tuple[str, int, int, str, ipaddress.IPv6Address]], str, ipaddress.IPv6Address]:
    """Forward a packet with destination ``dst`` and a single-segment SRH (segments left 1)
    from ``src_nic`` as the switches do: uN shift when the active uSID is the switch's and more
    follow, End when the carrier is exhausted there (the segment becomes the destination),
    then the static /48 route of the active uSID. Returns the hops (switch, in port, out port,
    action, destination on leaving), the NIC reached and the destination it gets."""
    switch = fabric.switch(src_nic.switch)  # type: ignore[attr-defined]
    in_port = src_nic.switch_port  # type: ignore[attr-defined]
    left = 1
    hops = []
    for _ in range(8):
        action = "route"
        if usidlib.active(dst) == switch.usid:
            if not usidlib.exhausted(dst):
                dst, action = usidlib.shift(dst), "uN"
            elif left > 0:
                left, dst, action = left - 1, segment, "End"
            else:
                raise AssertionError(f"SID_END at {switch.name}")
        target = fabric.node_of_usid(usidlib.active(dst))
        peer = target.host if isinstance(target, Nic) else target.name
        port = switch.port_to(peer)  # KeyError: no static route there
        hops.append((switch.name, in_port, port.number, action, dst))
        if isinstance(target, Nic):
            return hops, port.peer_intf, dst
        switch, in_port = fabric.switch(port.peer), port.peer_port
    raise AssertionError(f"forwarding loop: {hops}")


def test_srh_split_reaches_the_nic_via_the_same_spine(fabric: Fabric) -> None:
    walked = 0
    for a, b in itertools.permutations(fabric.hosts, 2):
        for path in fabric.paths(a.name, b.name):
            # the split is the plain carrier's uSIDs cut after the first (the turn)
            route = usidlib.usids(path.carrier)
            assert usidlib.usids(path.srh_carrier) == route[:1]
            assert usidlib.usids(path.srh_segment) == route[1:]
            assert usidlib.usids(path.srh_segment)[-1] == path.dst_nic.usid
            hops, intf, dst = _walk_srh(fabric, path.src_nic, path.srh_carrier, path.srh_segment)
            assert intf == path.dst_nic.intf and dst == path.dst_nic.address
            assert [(h[0], h[1], h[2]) for h in hops] == [
                (h.switch, h.in_port, h.out_port) for h in path.hops
            ]
            if a.rack == b.rack:  # the shared leaf: End straight to the NIC
                assert [h[3] for h in hops] == ["End"]
            else:  # source leaf routes to the spine, the spine does End, the last leaf uN
                assert [h[3] for h in hops] == ["route", "End", "uN"]
                spine = fabric.switch(hops[1][0])
                assert spine.tier is Tier.T1 and spine.index == path.spine
                assert path.srh_carrier == spine.usid_prefix.network_address
                assert hops[1][4] == path.srh_segment
            walked += 1
    t = fabric.topology
    assert walked == sum(
        t.planes * (1 if a.rack == b.rack else t.spines_per_plane)
        for a, b in itertools.permutations(fabric.hosts, 2)
    )


def test_links_to_counts_a_path_s_links_from_its_destination(fabric: Fabric) -> None:
    """What the agents' path latency holds a frame for: every destination a sender puts in a
    packet (a path's carrier, its SRH split's destination, a NIC's own address for STEV and UDP
    EVs) gives the links of the path it takes, one more than its switch hops."""
    for a, b in itertools.permutations(fabric.hosts, 2):
        for path in fabric.paths(a.name, b.name):
            links = len(path.hops) + 1
            assert links == (RACK_LINKS if a.rack == b.rack else BASE_RTT_LINKS)
            for destination in (path.carrier, path.srh_carrier, path.dst_nic.address):
                assert fabric.links_to(path.src_nic, destination) == links
    nic = fabric.hosts[0].nic(0)
    # a destination outside the block, or one naming no node, is bounded by the longest path
    assert fabric.links_to(nic, ipaddress.IPv6Address("2001:db8::1")) == BASE_RTT_LINKS
    stray = usidlib.carrier(fabric.block, [usidlib.encode(0, usidlib.TierCode.T1, 1000)])
    assert fabric.links_to(nic, stray) == BASE_RTT_LINKS


def test_usid_split_bounds() -> None:
    block = ipaddress.IPv6Network("fcbb:bb00::/32")
    first, rest = usidlib.split(block, [0x2001, 0x1001, 0x3002], 1)
    assert (first, rest) == (
        ipaddress.IPv6Address("fcbb:bb00:2001::"),
        ipaddress.IPv6Address("fcbb:bb00:1001:3002::"),
    )
    for at in (0, 3):
        with pytest.raises(ValueError, match="split at"):
            usidlib.split(block, [0x2001, 0x1001, 0x3002], at)
