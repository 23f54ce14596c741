"""EV profiles and EV format profiles after mrc_ctl.h: generated EVs from fields, the whole EV in
the outer headers, STEV / UDP EVs spread by the switches' ECMP hash on the in-memory network, EV
states shared by every QP of a profile, ev_min_active per profile."""

from __future__ import annotations

import collections
import dataclasses
import ipaddress
import math
import random
from typing import Any

import pytest
from support.frames import spy_data_frames

from host.transport import wire
from host.transport.cc import CcProfile
from host.transport.cc.fabric import fabric_cc_profile
from host.transport.events import EvStateChanged
from host.transport.evs import (
    EvField,
    EvFormat,
    EvFormatProfile,
    EvProfileError,
    EvState,
    ExplicitEvProfile,
    GeneratedEvProfile,
    build_slots,
    expand_ev,
    generate_evs,
    srv6_ev,
)
from sim.fabric import real_topology
from topologies import Fabric

BASE = 0x7F00_0000_0000
FAILED = ("t0-p0-r0", "t1-p0-s0")
STEV = EvFormatProfile(EvFormat.STEV, (8, 4, 4))


def pattern(n: int, seed: int) -> bytes:
    return bytes((i * 11 + seed * 3 + (i >> 9)) & 0xFF for i in range(n))


# -- generation (mrc_ctl_ev_field expansion) ------------------------------------------------------


def test_generated_fields_expand_into_format_fields() -> None:
    fields = (EvField(8), EvField(4), EvField(4))
    evs = generate_evs(fields, STEV, 20)
    # the last field varies fastest; fields concatenated, the first most significant
    assert evs[:3] == [0x000, 0x001, 0x002]
    assert evs[16] == 0x010 and evs[19] == 0x013
    assert len(set(evs)) == 20


def test_init_val_and_mask_place_generated_bits() -> None:
    fmt = EvFormatProfile(EvFormat.SRV6, (32, 16))
    fixed = EvField(32, init_val=0xFCBBBB00, max_val=0, mask=0)
    usid = EvField(16, init_val=0x100, max_val=255, mask=0xFF)
    evs = generate_evs((fixed, usid), fmt, 3)
    assert evs == [0xFCBBBB00_0100, 0xFCBBBB00_0101, 0xFCBBBB00_0102]
    # a profile field narrower than its format field is zero-filled to the format field's width
    narrow = generate_evs((EvField(4, min_val=2),), EvFormatProfile(EvFormat.STEV, (8, 8)), 2)
    assert narrow == [0x0200, 0x0300]


@pytest.mark.parametrize(
    ("fields", "fmt", "count", "message"),
    [
        ((EvField(8, max_val=256),), STEV, 1, "max_val 256 wider"),
        ((EvField(8, mask=0x100),), STEV, 1, "outside the field"),
        ((EvField(8, init_val=0x100),), STEV, 1, "init_val"),
        ((EvField(4), EvField(4), EvField(4), EvField(4)), STEV, 1, "has 3"),
        ((EvField(9),), STEV, 1, "width 9"),
        ((EvField(4),), STEV, 17, "give 1..16"),
    ],
)
def test_generated_profile_errors(fields: Any, fmt: Any, count: int, message: str) -> None:
    with pytest.raises(EvProfileError, match=message):
        generate_evs(fields, fmt, count)


def test_format_widths_are_bounded() -> None:
    with pytest.raises(EvProfileError, match="at most 32 bits"):
        EvFormatProfile(EvFormat.STEV, (20, 20))
    with pytest.raises(EvProfileError, match="at most 16 bits"):
        EvFormatProfile("udp", (17,))  # type: ignore[arg-type]
    with pytest.raises(EvProfileError, match="expected one of srv6, stev, udp"):
        EvFormatProfile("vxlan")  # type: ignore[arg-type]


# -- the whole EV on the wire ---------------------------------------------------------------------


