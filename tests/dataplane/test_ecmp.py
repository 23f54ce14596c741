"""ECMP for plain NIC addresses (EVs that are not paths: STEV, UDP), against both targets.

Each :class:`EcmpCase` line says which switch of the small fabric the target plays (with the
controller's tables for it: :func:`controller.entries.switch_tables`), where the frames come in,
their destination and the flows (flow label, UDP source port) they belong to. The port every
frame must leave by is computed once, in Python, by :func:`p4src.contract.member_index` over
the group's members in creation order (BMv2's member-handle order), and each frame is compared
byte for byte: so BMv2 and switchmodel are held to the same hash, and to each other. Spreading
cases also require every uplink to carry some of the flows.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from functools import cache
from typing import Any

import pytest

from controller.entries import GROUP, MEMBER, TABLE_ENTRY, UPLINKS_GROUP, Entry, switch_tables
from p4src.contract import (
    ECMP_SELECTOR,
    SET_NEXT_HOP,
    NextHopParams,
    Opcode,
    member_index,
    params_of,
)
from topologies import Switch

from . import packets as pk
from .cases import Builder, fabric
from .packets import describe
from .target import DataplaneTarget

OUT_TIMEOUT = 3.0
QUIET = 0.1


@dataclass(frozen=True)
class Flow:
    """One flow: its IPv6 flow label and its UDP source port (None: the packet has no UDP)."""

    flow_label: int
    sport: int | None


@dataclass(frozen=True)
class EcmpCase:
    """Frames of several flows into one switch; where each must leave."""

    name: str
    intent: str
    switch: str
    in_port: int
    dst: ipaddress.IPv6Address  # the destination the frames carry in
    flows: tuple[Flow, ...]
    #: the destination after the switch's SRv6 step (what the hash sees); None: ``dst``
    dst_out: ipaddress.IPv6Address | None = None
    #: the ports of the group's members, in the order the members are created (None: the
    #: controller's group of the uplinks); any port will do, to try groups of other sizes
    member_order: tuple[int, ...] | None = None
    #: the one port every flow must take (a route with no choice); None: the ECMP group's pick
    fixed_port: int | None = None
    #: extra IPv6 header arguments of the frames in and out (an SRH)
    ip_in: tuple[tuple[str, Any], ...] = ()
    ip_out: tuple[tuple[str, Any], ...] = ()

    def __str__(self) -> str:
        return self.name

    @property
    def sw(self) -> Switch:
        return fabric().switch(self.switch)

    def entries(self) -> list[Entry]:
        """The controller's entries for the switch; with :attr:`member_order`, its ECMP members
        and group replaced by members on those ports (created in that order) and their group."""
        found = [e for e in switch_tables(fabric(), self.sw).entries if not e.is_default]
        if self.member_order is None:
            return found
        members = []
        for number in self.member_order:
            port = self.sw.port(number)
            params = params_of(NextHopParams(number, port.mac, port.peer_mac))
            members.append(Entry.member(ECMP_SELECTOR, number, SET_NEXT_HOP, params))
        group = Entry.group_of(ECMP_SELECTOR, UPLINKS_GROUP, self.member_order)
        rest = [e for e in found if e.kind == TABLE_ENTRY]
        return members + [group] + rest

    def uplinks_in_handle_order(self) -> list[int]:
        """The ports of the group's members, in the order BMv2 picks from (creation order)."""
        return [e.number for e in self.entries() if e.kind == MEMBER]

    def expected_port(self, src: ipaddress.IPv6Address, flow: Flow) -> int:
        if self.fixed_port is not None:
            return self.fixed_port
        ports = self.uplinks_in_handle_order()
        dst = self.dst_out or self.dst
        sport = flow.sport if flow.sport is not None else 0
        return ports[member_index(int(src), int(dst), flow.flow_label, sport, len(ports))]


def _upper(flow: Flow) -> Any:
    if flow.sport is None:
        return b"\x00" * 32  # no next header: no UDP, the hash takes 0 for the port
    return pk.mrc_udp(Opcode.WRITE_ONLY, pk.payload_bytes(64), sport=flow.sport)


def _stev(count: int) -> tuple[Flow, ...]:
    """STEV: the EV's bits in the flow label and the UDP source port."""
    return tuple(Flow((i * 0x9E37) & 0xFFFFF, 0xC000 | (i * 37) & 0x3FFF) for i in range(count))


