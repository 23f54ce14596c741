"""SRV6 EVs with an SRH: the format profile, the EV slots' split destination and segment, frames
with a single-segment SRH (data, probes, ACKs), and transfers across the in-memory network with
End at the turn of every path, trimming and a failed link included."""

from __future__ import annotations

import zlib
from typing import Any

import pytest
from scapy.layers.inet import UDP
from scapy.layers.inet6 import IPv6, IPv6ExtHdrSegmentRouting
from scapy.layers.l2 import Ether

from host.transport import wire
from host.transport.events import EvStateChanged
from host.transport.evs import (
    SRV6_SRH_FORMAT,
    EvFormat,
    EvFormatProfile,
    EvProfileError,
    ExplicitEvProfile,
    GeneratedEvProfile,
    Srv6EvProfile,
    format_profile,
    srv6_ev,
)
from p4src.contract import Dscp, Ecn
from topologies import Fabric

BASE = 0x7F00_0000_0000
FAILED = ("t0-p0-r0", "t1-p0-s0")


def pattern(n: int, seed: int) -> bytes:
    return bytes((i * 13 + seed * 5 + (i >> 9)) & 0xFF for i in range(n))


# -- the format profile -------------------------------------------------------------------------


def test_srh_format_carries_up_to_256_bits() -> None:
    ocp = EvFormatProfile(EvFormat.SRV6, (32,) + (16,) * 6 + (32,) + (16,) * 4, srh=True)
    assert ocp.width == 224 and ocp.name == "srv6+srh"
    assert SRV6_SRH_FORMAT.widths == (128, 128) and SRV6_SRH_FORMAT.width == 256
    with pytest.raises(EvProfileError, match="at most 256 bits"):
        EvFormatProfile(EvFormat.SRV6, (128, 129), srh=True)
    with pytest.raises(EvProfileError, match="up to 256"):
        EvFormatProfile(EvFormat.SRV6, (128, 96))  # beyond 128 bits needs the SRH
    with pytest.raises(EvProfileError, match="only the srv6 format"):
        EvFormatProfile(EvFormat.STEV, srh=True)
    assert format_profile("SRV6+SRH") == SRV6_SRH_FORMAT
    assert format_profile("srv6") == EvFormatProfile(EvFormat.SRV6)
    with pytest.raises(EvProfileError, match="srv6, srv6\\+srh, stev, udp"):
        format_profile("srh")


# -- slots and frames ---------------------------------------------------------------------------


def test_slots_take_the_split_from_the_path(make_net: Any, fabric: Fabric) -> None:
    net = make_net(seed=1)
    flow = net.connect("h0", "h2", ev_profile=GeneratedEvProfile(16, fmt=SRV6_SRH_FORMAT))
    paths = fabric.paths("h0", "h2")
    for slot in flow.sender.ev_table.slots:
        path = paths[slot.path_index]
        assert slot.dst == path.srh_carrier and slot.srh == path.srh_segment
        assert slot.ext_len == wire.SRH_LEN == len(slot.prefix) - wire.PREFIX_LEN
        frame = wire.encode_data(
            slot.prefix, 5, 7, True, BASE, 1, None, wire.FLAG_FIRST, slot.plane,
            slot.spine_hint, slot.wire, 1, 100, 0, 0, pattern(100, 1),
        )  # fmt: skip
        pkt = wire.parse(frame)
        assert isinstance(pkt, wire.DataPacket)
        assert pkt.outer.dst == path.srh_carrier.packed
        assert wire.ev_of_outer(pkt.outer.flow_label, pkt.outer.udp_sport) == slot.wire
        assert bytes(pkt.payload) == pattern(100, 1) and pkt.outer.psn == 7
        # the receiver's fast path leaves SRH frames to parse()
        assert wire.decode_data(frame) is None