def test_stev_and_udp_outer_headers_carry_the_whole_ev() -> None:
    for ev in (0x0, 0xABCDE, 0xFFF_FFFFF, 0x123_45678):
        flow, sport = wire.ev_outer(ev, "stev")
        assert flow == ev & 0xFFFFF and sport == 0xC000 | ev >> 20
        assert wire.ev_of_outer(flow, sport, "stev") == ev
    for ev in (0x1, 0x3FFF):
        flow, sport = wire.ev_outer(ev, "udp")
        assert flow == 0 and sport == 0xC000 | ev and wire.ev_of_outer(flow, sport, "udp") == ev
    assert wire.ev_outer(0x8001, "udp") == (0, 0x8001)


def test_stev_packets_go_to_the_nic_address(make_net: Any, fabric: Fabric) -> None:
    net = make_net(seed=1)
    flow = net.connect("h0", "h2", ev_profile=GeneratedEvProfile(16, fmt=STEV))
    dst = fabric.host("h2").nic(0).address.packed
    for slot in flow.sender.ev_table.slots:
        frame = wire.encode_data(
            slot.prefix, 1, 0, False, 0, 1, None, 0, slot.plane, slot.spine_hint, slot.wire,
            1, 8, 0, 0, bytes(8),
        )  # fmt: skip
        out = wire.parse(frame).outer
        assert out.dst == fabric.host("h2").nic(slot.plane).address.packed
        assert wire.ev_of_outer(out.flow_label, out.udp_sport) == slot.ev
        assert slot.label == f"p{slot.plane}-ecmp" and slot.spine_hint == 0xFF
    assert any(s.prefix[38:54] == dst for s in flow.sender.ev_table.slots)
    # planes in turn
    assert [s.plane for s in flow.sender.ev_table.slots[:4]] == [0, 1, 0, 1]


def test_explicit_stev_profile(make_net: Any) -> None:
    net = make_net(seed=1)
    profile = ExplicitEvProfile(((0x11, 0), (0x22, 1), (0x33, 1)), fmt=STEV)
    flow = net.connect("h0", "h2", ev_profile=profile)
    assert [(s.ev, s.plane) for s in flow.sender.ev_table.slots] == [
        (0x11, 0),
        (0x22, 1),
        (0x33, 1),
    ]
    with pytest.raises(EvProfileError, match="on plane 5"):
        net.connect("h0", "h2", ev_profile=ExplicitEvProfile(((1, 5),), fmt=STEV))
    with pytest.raises(EvProfileError, match="16-bit value"):
        net.connect("h0", "h2", ev_profile=ExplicitEvProfile(((1 << 16, 0),), fmt=UDP16))


UDP16 = EvFormatProfile(EvFormat.UDP)


# -- ECMP spraying on the in-memory network -------------------------------------------------------


@pytest.mark.parametrize("fmt", [STEV, UDP16], ids=["stev", "udp"])
def test_hashed_spraying_uses_every_uplink_and_survives_a_link_failure(
    make_net: Any, fmt: EvFormatProfile
) -> None:
    net = make_net(seed=5)
    flow = net.connect("h0", "h2", ev_profile=GeneratedEvProfile(64, fmt=fmt))
    net.sim.fail_link(*FAILED, start=0.05)
    data = pattern(3 << 20, 2)
    flow.sender.post_write(data, BASE, flow.region.rkey, wr_id=1)
    net.sim.kick("h0")
    net.run(30.0, stop=lambda: len(net.cqs["h0"]) == 1)
    assert net.cqs["h0"].poll()[0].status == "ok"
    assert flow.region.read(BASE, len(data)) == data
    assert net.sim.counters["ecmp"] > 0
    for plane in (0, 1):
        for port in (3, 4):  # the uplinks of rack 0's leaf: both spines carried data
            assert net.sim.port_counters[f"t0-p{plane}-r0-eth{port}"]["tx"] > 0
    net.drain_events()
    retired = [e for e in net.events if isinstance(e, EvStateChanged) and e.new == "assumed_bad"]
    # per EV, never a whole "path": the host knows no paths in this format
    assert retired and all(e.reason in ("sack", "late", "rto") for e in retired)
    assert all(e.path == "p0-ecmp" for e in retired)
    bad = {e.ev for e in retired}
    assert len(bad) < 32  # only the EVs the hash put on the failed link (about half of plane 0's)


