"""The longest-prefix match table (:class:`switchmodel.tables.LpmTable`) that the switch model's
pipeline and the sim's switches both look their ``my_sid``, ``ipv6_ecmp`` and ``ipv6_lpm`` up in."""

from __future__ import annotations

import ipaddress

import pytest

from switchmodel.tables import LpmTable


def addr(text: str) -> int:
    return int(ipaddress.IPv6Address(text))


def filled() -> LpmTable[str]:
    table: LpmTable[str] = LpmTable()
    table.insert(addr("fcbb:bb00::"), 32, "block")
    table.insert(addr("fcbb:bb00:1::"), 48, "node")
    table.insert(addr("fcbb:bb00:1::e"), 128, "end")
    return table


def test_the_longest_prefix_wins() -> None:
    table = filled()
    assert table.lookup(addr("fcbb:bb00:1::e")) == "end"
    assert table.lookup(addr("fcbb:bb00:1:2::")) == "node"
    assert table.lookup(addr("fcbb:bb00:2::")) == "block"
    assert table.lookup(addr("2001:db8::")) is None
    assert len(table) == 3
    assert [shift for shift, _ in table.probes] == [0, 80, 96]


def test_remove_and_clear_drop_entries_and_lengths() -> None:
    table = filled()
    table.remove(addr("fcbb:bb00:1::e"), 128)
    assert table.lookup(addr("fcbb:bb00:1::e")) == "node"
    assert sorted(table.by_length) == [32, 48]
    with pytest.raises(KeyError):
        table.remove(addr("fcbb:bb00:9::"), 48)
    table.clear()
    assert len(table) == 0 and table.probes == () and table.lookup(addr("fcbb:bb00::")) is None


def test_of_prefixes_items_and_equality() -> None:
    table = LpmTable.of_prefixes(48, {0xFCBB_BB00_0001: "node", 0xFCBB_BB00_0002: "other"})
    assert table.lookup(addr("fcbb:bb00:2::5")) == "other"
    same: LpmTable[str] = LpmTable()
    for value, length, data in table.items():
        same.insert(value, length, data)
    assert same == table
    assert sorted(same.items()) == [
        (addr("fcbb:bb00:1::"), 48, "node"),
        (addr("fcbb:bb00:2::"), 48, "other"),
    ]
    same.insert(addr("fcbb:bb00:3::"), 48, "third")
    assert same != table
    assert LpmTable.of_prefixes(48, {}) == LpmTable()
    assert LpmTable(32) != LpmTable()


def test_map_converts_each_distinct_value_once() -> None:
    table = filled()
    table.insert(addr("fcbb:bb00:2::"), 48, "node")
    calls: list[str] = []

    def upper(text: str) -> str:
        calls.append(text)
        return text.upper()

    mapped = table.map(upper)
    assert sorted(calls) == ["block", "end", "node"]
    assert mapped.lookup(addr("fcbb:bb00:2::1")) == "NODE"
    assert mapped.lookup(addr("fcbb:bb00:1::e")) == "END"
    assert table.lookup(addr("fcbb:bb00:2::1")) == "node"  # the original is unchanged


def test_a_narrower_table_and_bad_lengths() -> None:
    table: LpmTable[int] = LpmTable(width=32)
    table.insert(0x0A00_0000, 8, 1)
    table.insert(0x0A01_0000, 16, 2)
    assert table.lookup(0x0A01_0203) == 2 and table.lookup(0x0A02_0000) == 1
    with pytest.raises(ValueError, match="prefix length 33: expected 0 to 32"):
        table.insert(0, 33, 3)
    with pytest.raises(ValueError, match="prefix length -1"):
        LpmTable.of_prefixes(-1, {0: 1})
    with pytest.raises(ValueError, match="LPM key width 0"):
        LpmTable(0)