def test_srh_frame_layout_and_scapy_decode(make_net: Any, fabric: Fabric) -> None:
    net = make_net(seed=1)
    flow = net.connect("h0", "h2", ev_profile=GeneratedEvProfile(4, fmt=SRV6_SRH_FORMAT))
    slot = flow.sender.ev_table.slots[0]
    path = fabric.paths("h0", "h2")[slot.path_index]
    payload = pattern(300, 2)
    frame = wire.encode_data(
        slot.prefix, 5, 9, False, BASE + 64, 1, 0xBEEF, wire.FLAG_LAST, slot.plane,
        slot.spine_hint, slot.wire, 3, 364, 64, 0, payload,
    )  # fmt: skip
    assert len(frame) == wire.DATA_IMM_HEADER_LEN + wire.SRH_LEN + len(payload)
    # RFC 8754 fields, byte by byte, right after the IPv6 header
    srh = frame[wire.OFF_UDP : wire.OFF_UDP + wire.SRH_LEN]
    assert frame[20] == wire.IPPROTO_ROUTING
    assert srh[:8] == bytes((wire.IPPROTO_UDP, 2, 4, 1, 0, 0, 0, 0))
    assert srh[8:] == path.srh_segment.packed
    ip_payload = int.from_bytes(frame[18:20], "big")
    assert ip_payload == len(frame) - wire.OFF_UDP
    decoded = Ether(frame)
    assert decoded.haslayer(IPv6ExtHdrSegmentRouting) and decoded.haslayer(UDP)
    ip6, sr, udp = decoded[IPv6], decoded[IPv6ExtHdrSegmentRouting], decoded[UDP]
    assert ip6.nh == 43 and ip6.dst == str(path.srh_carrier) and ip6.plen == ip_payload
    assert (sr.type, sr.segleft, sr.lastentry, sr.nh) == (4, 1, 0, 17)
    assert sr.addresses == [str(path.srh_segment)]
    assert udp.dport == wire.ROCE_PORT and udp.len == ip_payload - wire.SRH_LEN
    # the sender's WRITE_IMM path (encode_data_split on the slot's split prefix) agrees
    split = wire.encode_data_split(
        slot.head, slot.mid, 5, 9, False, BASE + 64, 1, 0xBEEF, wire.FLAG_LAST, slot.plane,
        slot.spine_hint, slot.wire, 3, 364, 64, 0, payload,
    )  # fmt: skip
    assert split == frame
    # control frames: a probe on the slot carries the same SRH, lengths counting it
    probe = wire.encode_probe(slot.prefix, 5, False, slot.plane, slot.spine_hint, slot.wire,
                              1, 2, 3)  # fmt: skip
    assert len(probe) == wire.CTRL_FRAME_LEN + wire.SRH_LEN
    parsed = wire.parse(probe)
    assert isinstance(parsed, wire.ProbePacket) and parsed.probe_id == 2 and parsed.src_qp == 3
    assert Ether(bytes(probe))[IPv6ExtHdrSegmentRouting].addresses == [str(path.srh_segment)]


def test_srv6_profile_with_srh_is_the_256_bit_split(make_net: Any, fabric: Fabric) -> None:
    net = make_net(seed=1)
    flow = net.connect("h0", "h2", ev_profile=Srv6EvProfile(srh=True))
    paths = fabric.paths("h0", "h2")
    slots = flow.sender.ev_table.slots
    assert len(slots) == len(paths)
    for slot, path in zip(slots, paths, strict=True):
        assert slot.ev >> 128 == int(path.srh_carrier)
        assert slot.ev & ((1 << 128) - 1) == int(path.srh_segment)
        assert slot.ev.to_bytes(32, "big") == path.srh_carrier.packed + path.srh_segment.packed
        assert slot.wire == zlib.crc32(slot.ev.to_bytes(32, "big"))
    explicit = net.connect("h0", "h2", ev_profile=ExplicitEvProfile(((7, 1), (9, 3)),
                                                                    fmt=SRV6_SRH_FORMAT))  # fmt: skip
    got = [(s.ev, s.dst, s.srh) for s in explicit.sender.ev_table.slots]
    assert got == [(7, paths[1].srh_carrier, paths[1].srh_segment),
                   (9, paths[3].srh_carrier, paths[3].srh_segment)]  # fmt: skip