# -- states per profile, shared by its QPs --------------------------------------------------------


def _shared_pair(net: Any, fmt: EvFormatProfile) -> tuple[Any, Any, Any]:
    a, b = net.host("h0"), net.host("h2")
    pa = a.create_ev_profile(GeneratedEvProfile(32, fmt=fmt))
    pb = b.create_ev_profile(GeneratedEvProfile(32, fmt=fmt))
    qps = []
    for _ in range(2):
        qa = a.create_qp("h2", net.fabric.paths("h0", "h2"), cq=net.cqs["h0"], ev_profile=pa)
        qb = b.create_qp("h0", net.fabric.paths("h2", "h0"), cq=net.cqs["h2"], ev_profile=pb)
        qa.connect(qb.qpn)
        qb.connect(qa.qpn)
        qps.append(qa)
    return pa, qps[0], qps[1]


def _data_frames(ctx: Any) -> list[tuple[wire.DataPacket, bytes]]:
    """Every data frame ``ctx`` sends from now on, parsed and as bytes (recorded as it sends)."""
    sent: list[tuple[wire.DataPacket, bytes]] = []
    spy_data_frames(ctx, lambda _, packet, frame: sent.append((packet, frame)))
    return sent


@pytest.mark.parametrize("fmt", [EvFormatProfile(), STEV], ids=["srv6", "stev"])
def test_one_qp_finds_a_failed_path_the_other_never_uses_it(
    make_net: Any, fmt: EvFormatProfile
) -> None:
    net = make_net(seed=2)
    profile, first, second = _shared_pair(net, fmt)
    assert first.ev_profile is second.ev_profile
    net.sim.fail_link(*FAILED, start=0.0)
    first.post_write(pattern(1 << 20, 1), BASE, net.regions["h2"].rkey, wr_id=1)
    net.sim.kick("h0")
    net.run(20.0, stop=lambda: len(net.cqs["h0"]) == 1)
    assert net.cqs["h0"].poll()[0].status == "ok"
    bad = {s.wire for s in first.ev_table.slots if s.state is EvState.ASSUMED_BAD}
    assert bad
    # the other QP sees the same states without having lost anything
    assert {s.wire for s in second.ev_table.slots if s.state is EvState.ASSUMED_BAD} == bad
    sent = _data_frames(net.hosts["h0"])
    retx_before = net.hosts["h0"].stats()["retransmits"]
    second.post_write(pattern(1 << 20, 2), BASE, net.regions["h2"].rkey, wr_id=2)
    net.sim.kick("h0")
    net.run(net.sim.now + 20.0, stop=lambda: len(net.cqs["h0"]) == 1)
    assert net.cqs["h0"].poll()[0].status == "ok"
    used = [p.ev for p, _ in sent if p.outer.dest_qp == second.remote_qpn]
    assert used and not bad & set(used)
    assert net.hosts["h0"].stats()["retransmits"] == retx_before  # it lost nothing
    # one event per state change of the profile, naming it
    net.drain_events()
    changes = [e for e in net.events if isinstance(e, EvStateChanged) and e.profile == profile]
    assert len([e for e in changes if e.new == "assumed_bad"]) == len(bad)


def test_operator_state_of_a_shared_profile(make_net: Any) -> None:
    net = make_net(seed=2)
    profile, first, second = _shared_pair(net, STEV)
    ctx = net.hosts["h0"]
    ev = first.ev_table.slots[3].ev
    ctx.set_profile_ev_state(profile, ev, EvState.DENIED)
    assert second.ev_table.state(ev) is EvState.DENIED
    assert ctx.ev_profile(profile).counts()["denied"] == 1
    ctx.set_ev_state(second.qpn, ev, EvState.UNKNOWN)
    assert first.ev_table.state(ev) is EvState.UNKNOWN
    with pytest.raises(KeyError, match="no such profile"):
        ctx.set_profile_ev_state(99, ev, EvState.DENIED)


