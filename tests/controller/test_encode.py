"""Write requests encoded straight to wire bytes parse to what the protobuf runtime builds."""

from __future__ import annotations

import ipaddress

import pytest
from p4.v1 import p4runtime_pb2 as p4r

from controller.encode import UpdateEncoder, write_request
from controller.entries import IPV6_LPM, SET_NEXT_HOP, Entry, fabric_tables
from controller.p4info import P4Info, P4InfoError
from topologies import Fabric, load_topology
from topologies.config import shipped_topology


@pytest.fixture(scope="module")
def info() -> P4Info:
    return P4Info.load()


@pytest.mark.parametrize("topology", ["small", "default"])
def test_every_fabric_entry_encodes_like_the_protobuf_runtime(info: P4Info, topology: str) -> None:
    encoder = UpdateEncoder(info)
    fabric = Fabric(load_topology(shipped_topology(topology)))
    count = 0
    for tables in fabric_tables(fabric).values():
        for entry in tables.entries:
            for kind in (p4r.Update.INSERT, p4r.Update.MODIFY, p4r.Update.DELETE):
                expected = p4r.Update(type=kind)
                expected.entity.CopyFrom(entry.to_entity(info))
                assert p4r.Update.FromString(encoder.update(kind, entry)) == expected
                count += 1
    assert count == 3 * sum(len(t.entries) for t in fabric_tables(fabric).values())
    # the ECMP groups are among them: members, groups and table entries pointing at a group
    kinds = {(e.kind, bool(e.group)) for t in fabric_tables(fabric).values() for e in t.entries}
    assert {("member", False), ("group", False), ("table", True)} <= kinds


def test_write_request_carries_device_election_and_updates(info: P4Info) -> None:
    encoder = UpdateEncoder(info)
    route = Entry.make(
        IPV6_LPM,
        {"hdr.ipv6.dst_addr": ipaddress.IPv6Network("2001:db8::/64")},
        SET_NEXT_HOP,
        {"port": 300, "smac": "02:00:00:00:00:01", "dmac": "02:00:00:00:00:02"},
    )
    election = (5 << 64) | 7
    raw = write_request(3, election, [encoder.update(p4r.Update.INSERT, route)] * 2)
    request = p4r.WriteRequest.FromString(raw)
    assert request.device_id == 3
    assert (request.election_id.high, request.election_id.low) == (5, 7)
    assert request.atomicity == p4r.WriteRequest.CONTINUE_ON_ERROR
    assert len(request.updates) == 2
    assert info.describe(request.updates[1].entity.table_entry) == info.describe(
        route.to_proto(info)
    )


def test_bad_values_are_named(info: P4Info) -> None:
    encoder = UpdateEncoder(info)
    too_wide = Entry.make(
        IPV6_LPM,
        {"hdr.ipv6.dst_addr": ipaddress.IPv6Network("2001:db8::/64")},
        SET_NEXT_HOP,
        {"port": 512, "smac": "02:00:00:00:00:01", "dmac": "02:00:00:00:00:02"},
    )
    with pytest.raises(P4InfoError, match=r"set_next_hop\(port\).*does not fit in 9 bits"):
        encoder.update(p4r.Update.INSERT, too_wide)
    missing = Entry.make(
        IPV6_LPM, {"hdr.ipv6.dst_addr": "2001:db8::/64"}, SET_NEXT_HOP, {"port": 1}
    )
    with pytest.raises(P4InfoError, match="do not match"):
        encoder.update(p4r.Update.INSERT, missing)