@cache
def ecmp_cases() -> tuple[EcmpCase, ...]:
    fab = fabric()
    h0, h1, h2 = (fab.host(n).nic(0) for n in ("h0", "h1", "h2"))
    leaf = fab.switch(h0.switch)  # t0-p0-r0: uplinks 3 (spine 0), 4 (spine 1)
    spine0 = fab.switch(fab.t1_name(0, 0))
    dst_leaf = fab.switch(h2.switch)
    spine1 = fab.switch(fab.t1_name(0, 1))
    carrier = next(p for p in fab.paths("h0", "h2") if p.plane == 0 and p.spine == 1).carrier
    return (
        EcmpCase(
            "stev-flows-spread-over-every-uplink",
            "STEV EVs (flow label + UDP source port) to a NIC of another rack: each flow "
            "takes the uplink BMv2's CRC-32 picks, and both uplinks are used",
            leaf.name,
            h0.switch_port,
            h2.address,
            _stev(48),
        ),
        EcmpCase(
            "udp-evs-spread-by-source-port",
            "UDP EVs (the source port only, flow label 0) spread over every uplink",
            leaf.name,
            h0.switch_port,
            h2.address,
            tuple(Flow(0, 0xC000 + i) for i in range(32)),
        ),
        EcmpCase(
            "flow-label-alone-spreads-non-udp",
            "a packet without UDP hashes with source port 0: the flow label alone picks",
            leaf.name,
            h0.switch_port,
            h2.address,
            tuple(Flow(i * 0x1F3, None) for i in range(24)),
        ),
        EcmpCase(
            "members-picked-in-creation-order",
            "the uplink of spine 1 created first: BMv2 orders a group by member handle, "
            "so member 0 of the hash is port 4",
            leaf.name,
            h1.switch_port,
            h2.address,
            _stev(32),
            member_order=(4, 3),
        ),
        EcmpCase(
            "three-members-use-the-whole-hash",
            "a group of three (ports 2, 3, 4, the last created first): hash mod 3 depends on "
            "every bit of the 32-bit CRC, not only the low ones",
            leaf.name,
            h0.switch_port,
            h2.address,
            _stev(60),
            member_order=(4, 2, 3),
        ),
        EcmpCase(
            "end-then-ecmp-hashes-the-new-destination",
            "classic End at the source leaf hands over to a plain NIC address; the hash sees "
            "the destination after End",
            leaf.name,
            h0.switch_port,
            leaf.end_sid,
            _stev(16),
            dst_out=h2.address,
            ip_in=(("segments", [h2.address, leaf.end_sid]), ("segments_left", 1)),
            ip_out=(("segments", [h2.address, leaf.end_sid]), ("segments_left", 0)),
        ),
        EcmpCase(
            "usid-carrier-ignores-ecmp",
            "a uSID carrier names its spine: with the ECMP group installed it still leaves "
            "by that spine's uplink, whatever the flow",
            leaf.name,
            h0.switch_port,
            carrier,
            _stev(8),
            fixed_port=leaf.port_to(spine1.name).number,
        ),
        EcmpCase(
            "spine-routes-a-nic-down-to-its-rack",
            "a spine sends a plain NIC address down to the NIC's leaf",
            spine0.name,
            spine0.port_to(leaf.name).number,
            h2.address,
            _stev(4),
            fixed_port=spine0.port_to(dst_leaf.name).number,
        ),
        EcmpCase(
            "leaf-delivers-its-own-nic",
            "the destination leaf sends a plain NIC address to the host",
            dst_leaf.name,
            dst_leaf.port_to(spine0.name).number,
            h2.address,
            _stev(4),
            fixed_port=h2.switch_port,
        ),
    )


def test_case_table_is_sound() -> None:
    cases = ecmp_cases()
    assert len({c.name for c in cases}) == len(cases)
    for case in cases:
        ports = {p.number for p in case.sw.ports}
        assert case.in_port in ports
        for flow in case.flows:
            assert case.expected_port(fabric().host("h0").nic(0).address, flow) in ports
        # installed in one Write, in order: members, then the group, then routes to it
        entries = case.entries()
        if case.fixed_port is None:
            last_member = max(i for i, e in enumerate(entries) if e.kind == MEMBER)
            group = next(i for i, e in enumerate(entries) if e.kind == GROUP)
            first_route = min(i for i, e in enumerate(entries) if e.group)
            assert last_member < group < first_route


@pytest.mark.parametrize("case", ecmp_cases(), ids=str)
def test_ecmp_case(target: DataplaneTarget, case: EcmpCase) -> None:
    sw = case.sw
    src = fabric().host("h0").nic(0).address
    builder = Builder(fabric(), src)
    target.install([e.to_proto(target.p4info) for e in case.entries()])
    target.drain()
    used: set[int] = set()
    for flow in case.flows:
        upper = _upper(flow)
        label = {"flow_label": flow.flow_label}
        frame = builder.frame_in(sw, case.in_port, case.dst, upper, **label, **dict(case.ip_in))
        port = case.expected_port(src, flow)
        want = builder.frame_out(
            sw, port, case.dst_out or case.dst, upper, **label, **dict(case.ip_out)
        )
        target.send(case.in_port, frame)
        got = target.expect(port, OUT_TIMEOUT)
        if got is None:
            elsewhere = {p: target.expect(p, 0.2) for p in target.ports if p != port}
            left = [p for p, f in elsewhere.items() if f is not None]
            pytest.fail(
                f"{case.name} ({case.intent}): flow {flow} did not leave port {port} "
                f"(left by {left or 'none'})"
            )
        assert got == want, (
            f"{case.name}: flow {flow}: wrong frame out of port {port}\n"
            f"expected:\n{describe(want)}\ngot:\n{describe(got)}"
        )
        used.add(port)
    for port in target.ports:
        extra = target.expect(port, QUIET)
        assert extra is None, f"{case.name}: unexpected frame out of port {port}"
    if case.fixed_port is None:
        assert used == set(case.uplinks_in_handle_order()), (
            f"{case.name}: flows used uplinks {sorted(used)}, expected every uplink"
        )


def test_every_field_moves_some_flow() -> None:
    """A target that left a field out of the hash would fail the spreading cases: for each of
    the four fields, flipping one of its bits moves the flow to the other of two uplinks (the
    hash is a CRC, linear in its input, so this holds for some bits of each field, not all)."""
    src = int(fabric().host("h0").nic(0).address)
    dst = int(fabric().host("h2").nic(0).address)
    base = (src, dst, 0x12345, 0xC000)
    widths = (128, 128, 20, 16)
    for position, width in enumerate(widths):
        moved = []
        for bit in range(width):
            fields = list(base)
            fields[position] ^= 1 << bit
            f0, f1, f2, f3 = fields
            if member_index(f0, f1, f2, f3, 2) != member_index(*base, 2):
                moved.append(bit)
        assert moved, f"no bit of field {position} changes the uplink"