def test_min_active_is_the_profile_s(make_net: Any) -> None:
    net = make_net(seed=3)
    profile = GeneratedEvProfile(8, fmt=STEV, min_active=6)
    flow = net.connect("h0", "h2", ev_profile=profile)
    assert flow.sender.ev_profile.min_active == 6
    net.sim.fail_link("h0", "t0-p0-r0", start=0.0)  # plane 0 of h0: half its EVs
    flow.sender.post_write(pattern(400_000, 4), BASE, flow.region.rkey, wr_id=1)
    net.sim.kick("h0")
    net.run(0.5)
    assert flow.sender.ev_table.counts()["good"] >= 6
    assert net.hosts["h0"].stats()["retire_suppressed"] >= 1


# -- operator EV states and port administrative state (Context host operations) -------------------


def test_set_ev_states_checks_every_ev_before_changing_any(make_net: Any) -> None:
    net = make_net(seed=2)
    flow = net.connect("h0", "h2")
    ctx, qp = net.hosts["h0"], flow.sender
    evs = [s.ev for s in qp.ev_table.slots[:3]]
    assert ctx.set_ev_states(qp.qpn, evs, EvState.DENIED) == 3
    assert all(qp.ev_table.state(ev) is EvState.DENIED for ev in evs)
    with pytest.raises(KeyError, match="not in this QP"):  # one unknown EV: nothing changes
        ctx.set_ev_states(qp.qpn, [evs[0], 0xDEAD_BEEF], EvState.UNKNOWN)
    assert qp.ev_table.state(evs[0]) is EvState.DENIED
    with pytest.raises(ValueError, match="field 'state'"):  # the transport's own verdict
        ctx.set_ev_states(qp.qpn, evs, EvState.ASSUMED_BAD)
    with pytest.raises(ValueError, match="field 'state'"):
        ctx.set_profile_ev_state(qp.ev_profile.profile_id, evs[0], EvState.ASSUMED_BAD)


def test_port_admin_state_is_inherited_by_later_qps(make_net: Any) -> None:
    net = make_net(seed=2)
    first = net.connect("h0", "h2").sender
    ctx = net.hosts["h0"]
    on_plane_1 = [s.ev for s in first.ev_table.slots if s.plane == 1]
    assert on_plane_1 and ctx.port_admin(1)
    assert ctx.set_port_admin(1, False) == len(on_plane_1)
    assert ctx.set_port_admin(1, False) == 0  # already disabled
    assert not ctx.port_admin(1)
    assert all(first.ev_table.state(ev) is EvState.DENIED for ev in on_plane_1)
    later = net.connect("h0", "h3").sender  # created while the port is disabled
    assert {s.state for s in later.ev_table.slots if s.plane == 1} == {EvState.DENIED}
    assert {s.state for s in later.ev_table.slots if s.plane == 0} == {EvState.GOOD}
    ctx.set_port_admin(1, True)  # released, to be probed back
    for qp in (first, later):
        assert {s.state for s in qp.ev_table.slots if s.plane == 1} == {EvState.UNKNOWN}
    with pytest.raises(ValueError, match="field 'plane'"):
        ctx.set_port_admin(7, False)


# -- the expansion of explicit and generated EVs (mrc_ctl.h, above mrc_ctl_ev_profile_attr) -------

BLOCK = 0xFCBB_BB00  # the fabric's uSID block, a fixed 32-bit field (init_val, mask 0)
SRV6_USIDS = EvFormatProfile(EvFormat.SRV6, (32, 16, 16, 16, 48))
SRV6_SRH_USIDS = EvFormatProfile(EvFormat.SRV6, (32, 16, 80, 32, 16, 16, 64), srh=True)


def fixed(width: int, value: int = 0) -> EvField:
    return EvField(width, init_val=value, max_val=0, mask=0)


def usid_word(address: Any, index: int) -> int:
    """The ``index``-th 16-bit word of an IPv6 address (0: the most significant)."""
    return int(address) >> (112 - 16 * index) & 0xFFFF