# -- transfers on the in-memory network ----------------------------------------------------------


@pytest.mark.parametrize(("src", "dst"), [("h0", "h2"), ("h0", "h1")], ids=["racks", "rack"])
def test_transfer_with_srh_is_intact(make_net: Any, src: str, dst: str) -> None:
    net = make_net(seed=3)
    flow = net.connect(src, dst, ev_profile=GeneratedEvProfile(32, fmt=SRV6_SRH_FORMAT))
    data = pattern(1 << 20, 4)
    flow.sender.post_write(data[:4000], BASE, flow.region.rkey, wr_id=1)
    flow.sender.post_write_imm(data, BASE + 8192, flow.region.rkey, imm=77, wr_id=2)
    net.sim.kick(src)
    net.run(20.0, stop=lambda: len(net.cqs[src]) == 2)
    done = net.cqs[src].poll(10)
    assert sorted(c.wr_id for c in done) == [1, 2] and all(c.status == "ok" for c in done)
    assert flow.region.read(BASE, 4000) == data[:4000]
    assert flow.region.read(BASE + 8192, len(data)) == data
    for host in (src, dst):  # nothing refused (a duplicate is a tail-loss probe's copy)
        drops = net.hosts[host].stats()["drops"]
        assert set(drops) <= {"duplicate"}, drops
    assert net.hosts[dst].stats()["messages_received"] == 2
    assert net.sim.counters.get("drop_sid_end", 0) == 0
    assert net.sim.counters.get("drop_no_route", 0) == 0


def test_srh_transfer_trims_and_fails_over(make_net: Any) -> None:
    net = make_net(seed=5, trim_threshold=8)
    flow = net.connect("h0", "h2", ev_profile=GeneratedEvProfile(64, fmt=SRV6_SRH_FORMAT))
    other = net.connect("h1", "h2", ev_profile=GeneratedEvProfile(64, fmt=SRV6_SRH_FORMAT))
    net.sim.fail_link(*FAILED, start=0.02)
    data = pattern(4 << 20, 6)
    flow.sender.post_write(data, BASE, flow.region.rkey, wr_id=1)
    other.sender.post_write(data[: 2 << 20], BASE + (5 << 20), other.region.rkey, wr_id=2)
    net.kick_all()
    net.run(60.0, stop=lambda: len(net.cqs["h0"]) == 1 and len(net.cqs["h1"]) == 1)
    assert net.cqs["h0"].poll()[0].status == "ok" and net.cqs["h1"].poll()[0].status == "ok"
    assert flow.region.read(BASE, len(data)) == data
    assert other.region.read(BASE + (5 << 20), 2 << 20) == data[: 2 << 20]
    # trimmed SRH frames were NACKed and resent; the failed link's path was retired
    assert net.sim.counters["trimmed"] > 0
    assert net.hosts["h2"].stats()["trims_seen"] > 0
    assert net.hosts["h0"].stats()["retransmits"]["nack"] > 0
    retired = [e for e in net.events if isinstance(e, EvStateChanged) and e.new == "assumed_bad"]
    assert retired and {e.path for e in retired} == {"p0-s0"}


