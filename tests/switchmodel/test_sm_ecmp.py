"""ECMP in switchmodel: BMv2's selector hash, action profile members and groups over P4Runtime
(written, read back as written, refused with the right codes), and the member the data path
picks (``hash mod n`` in BMv2's member-handle order)."""

from __future__ import annotations

import ipaddress
import struct

import pytest
from dataplane.packets import SRC, mrc_frame
from hypothesis import given
from hypothesis import strategies as st
from support.switch import InProcessSwitch

from controller.client import P4RuntimeError, SwitchClient
from controller.p4info import P4Info
from p4src import contract
from p4src.contract import SELECTOR_BYTES, ecmp_hash, member_index, selector_input
from p4src.proto import p4r
from switchmodel.pipeline import Forward, ingress

INFO = P4Info.load()
ECMP = contract.IPV6_ECMP
LPM = contract.IPV6_LPM
PROFILE = contract.ECMP_SELECTOR
HOP = contract.SET_NEXT_HOP
DST = contract.DST_ADDR
NIC = "fcbb:bb00:c02::"  # a plain NIC address (h2, plane 0)


def crc32_bitwise(data: bytes) -> int:
    """CRC-32 one bit at a time (reflected polynomial 0xEDB88320, init and final XOR all ones)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0xEDB88320 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


# -- the hash --------------------------------------------------------------------------------


def test_selector_input_packs_the_fields_without_padding_between_them() -> None:
    src = int(ipaddress.IPv6Address("fcbb:bb00:c00::"))
    dst = int(ipaddress.IPv6Address(NIC))
    data = selector_input(src, dst, 0xABCDE, 0x1234)
    assert len(data) == SELECTOR_BYTES == 37
    assert data[:16] == src.to_bytes(16, "big")
    assert data[16:32] == dst.to_bytes(16, "big")
    # 20 + 16 bits, then 4 zero bits: 0xABCDE 1234 0
    assert data[32:] == bytes.fromhex("abcde12340")


@given(
    st.integers(0, (1 << 128) - 1),
    st.integers(0, (1 << 128) - 1),
    st.integers(0, (1 << 20) - 1),
    st.integers(0, 0xFFFF),
)
def test_hash_is_crc32_of_the_packed_fields(src: int, dst: int, flow: int, sport: int) -> None:
    assert ecmp_hash(src, dst, flow, sport) == crc32_bitwise(selector_input(src, dst, flow, sport))
    assert member_index(src, dst, flow, sport, 3) == ecmp_hash(src, dst, flow, sport) % 3


def test_bad_selector_values_are_named() -> None:
    with pytest.raises(ValueError, match="flow_label=0x100000"):
        selector_input(0, 0, 1 << 20, 0)
    with pytest.raises(ValueError, match="l4_src_port"):
        selector_input(0, 0, 0, -1)
    with pytest.raises(ValueError, match="0 members"):
        member_index(0, 0, 0, 0, 0)


# -- over P4Runtime --------------------------------------------------------------------------


def member(member_id: int, port: int) -> p4r.ActionProfileMember:
    return INFO.profile_member(
        PROFILE,
        member_id,
        HOP,
        contract.params_of(
            contract.NextHopParams(port, f"02:00:00:00:00:{port:02x}", "02:99:00:00:00:01")
        ),
    )


def route(group_id: int, prefix: str = f"{NIC}/48") -> p4r.TableEntry:
    return INFO.table_entry(ECMP, {DST: prefix}, "", group_id=group_id)


def flow_frame(flow: int, sport: int, dst: str = NIC) -> bytes:
    """An MRC WRITE to ``dst`` with this flow label and UDP source port."""
    frame = bytearray(mrc_frame(dst))
    (vtf,) = struct.unpack_from("!I", frame, 14)
    struct.pack_into("!I", frame, 14, (vtf & 0xFFF00000) | flow)
    struct.pack_into("!H", frame, 54, sport)
    return bytes(frame)


def port_of(switch: InProcessSwitch, frame: bytes) -> int:
    state = switch.slot.state
    assert state is not None
    verdict = ingress(frame, 1, state)
    assert isinstance(verdict, Forward), verdict
    return verdict.port


def expected_port(ports: list[int], flow: int, sport: int) -> int:
    src, dst = int(ipaddress.IPv6Address(SRC)), int(ipaddress.IPv6Address(NIC))
    return ports[member_index(src, dst, flow, sport, len(ports))]


def test_members_groups_and_routes_are_read_back_as_written(client: SwitchClient) -> None:
    members = [member(3, 3), member(4, 4)]
    group = INFO.profile_group(PROFILE, 1, [3, 4])
    client.insert(members)
    client.insert([group])
    client.insert([route(1)])
    read_members, read_groups = client.read_profile(PROFILE)
    assert read_members == members
    assert read_groups == [group]
    assert client.read_table_entries(ECMP) == [route(1)]
    # parameters written with leading zero bytes are read back canonical
    padded = member(5, 5)
    padded.action.params[0].value = b"\x00\x05"
    client.insert([padded])
    read_members, _ = client.read_profile(PROFILE)
    assert read_members[-1] == member(5, 5)
    # one member or group by id
    want = p4r.Entity()
    want.action_profile_member.action_profile_id = INFO.action_profile_id(PROFILE)
    want.action_profile_member.member_id = 4
    assert [e.action_profile_member for e in client.read([want])] == [members[1]]
    want = p4r.Entity()
    want.action_profile_group.group_id = 1  # every profile
    assert [e.action_profile_group for e in client.read([want])] == [group]


def test_refusals_name_the_member_or_group(client: SwitchClient) -> None:
    client.insert([member(3, 3)])
    cases: list[tuple[str, object, str, str]] = [
        ("insert", member(3, 3), "ALREADY_EXISTS", "member 3 already exists"),
        ("insert", INFO.profile_group(PROFILE, 1, [3, 9]), "NOT_FOUND", "member 9"),
        ("insert", route(7), "NOT_FOUND", "group 7 does not exist"),
        (
            "insert",
            INFO.table_entry(
                ECMP, {DST: f"{NIC}/48"}, HOP, contract.params_of(contract.NextHopParams(1, 1, 2))
            ),
            "INVALID_ARGUMENT",
            "needs an action profile group",
        ),
        ("delete", member(8, 8), "NOT_FOUND", "member 8 does not exist"),
    ]
    for verb, message, code, text in cases:
        with pytest.raises(P4RuntimeError) as caught:
            getattr(client, verb)([message])
        (error,) = caught.value.errors
        assert error.code_name == code and text in error.message, error
    client.insert([INFO.profile_group(PROFILE, 1, [3])])
    client.insert([route(1)])
    with pytest.raises(P4RuntimeError) as caught:
        client.delete([member(3, 3)])
    assert caught.value.errors[0].code_name == "FAILED_PRECONDITION"
    assert "still in group(s) 1" in caught.value.errors[0].message
    with pytest.raises(P4RuntimeError) as caught:
        client.delete([INFO.profile_group(PROFILE, 1, [])])
    assert caught.value.errors[0].code_name == "FAILED_PRECONDITION"
    # in order, the route, the group and the member go
    client.delete([route(1)])
    client.delete([INFO.profile_group(PROFILE, 1, [])])
    client.delete([member(3, 3)])
    assert client.read_profile(PROFILE) == ([], [])


def test_flows_take_the_member_the_hash_picks(
    switch: InProcessSwitch, client: SwitchClient
) -> None:
    client.insert([member(3, 3), member(4, 4), member(5, 5)])
    client.insert([INFO.profile_group(PROFILE, 1, [3, 4, 5])])
    client.insert([route(1)])
    seen = set()
    for i in range(60):
        flow, sport = (i * 40503) & 0xFFFFF, 0xC000 + i
        got = port_of(switch, flow_frame(flow, sport))
        assert got == expected_port([3, 4, 5], flow, sport)
        seen.add(got)
    assert seen == {3, 4, 5}
    # a smaller group is seen at once by the entries pointing at it
    client.modify([INFO.profile_group(PROFILE, 1, [3, 5])])
    for i in range(20):
        assert port_of(switch, flow_frame(i, 0xC000)) == expected_port([3, 5], i, 0xC000)
    # and a modified member too
    client.modify([member(5, 9)])
    ports = {port_of(switch, flow_frame(i, 0xC000)) for i in range(20)}
    assert ports == {3, 9}


def test_members_are_picked_in_handle_order_as_in_bmv2(
    switch: InProcessSwitch, client: SwitchClient
) -> None:
    """BMv2 gives a new member the smallest free handle and orders a group by handle: member 40,
    created after member 20 was deleted, takes handle 1 and comes before member 30."""
    client.insert([member(10, 1), member(20, 2), member(30, 3)])
    client.delete([member(20, 2)])
    client.insert([member(40, 4)])
    client.insert([INFO.profile_group(PROFILE, 1, [10, 30, 40])])
    client.insert([route(1)])
    for i in range(30):
        flow, sport = i * 977, 0xD000 + i
        assert port_of(switch, flow_frame(flow, sport)) == expected_port([1, 4, 3], flow, sport)


def test_ecmp_entries_come_before_lpm_routes(switch: InProcessSwitch, client: SwitchClient) -> None:
    """ipv6_ecmp is looked up first; what it does not hold goes to ipv6_lpm as before."""
    lpm = INFO.table_entry(
        LPM, {DST: "fcbb:bb00:c00::/40"}, HOP, contract.params_of(contract.NextHopParams(7, 1, 2))
    )
    client.insert([lpm, member(3, 3)])
    client.insert([INFO.profile_group(PROFILE, 1, [3])])
    client.insert([route(1)])
    assert port_of(switch, flow_frame(1, 2)) == 3
    assert port_of(switch, flow_frame(1, 2, dst="fcbb:bb00:c01::")) == 7