def compact_srv6(path: Any) -> int:
    """A path's compact EV for SRV6_USIDS: its three uSIDs after the block."""
    return int(path.carrier) >> 48 & (1 << 48) - 1


def compact_srh(path: Any) -> int:
    """A path's compact EV for SRV6_SRH_USIDS: the spine's uSID, then the leaf's and the NIC's
    (the carrier up to the turn, the SRH segment on)."""
    spine, leaf, nic = (usid_word(path.srh_carrier, 2), usid_word(path.srh_segment, 2),
                        usid_word(path.srh_segment, 3))  # fmt: skip
    return spine << 32 | leaf << 16 | nic


#: (name, format, fields, EV as given, EV expanded)
EXPANSIONS: list[tuple[str, EvFormatProfile, tuple[EvField, ...], int, int]] = [
    ("identity", STEV, (), 0x123, 0x123),
    ("fields whole", STEV, (EvField(8), EvField(4), EvField(4)), 0xABC, 0xABC),
    ("fixed field", EvFormatProfile(EvFormat.STEV, (8, 12, 12)),
     (fixed(8, 0x3C), EvField(12), EvField(12)), 0x123_456, 0x3C_123_456),
    ("mask 0xf0f", EvFormatProfile(EvFormat.STEV, (8, 12, 12)),
     (fixed(8, 0x3C), EvField(12, init_val=0x0A0, mask=0xF0F), EvField(12)), 0x5C_123,
     0x3C_5AC_123),
    ("mask 0xf0f, init bits under the mask overwritten", EvFormatProfile(EvFormat.STEV, (12,)),
     (EvField(12, init_val=0xFFF, mask=0xF0F),), 0x00, 0x0F0),
    ("narrow field zero-filled", EvFormatProfile(EvFormat.STEV, (16, 16)),
     (EvField(4), EvField(16, init_val=0x8000, mask=0x00FF)), 0x9_42, 0x0009_8042),
    ("udp, fixed top", EvFormatProfile(EvFormat.UDP, (4, 12)),
     (fixed(4, 0x8), EvField(12, init_val=0x0A0, mask=0xF0F)), 0x5C, 0x85AC),
    ("srv6 fixed locator", SRV6_USIDS, (fixed(32, BLOCK), EvField(16), EvField(16), EvField(16)),
     0x0800_0401_0C02, int(ipaddress.IPv6Address("fcbb:bb00:800:401:c02::"))),
    ("srv6+srh", SRV6_SRH_USIDS,
     (fixed(32, BLOCK), EvField(16), fixed(80), fixed(32, BLOCK), EvField(16), EvField(16),
      fixed(64)), 0x0800_0401_0C02,
     int(ipaddress.IPv6Address("fcbb:bb00:800::")) << 128
     | int(ipaddress.IPv6Address("fcbb:bb00:401:c02::"))),
]  # fmt: skip


@pytest.mark.parametrize(("fmt", "fields", "given", "expanded"),
                         [e[1:] for e in EXPANSIONS], ids=[e[0] for e in EXPANSIONS])  # fmt: skip
def test_explicit_and_generated_evs_expand_alike(
    fmt: EvFormatProfile, fields: tuple[EvField, ...], given: int, expanded: int
) -> None:
    assert expand_ev(fields, fmt, given) == expanded
    assert ExplicitEvProfile(((given, 0),), fmt=fmt, fields=fields).expanded(given) == expanded
    if not fields:
        return
    # a generated profile on the same fields: EV n is the expansion of n's field values,
    # concatenated over the masks' bits as an explicit EV gives them
    count = min(64, math.prod(f.top - f.min_val + 1 for f in fields))
    for n, ev in enumerate(generate_evs(fields, fmt, count)):
        values: list[int] = []
        rest = n
        for f in reversed(fields):
            rest, digit = divmod(rest, f.top - f.min_val + 1)
            values.insert(0, f.min_val + digit)
        compact = 0
        for f, value in zip(fields, values, strict=True):
            compact = compact << f.gen_bits | value
        assert ev == expand_ev(fields, fmt, compact), n


