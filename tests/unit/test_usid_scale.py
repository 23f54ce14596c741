"""uSID encoding and carrier arithmetic; the two-tier scale figures."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from topologies import usid as usidlib
from topologies.scale import clos_build, clos_capacity, scale
from topologies.usid import TierCode

BLOCK = ipaddress.IPv6Network("fcbb:bb00::/32")


@given(
    plane=st.integers(0, 15),
    tier=st.sampled_from(list(TierCode)),
    index=st.integers(0, 1023),
)
def test_encode_decode_round_trip(plane: int, tier: TierCode, index: int) -> None:
    value = usidlib.encode(plane, tier, index)
    assert value != 0
    fields = usidlib.decode(value)
    assert (fields.plane, fields.tier, fields.index) == (plane, tier, index)


def test_encoding_is_plane_tier_index() -> None:
    assert usidlib.encode(1, TierCode.HOST, 2) == 0x1C02
    assert usidlib.encode(0, TierCode.T0, 0) == 0x0400
    assert usidlib.encode(15, TierCode.T1, 1023) == 0xFBFF


@given(st.lists(st.integers(1, 0xFFFF), min_size=1, max_size=6))
def test_shift_walks_the_carrier(values: list[int]) -> None:
    address = usidlib.carrier(BLOCK, values)
    assert usidlib.usids(address) == values
    for i, value in enumerate(values):
        assert usidlib.active(address) == value
        assert usidlib.exhausted(address) == (i == len(values) - 1)
        if i < len(values) - 1:
            address = usidlib.shift(address)
    assert address in BLOCK


def test_carrier_text() -> None:
    assert str(usidlib.carrier(BLOCK, [0x0800, 0x0401, 0x0C03])) == "fcbb:bb00:800:401:c03::"
    assert str(usidlib.shift(ipaddress.IPv6Address("fcbb:bb00:800:401:c03::"))) == (
        "fcbb:bb00:401:c03::"
    )
    assert str(usidlib.prefix(BLOCK, 0x0401)) == "fcbb:bb00:401::/48"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: usidlib.encode(16, TierCode.T0, 0), "plane 16"),
        (lambda: usidlib.encode(0, TierCode.T0, 1024), "index 1024"),
        (lambda: usidlib.decode(0), "non-zero"),
        (lambda: usidlib.carrier(BLOCK, []), "1 to 6"),
        (lambda: usidlib.carrier(BLOCK, [1] * 7), "1 to 6"),
        (lambda: usidlib.carrier(ipaddress.IPv6Network("fcbb::/16"), [1]), "/32"),
    ],
)
def test_usid_errors(call: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()  # type: ignore[operator]


def test_headline_scale() -> None:
    report = scale(512, 8)
    assert report.hosts == 131_072 == 512**2 // 2
    assert report.per_plane.switches_per_tier == (512, 256)
    assert report.switches == 8 * 768
    assert report.per_plane.links == 2 * 131_072
    assert report.optics == 2 * report.links
    # The same chip as 64 ports of 800G needs four tiers for the same hosts.
    assert report.single_plane.radix == 64
    assert report.single_plane.tiers == 4
    assert report.single_plane.hosts == 131_072


def test_clos_capacity() -> None:
    assert clos_capacity(64, 2) == 2048
    assert clos_capacity(64, 3) == 65_536
    assert clos_build(64, 2048).tiers == 2
    assert clos_build(64, 2049).tiers == 3
    one = clos_build(8, 5)
    assert (one.tiers, one.switches, one.links) == (1, 1, 5)
    small = clos_build(4, 8)
    assert small.tiers == 2 and small.switches_per_tier == (4, 2)


@pytest.mark.parametrize(
    ("radix", "planes", "message"),
    [(511, 1, "even"), (0, 1, "even"), (512, 0, "at least 1"), (512, 3, "multiple")],
)
def test_scale_errors(radix: int, planes: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        scale(radix, planes)