@pytest.mark.parametrize("srh", [False, True], ids=["srv6", "srv6+srh"])
def test_explicit_carriers_take_their_paths(make_net: Any, fabric: Fabric, srh: bool) -> None:
    """Explicit SRV6 EVs given as the paths' carriers (with an SRH: carrier and segment): each
    slot is the path it names, so labels and retire_path are the generated SRV6 ones."""
    net = make_net(seed=7)
    paths = fabric.paths("h0", "h2")
    fmt = SRV6_SRH_FORMAT if srh else EvFormatProfile(EvFormat.SRV6)
    chosen = [paths[3], paths[0], paths[2]]
    evs = tuple((srv6_ev(p, srh)[0], p.plane) for p in chosen)
    a, b = net.host("h0"), net.host("h2")
    explicit = ExplicitEvProfile(evs, fmt=fmt, carriers=True)
    sender = a.create_qp("h2", paths, cq=net.cqs["h0"], ev_profile=explicit)
    receiver = b.create_qp("h0", fabric.paths("h2", "h0"), cq=net.cqs["h2"])
    sender.connect(receiver.qpn)
    receiver.connect(sender.qpn)
    slots = sender.ev_table.slots
    assert [s.path_index for s in slots] == [3, 0, 2]
    for slot, path in zip(slots, chosen, strict=True):
        assert slot.dst == (path.srh_carrier if srh else path.carrier)
        assert slot.srh == (path.srh_segment if srh else None)
        assert slot.label == path.label and slot.group == slot.path_index
        assert slot.wire == zlib.crc32(srv6_ev(path, srh)[1])
    data = pattern(256 << 10, 9)
    region = net.regions["h2"]
    sender.post_write(data, BASE, region.rkey, wr_id=1)
    net.sim.kick("h0")
    net.run(20.0, stop=lambda: len(net.cqs["h0"]) == 1)
    assert net.cqs["h0"].poll()[0].status == "ok"
    assert region.read(BASE, len(data)) == data
    assert net.sim.counters.get("drop_sid_end", 0) == 0


def test_explicit_carriers_must_be_paths_to_the_peer(make_net: Any, fabric: Fabric) -> None:
    net = make_net(seed=7)
    to_h2, to_h3 = fabric.paths("h0", "h2"), fabric.paths("h0", "h3")
    cases = [
        ((int(to_h2[0].carrier), 0), (int(to_h3[1].carrier), to_h3[1].plane)),  # another host
        ((int(to_h2[0].carrier), 0), (int(to_h2[2].carrier), 0)),  # a plane-1 path on plane 0
        ((int(to_h2[0].carrier), 0), (int(to_h2[0].srh_carrier), 0)),  # the SRH split's half
    ]
    for evs in cases:
        profile = ExplicitEvProfile(evs, fmt=EvFormatProfile(EvFormat.SRV6), carriers=True)
        with pytest.raises(EvProfileError, match="EV 1 .*no path to h2"):
            net.connect("h0", "h2", ev_profile=profile)
    srh = ExplicitEvProfile(((int(to_h2[0].carrier), 0),), fmt=SRV6_SRH_FORMAT, carriers=True)
    with pytest.raises(EvProfileError, match="EV 0 .*carrier and SRH segment"):
        net.connect("h0", "h2", ev_profile=srh)
    stev = ExplicitEvProfile(((1, 0),), fmt=EvFormatProfile(EvFormat.STEV), carriers=True)
    with pytest.raises(EvProfileError, match="only SRV6 EVs are carriers"):
        net.connect("h0", "h2", ev_profile=stev)


def test_endpoint_frame_with_an_srh_keeps_its_fields() -> None:
    """An endpoint frame whose prefix holds an SRH: every field, the service time written on
    departure included, lands after the SRH and parses back."""
    mac = bytes(6)
    src, dst, segment = bytes(15) + b"\x01", bytes(15) + b"\x02", bytes(15) + b"\x03"
    prefix = wire.frame_prefix(
        src_mac=mac,
        dst_mac=mac,
        src=src,
        dst=dst,
        dscp=Dscp.CONTROL,
        ecn=Ecn.NOT_ECT,
        ev=0x1234,
        srh=segment,
    )
    frame = wire.encode_endpoint(prefix, True, wire.EP_OP_EV_PROBE, 1, 0x1234, 77, 9, 0b110)
    wire.set_service_time(frame, 4321)
    pkt = wire.parse(frame)
    assert isinstance(pkt, wire.EndpointPacket)
    assert (pkt.response, pkt.ev, pkt.timestamp, pkt.req_id, pkt.port_status, pkt.service_ns) == (
        True, 0x1234, 77, 9, 0b110, 4321,
    )  # fmt: skip