@pytest.mark.parametrize(
    ("fields", "given", "message"),
    [
        ((fixed(8, 0x3C), EvField(12, mask=0xF0F), EvField(12)), 1 << 20, "wider than the 20"),
        ((EvField(8, init_val=0x100),), 1, "init_val"),
        ((EvField(4), EvField(4), EvField(4), EvField(4)), 1, "has 3"),
    ],
)
def test_explicit_evs_their_fields_cannot_expand(
    fields: tuple[EvField, ...], given: int, message: str
) -> None:
    with pytest.raises(EvProfileError, match=message):
        expand_ev(fields, EvFormatProfile(EvFormat.STEV, (8, 12, 12)), given)


def _connect_from_h0(net: Any, profile: ExplicitEvProfile) -> Any:
    """A flow h0 -> h2 whose sender runs on ``profile`` (h2's QP on the host's own EVs)."""
    flow = net.connect("h0", "h2")  # the region, and the CC the harness fits
    cc = fabric_cc_profile(net.sim.topology, CcProfile("nscc"), net.config)
    a, b = net.host("h0"), net.host("h2")
    qa = a.create_qp("h2", net.fabric.paths("h0", "h2"), cq=net.cqs["h0"], ev_profile=profile,
                     cc=cc)  # fmt: skip
    qb = b.create_qp("h0", net.fabric.paths("h2", "h0"), cq=net.cqs["h2"], cc=cc)
    qa.connect(qb.qpn)
    qb.connect(qa.qpn)
    return dataclasses.replace(flow, sender=qa, receiver=qb)


def _frames(net: Any, flow: Any) -> list[tuple[wire.DataPacket, bytes]]:
    """The data frames h0 sends for one 64 KiB WRITE of ``flow``, which arrives intact."""
    sent = _data_frames(net.host("h0"))
    assert net.write(flow, pattern(1 << 16, 7), 10.0).status == "ok"
    assert flow.region.read(BASE, 1 << 16) == pattern(1 << 16, 7)
    return sent


@pytest.mark.parametrize(
    ("fmt", "fields", "mode"),
    [(e[1], e[2], e[1].mode.value) for e in EXPANSIONS[:7]],
    ids=[e[0] for e in EXPANSIONS[:7]],
)
def test_explicit_stev_and_udp_evs_go_on_the_wire_expanded(
    make_net: Any, fmt: EvFormatProfile, fields: tuple[EvField, ...], mode: str
) -> None:
    """Four EVs per plane of each expansion: the profile keeps them as given, every data
    frame carries an expanded one in its flow label and UDP source port."""
    net = make_net(seed=4)
    bits = sum(f.gen_bits for f in fields) if fields else fmt.width
    given = [(n * 0x1F3 + 5) % (1 << bits) for n in range(8)]
    profile = ExplicitEvProfile(tuple((ev, n % 2) for n, ev in enumerate(given)), fmt=fmt,
                                fields=fields)  # fmt: skip
    flow = _connect_from_h0(net, profile)
    slots = flow.sender.ev_table.slots
    assert [s.ev for s in slots] == given  # as given
    assert [s.wire for s in slots] == [expand_ev(fields, fmt, ev) for ev in given]
    outers = {wire.ev_outer(s.wire, mode) for s in slots}
    seen = {(p.outer.flow_label, p.outer.udp_sport) for p, _ in _frames(net, flow)}
    assert seen and seen <= outers


