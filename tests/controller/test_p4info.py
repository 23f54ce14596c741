"""The P4Info wrapper: ids by name, entries from readable values and back, contract check."""

from __future__ import annotations

import re

import pytest

from controller.p4info import P4Info, P4InfoError, Value, canonical, encode_value
from p4src import contract


@pytest.fixture(scope="module")
def info() -> P4Info:
    return P4Info.load()


def test_contract_is_complete_and_names_resolve_by_suffix(info: P4Info) -> None:
    assert info.missing() == []
    for table in contract.TABLES:
        assert info.table_id(table.name) == info.table_id(table.name.split(".")[-1])
    for action in contract.ACTIONS:
        assert info.name_of(info.action_id(action.name.split(".")[-1])) == action.name
    for counter in contract.COUNTERS:
        assert info.name_of(info.counter_id(counter.split(".")[-1])) == counter
    for register in contract.REGISTERS:
        assert info.name_of(info.register_id(register)) == register
    profile = contract.ECMP_SELECTOR
    assert info.name_of(info.action_profile_id(profile.split(".")[-1])) == profile
    with pytest.raises(P4InfoError, match=f"no table 'ipv4_lpm'.*{contract.IPV6_LPM}"):
        info.table_id("ipv4_lpm")


def test_missing_names_each_lacking_table_action_and_counter(info: P4Info) -> None:
    proto = type(info.proto)()
    proto.CopyFrom(info.proto)
    kept = [t for t in proto.tables if t.preamble.name != contract.MY_SID]
    del proto.tables[:]
    proto.tables.extend(kept)
    kept_counters = [c for c in proto.counters if c.preamble.name != contract.TRIMMED]
    del proto.counters[:]
    proto.counters.extend(kept_counters)
    assert P4Info(proto).missing() == [f"table {contract.MY_SID}", f"counter {contract.TRIMMED}"]


def test_entries_round_trip_through_readable_text(info: P4Info) -> None:
    hop = contract.NextHopParams(2, "02:04:00:00:00:02", "02:0C:01:00:00:00")
    entry = info.table_entry(
        contract.IPV6_LPM,
        {contract.DST_ADDR: "fcbb:bb00:c01::/48"},
        contract.SET_NEXT_HOP,
        contract.params_of(hop),
    )
    lpm = entry.match[0].lpm
    assert (lpm.prefix_len, lpm.value[:6]) == (48, bytes.fromhex("fcbbbb000c01"))
    assert entry.action.action.params[0].value == b"\x02"  # canonical: no leading zero byte
    decoded = info.decode(entry)
    assert decoded.match == {contract.DST_ADDR: "fcbb:bb00:c01::/48"}
    shown = contract.params_of(hop._replace(dmac=hop.dmac.lower()))
    assert decoded.params == {name: str(value) for name, value in shown.items()}
    assert info.describe(entry).startswith(
        f"{contract.IPV6_LPM} [{contract.DST_ADDR}=fcbb:bb00:c01::/48]"
    )
    default = info.decode(info.default_entry(contract.IPV6_LPM, contract.DROP_NO_ROUTE))
    assert default.is_default and default.action == contract.DROP_NO_ROUTE


HOP = contract.params_of(contract.NextHopParams(1, 0, 0))
DST = contract.DST_ADDR


@pytest.mark.parametrize(
    ("match", "params", "message"),
    [
        ({DST: "fcbb:bb00:c01::1/48"}, None, "bits set beyond its /48"),
        ({DST: "fcbb::/129"}, None, "prefix length 129"),
        ({"hdr.vlan.vid": "fcbb::/48"}, None, "no match field 'hdr.vlan.vid'"),
        ({DST: "not-an-address/48"}, None, "not a valid value"),
        ({}, dict(list(HOP.items())[:2]), f"parameter '{list(HOP)[2]}' is missing"),
        (
            {},
            {**HOP, list(HOP)[1]: "02:00:00:00:01"},
            re.escape(f"{contract.SET_NEXT_HOP}({list(HOP)[1]})"),
        ),
        ({}, {**HOP, "vlan": 3}, "no parameter 'vlan'"),
    ],
)
def test_bad_values_are_named(
    info: P4Info, match: dict[str, str], params: dict[str, Value] | None, message: str
) -> None:
    with pytest.raises(P4InfoError, match=message):
        info.table_entry(
            contract.IPV6_LPM, match, contract.SET_NEXT_HOP, params if params is not None else HOP
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
