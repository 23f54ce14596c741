"""The P4Info wrapper: ids by name, entries from readable values and back, contract check."""

from __future__ import annotations

import pytest

from controller.p4info import CONTRACT, P4Info, P4InfoError, canonical, encode_value


@pytest.fixture(scope="module")
def info() -> P4Info:
    return P4Info.load()


def test_contract_is_complete_and_names_resolve_by_suffix(info: P4Info) -> None:
    assert info.missing() == []
    for table in CONTRACT:
        assert info.table_id(table) == info.table_id(table.split(".")[-1])
    assert info.name_of(info.action_id("set_next_hop")) == "MrcIngress.set_next_hop"
    assert info.name_of(info.counter_id("drops")) == "MrcIngress.drops"
    assert info.name_of(info.register_id("port_qdepth")).endswith("port_qdepth")
    with pytest.raises(P4InfoError, match="no table 'ipv4_lpm'.*MrcIngress.ipv6_lpm"):
        info.table_id("ipv4_lpm")


def test_missing_names_each_lacking_table_action_and_counter(info: P4Info) -> None:
    proto = type(info.proto)()
    proto.CopyFrom(info.proto)
    kept = [t for t in proto.tables if t.preamble.name != "MrcIngress.my_sid"]
    del proto.tables[:]
    proto.tables.extend(kept)
    kept_counters = [c for c in proto.counters if c.preamble.name != "MrcIngress.trimmed"]
    del proto.counters[:]
    proto.counters.extend(kept_counters)
    assert P4Info(proto).missing() == ["table MrcIngress.my_sid", "counter MrcIngress.trimmed"]


def test_entries_round_trip_through_readable_text(info: P4Info) -> None:
    entry = info.table_entry(
        "ipv6_lpm",
        {"hdr.ipv6.dst_addr": "fcbb:bb00:c01::/48"},
        "set_next_hop",
        {"port": 2, "smac": "02:04:00:00:00:02", "dmac": "02:0C:01:00:00:00"},
    )
    lpm = entry.match[0].lpm
    assert (lpm.prefix_len, lpm.value[:6]) == (48, bytes.fromhex("fcbbbb000c01"))
    assert entry.action.action.params[0].value == b"\x02"  # canonical: no leading zero byte
    decoded = info.decode(entry)
    assert decoded.match == {"hdr.ipv6.dst_addr": "fcbb:bb00:c01::/48"}
    assert decoded.params == {"port": "2", "smac": "02:04:00:00:00:02", "dmac": "02:0c:01:00:00:00"}
    assert info.describe(entry).startswith(
        "MrcIngress.ipv6_lpm [hdr.ipv6.dst_addr=fcbb:bb00:c01::/48]"
    )
    default = info.decode(info.default_entry("ipv6_lpm", "drop_no_route"))
    assert default.is_default and default.action == "MrcIngress.drop_no_route"


@pytest.mark.parametrize(
    ("match", "params", "message"),
    [
        ({"hdr.ipv6.dst_addr": "fcbb:bb00:c01::1/48"}, None, "bits set beyond its /48"),
        ({"hdr.ipv6.dst_addr": "fcbb::/129"}, None, "prefix length 129"),
        ({"hdr.ipv6.src_addr": "fcbb::/48"}, None, "no match field 'hdr.ipv6.src_addr'"),
        ({"hdr.ipv6.dst_addr": "not-an-address/48"}, None, "not a valid value"),
        ({}, {"port": 1, "smac": "02:00:00:00:00:01"}, "parameter 'dmac' is missing"),
        ({}, {"port": 1, "smac": "02:00:00:00:01", "dmac": "0"}, r"set_next_hop\(smac\)"),
        ({}, {"port": 1, "smac": 0, "dmac": 0, "vlan": 3}, "no parameter 'vlan'"),
    ],
)
def test_bad_values_are_named(info: P4Info, match: dict, params: dict | None, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(P4InfoError, match=message):
        info.table_entry(
            "ipv6_lpm",
            match,
            "set_next_hop",
            params if params is not None else {"port": 1, "smac": 0, "dmac": 0},
        )


def test_canonical_byte_strings() -> None:
    assert canonical(b"\x00\x00\x05") == b"\x05"
    assert canonical(b"\x00\x00") == b"\x00"
    assert encode_value("0x1ff", 9, "port") == b"\x01\xff"
    with pytest.raises(P4InfoError, match="does not fit in 9 bits"):
        encode_value(512, 9, "port")


def test_a_bad_p4info_file_is_named(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(P4InfoError, match="cannot read the P4Info file"):
        P4Info.load(tmp_path / "absent.txtpb")
    bad = tmp_path / "bad.txtpb"
    bad.write_text("tables { nonsense: 1 }\n")
    with pytest.raises(P4InfoError, match="bad.txtpb: not a text-format P4Info"):
        P4Info.load(bad)