@pytest.mark.parametrize("srh", [False, True], ids=["srv6 fixed locator", "srv6+srh"])
def test_explicit_srv6_evs_go_on_the_wire_as_carriers(
    make_net: Any, fabric: Fabric, srh: bool
) -> None:
    """Compact EVs (three uSIDs each) expanded through a fixed locator field: each is the
    carrier of its path, the packets go to it (with an SRH: to the carrier up to the turn, the
    segment in the SRH)."""
    net = make_net(seed=4)
    paths = fabric.paths("h0", "h2")
    fmt, fields = (EXPANSIONS[8] if srh else EXPANSIONS[7])[1:3]
    given = [compact_srh(p) if srh else compact_srv6(p) for p in paths]
    profile = ExplicitEvProfile(tuple((ev, p.plane) for ev, p in zip(given, paths, strict=True)),
                                fmt=fmt, fields=fields, carriers=True)  # fmt: skip
    flow = _connect_from_h0(net, profile)
    slots = flow.sender.ev_table.slots
    assert [s.ev for s in slots] == given and [s.path for s in slots] == paths
    for slot in slots:
        assert profile.expanded(slot.ev) == srv6_ev(slot.path, srh)[0]
    sent = _frames(net, flow)
    assert {frame[38:54] for _, frame in sent} == {
        (p.srh_carrier if srh else p.carrier).packed for p in paths
    }  # the IPv6 destination as sent
    if srh:
        assert {(frame[38:54], frame[62:78]) for _, frame in sent} == {
            (p.srh_carrier.packed, p.srh_segment.packed) for p in paths
        }  # and the SRH's segment
    wrong = ExplicitEvProfile(((given[0] ^ 1, paths[0].plane),), fmt=fmt, fields=fields,
                              carriers=True)  # fmt: skip
    with pytest.raises(EvProfileError, match="no path to"):
        _connect_from_h0(net, wrong)


# -- generated SRV6 EVs over more paths than EVs ---------------------------------------------------


def _slots_per_path(paths: list[Any], count: int, seed: int) -> tuple[list[Any], dict[int, int]]:
    slots = build_slots(paths, GeneratedEvProfile(count=count), count, random.Random(seed))
    per_path: dict[int, int] = collections.Counter(slot.path_index for slot in slots)
    return slots, per_path


def test_generated_srv6_evs_cover_every_plane_with_fewer_evs_than_paths() -> None:
    # 8 planes x 32 spines: 256 paths between racks, and a QP of 64 EVs (MRC's scale): every
    # plane gets its eighth, evenly spaced over its spines, never the first 64 paths alone
    fabric = Fabric(real_topology(racks=2, hosts_per_rack=1, spines_per_plane=32, planes=8))
    paths = fabric.paths("h0", "h1")
    assert len(paths) == 256
    slots, per_path = _slots_per_path(paths, 64, seed=1)
    assert len(slots) == 64 and max(per_path.values()) == 1
    for plane in range(8):
        spines = sorted(s.path.spine for s in slots if s.plane == plane)
        assert len(spines) == 8
        gaps = {(b - a) % 32 for a, b in zip(spines, spines[1:] + spines[:1], strict=True)}
        assert gaps == {4}, f"plane {plane}: spines {spines}"
    # consecutive EVs take the planes in turn
    assert [s.plane for s in slots[:8]] == sorted(s.plane for s in slots[:8])


def test_generated_srv6_evs_of_many_qps_load_every_path_alike() -> None:
    fabric = Fabric(real_topology(racks=2, hosts_per_rack=1, spines_per_plane=32, planes=8))
    paths = fabric.paths("h0", "h1")
    load: collections.Counter[int] = collections.Counter()
    for seed in range(256):
        load.update(_slots_per_path(paths, 64, seed)[1])
    # 256 QPs of 64 EVs over 256 paths: 64 EVs per path on average; every path is used
    assert len(load) == 256
    assert min(load.values()) >= 32 and max(load.values()) <= 96


def test_generated_srv6_evs_divide_evenly_as_before() -> None:
    # as many EVs as a whole number of times the paths: each path the same count, no draw
    fabric = Fabric(real_topology(racks=2, hosts_per_rack=1, spines_per_plane=2, planes=4))
    paths = fabric.paths("h0", "h1")
    rng = random.Random(3)
    state = rng.getstate()
    slots = build_slots(paths, GeneratedEvProfile(count=128), 128, rng)
    assert rng.getstate() == state
    assert set(collections.Counter(s.path_index for s in slots).values()) == {16}
    # an uneven split gives every path one EV before any gets two (9 EVs over 8 paths)
    _, per_path = _slots_per_path(paths, 9, seed=1)
    assert len(per_path) == 8 and sorted(per_path.values()) == [1] * 7 + [2]
