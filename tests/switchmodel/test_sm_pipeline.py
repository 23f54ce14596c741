"""The pure switchmodel pipeline, case by case against the P4 contract, byte for byte."""

from __future__ import annotations

import ipaddress
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sm_packets import HOST_MAC, SWITCH_MAC, mrc_frame, small_fabric

from switchmodel.pipeline import Forward, egress, ingress, usid_shift
from switchmodel.tables import (
    DROP_NO_ROUTE,
    NO_QOS,
    DropReason,
    PipelineState,
    PortQos,
    SidAction,
    next_hop,
)
from topologies import usid as usidlib

FABRIC = small_fabric()
T1 = FABRIC.switch("t1-p0-s0")
T0 = FABRIC.switch("t0-p0-r0")
T0_DST = FABRIC.switch("t0-p0-r1")
H2 = FABRIC.host("h2").nic(0)  # a host in rack 1
H0 = FABRIC.host("h0").nic(0)  # a host in rack 0, behind T0
NEXT_SMAC = "02:00:00:00:99:01"
NEXT_DMAC = "02:00:00:00:99:02"
OUT_PORT = 3


def mac(text: str) -> bytes:
    return bytes.fromhex(text.replace(":", ""))


def net(network: ipaddress.IPv6Network) -> tuple[int, int]:
    return int(network.network_address), network.prefixlen


def t1_state() -> PipelineState:
    """The spine t1-p0-s0 with its uN SID, its End SID and a route to the destination T0."""
    state = PipelineState()
    state.my_sid.insert(*net(T1.usid_prefix), SidAction.USID_UN)
    state.my_sid.insert(int(T1.end_sid), 128, SidAction.SRV6_END)
    state.ipv6_lpm.insert(
        *net(T0_DST.usid_prefix), next_hop(OUT_PORT, mac(NEXT_SMAC), mac(NEXT_DMAC))
    )
    return state


def carrier_via_t1() -> ipaddress.IPv6Address:
    return usidlib.carrier(FABRIC.block, [T1.usid, T0_DST.usid, H2.usid])


def expect_forward(verdict: object, port: int, priority: int) -> bytes:
    assert isinstance(verdict, Forward), f"expected a forward, got {verdict!r}"
    assert verdict.port == port
    assert verdict.priority == priority
    return bytes(verdict.frame)


# -- forwarding and SRv6 ---------------------------------------------------------------------


def test_un_shift_rewrites_carrier_macs_and_hop_limit() -> None:
    state = t1_state()
    frame = mrc_frame(carrier_via_t1(), hlim=64)
    out = expect_forward(ingress(frame, 1, state), OUT_PORT, 0)
    shifted = usidlib.carrier(FABRIC.block, [T0_DST.usid, H2.usid])
    assert out == mrc_frame(shifted, hlim=63, smac=NEXT_SMAC, dmac=NEXT_DMAC)
    assert usid_shift(int(carrier_via_t1())) == int(shifted)
    assert state.counters.port_in.packets[1] == 1
    assert state.counters.port_in.bytes[1] == len(frame)


def test_un_with_exhausted_carrier_does_end_with_srh() -> None:
    state = t1_state()
    own = usidlib.carrier(FABRIC.block, [T1.usid])  # nothing after our uSID
    next_sid = str(usidlib.carrier(FABRIC.block, [T0_DST.usid, H2.usid]))
    segments = [next_sid, str(own)]  # segment list [0] is the last segment
    frame = mrc_frame(own, segments=segments, segleft=1)
    out = expect_forward(ingress(frame, 1, state), OUT_PORT, 0)
    assert out == mrc_frame(
        next_sid, segments=segments, segleft=0, hlim=63, smac=NEXT_SMAC, dmac=NEXT_DMAC
    )


def test_un_with_exhausted_carrier_and_no_srh_drops_sid_end() -> None:
    state = t1_state()
    frame = mrc_frame(usidlib.carrier(FABRIC.block, [T1.usid]))
    assert ingress(frame, 1, state) is DropReason.SID_END
    assert state.counters.drops.packets[DropReason.SID_END] == 1
    assert state.counters.drops.bytes[DropReason.SID_END] == len(frame)


def test_classic_end_sid_takes_next_segment() -> None:
    state = t1_state()
    nxt = str(usidlib.carrier(FABRIC.block, [T0_DST.usid, H2.usid]))
    segments = [nxt, str(T1.end_sid), "fcbb:bb00:1::e"]
    frame = mrc_frame(T1.end_sid, segments=segments, segleft=1)
    out = expect_forward(ingress(frame, 1, state), OUT_PORT, 0)
    assert out == mrc_frame(
        nxt, segments=segments, segleft=0, hlim=63, smac=NEXT_SMAC, dmac=NEXT_DMAC
    )


def test_reduced_srh_hands_its_one_segment_over() -> None:
    # RFC 8754 reduced SRH: segments left 1, last entry 0; the carrier ends at the spine
    state = t1_state()
    nxt = str(usidlib.carrier(FABRIC.block, [T0_DST.usid, H2.usid]))
    here = usidlib.carrier(FABRIC.block, [T1.usid])
    frame = mrc_frame(here, segments=[nxt], segleft=1)
    assert frame[14 + 40 + 3 : 14 + 40 + 5] == bytes((1, 0))  # segments left 1, last entry 0
    out = expect_forward(ingress(frame, 1, state), OUT_PORT, 0)
    assert out == mrc_frame(nxt, segments=[nxt], segleft=0, hlim=63, smac=NEXT_SMAC,
                            dmac=NEXT_DMAC)  # fmt: skip


def test_end_with_segments_left_zero_drops_sid_end() -> None:
    state = t1_state()
    frame = mrc_frame(T1.end_sid, segments=[str(T1.end_sid)], segleft=0)
    assert ingress(frame, 1, state) is DropReason.SID_END


def test_no_route_is_dropped_and_counted() -> None:
    state = t1_state()
    frame = mrc_frame("2001:db8::1")
    assert ingress(frame, 2, state) is DropReason.NO_ROUTE
    assert state.counters.drops.packets[DropReason.NO_ROUTE] == 1
    assert state.counters.port_in.packets[2] == 1


def test_explicit_drop_no_route_entry() -> None:
    state = t1_state()
    state.ipv6_lpm.insert(int(ipaddress.IPv6Address("2001:db8::")), 32, DROP_NO_ROUTE)
    assert ingress(mrc_frame("2001:db8::1"), 1, state) is DropReason.NO_ROUTE


def test_longest_prefix_wins() -> None:
    state = t1_state()
    target = usidlib.carrier(FABRIC.block, [T0_DST.usid, H2.usid])
    state.ipv6_lpm.insert(int(target), 128, next_hop(7, mac(NEXT_SMAC), mac(NEXT_DMAC)))
    expect_forward(ingress(mrc_frame(target), 1, state), 7, 0)
    other = usidlib.carrier(FABRIC.block, [T0_DST.usid, H0.usid])
    expect_forward(ingress(mrc_frame(other), 1, state), OUT_PORT, 0)


def test_modified_default_route_forwards_without_priority_or_trim() -> None:
    state = t1_state()
    state.ipv6_lpm_default = next_hop(9, mac(NEXT_SMAC), mac(NEXT_DMAC))
    state.port_qos.entries[9] = PortQos.fixed(0, 0)
    frame = mrc_frame("2001:db8::1", dscp=48, ecn=2)
    out = expect_forward(ingress(frame, 1, state), 9, 0)  # the program returns on a miss
    assert out == mrc_frame("2001:db8::1", dscp=48, ecn=2, hlim=63, smac=NEXT_SMAC, dmac=NEXT_DMAC)


def test_modified_my_sid_default() -> None:
    state = t1_state()
    state.my_sid_default = SidAction.SRV6_END
    assert ingress(mrc_frame("2001:db8::1"), 1, state) is DropReason.SID_END


def test_plain_ipv6_non_udp_is_forwarded() -> None:
    state = t1_state()
    frame = mrc_frame(carrier_via_t1(), opcode=None, payload=b"hello" * 10, next_header=59)
    out = expect_forward(ingress(frame, 1, state), OUT_PORT, 0)
    assert len(out) == len(frame)


# -- drops by reason -------------------------------------------------------------------------


@pytest.mark.parametrize("hlim", [0, 1])
def test_hop_limit(hlim: int) -> None:
    state = t1_state()
    assert ingress(mrc_frame(carrier_via_t1(), hlim=hlim), 1, state) is DropReason.HOP_LIMIT


def test_hop_limit_two_is_forwarded_with_one() -> None:
    state = t1_state()
    out = expect_forward(ingress(mrc_frame(carrier_via_t1(), hlim=2), 1, state), OUT_PORT, 0)
    assert out[21] == 1


def test_not_ipv6() -> None:
    state = t1_state()
    arp = mac(SWITCH_MAC) + mac(HOST_MAC) + b"\x08\x06" + bytes(28)
    assert ingress(arp, 4, state) is DropReason.NOT_IPV6
    assert state.counters.drops.packets[DropReason.NOT_IPV6] == 1
    assert state.counters.port_in.bytes[4] == len(arp)


@pytest.mark.parametrize(
    "cut",
    [0, 5, 13, 14 + 39, 14 + 40 + 7],  # Ethernet, IPv6, UDP cut short
)
def test_truncated_headers_are_parse_errors(cut: int) -> None:
    state = t1_state()
    frame = mrc_frame(carrier_via_t1())[:cut]
    verdict = ingress(frame, 1, state)
    assert verdict is DropReason.PARSE_ERROR
    assert state.counters.drops.packets[DropReason.PARSE_ERROR] == 1


@pytest.mark.parametrize("opcode", [0x0A, 0x0B])
def test_truncated_mrc_data_is_parse_error(opcode: int) -> None:
    state = t1_state()
    full = mrc_frame(carrier_via_t1(), opcode=opcode, payload=b"")
    assert isinstance(ingress(full, 1, state), Forward)
    assert ingress(full[:-1], 1, state) is DropReason.PARSE_ERROR


def test_truncated_bth_is_parse_error() -> None:
    state = t1_state()
    frame = mrc_frame(carrier_via_t1(), opcode=0x11, payload=b"")
    assert isinstance(ingress(frame, 1, state), Forward)
    assert ingress(frame[:-1], 1, state) is DropReason.PARSE_ERROR


def test_udp_other_port_is_not_parsed_further() -> None:
    state = t1_state()
    frame = mrc_frame(carrier_via_t1(), dport=9, opcode=None, payload=b"")
    assert isinstance(ingress(frame, 1, state), Forward)


def test_truncated_segment_list_is_parse_error() -> None:
    state = t1_state()
    frame = mrc_frame(
        T1.end_sid, segments=["fcbb:bb00::1", str(T1.end_sid)], opcode=None, payload=b""
    )
    srh_end = 14 + 40 + 8 + 32
    assert ingress(frame[: srh_end - 1], 1, state) is DropReason.PARSE_ERROR
    assert ingress(frame[: 14 + 40 + 5], 1, state) is DropReason.PARSE_ERROR


def _srh_frame(
    rtype: int = 4,
    last_entry: int = 1,
    ext_len: int | None = None,
    segleft: int = 1,
    segments: int = 2,
) -> bytes:
    base = mrc_frame(T1.end_sid, segments=[str(T1.end_sid)] * segments, segleft=segleft)
    frame = bytearray(base)
    off = 14 + 40
    frame[off + 1] = 2 * (last_entry + 1) if ext_len is None else ext_len
    frame[off + 2] = rtype
    frame[off + 3] = segleft
    frame[off + 4] = last_entry
    return bytes(frame)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"rtype": 3},
        {"last_entry": 4, "segments": 5},
        {"ext_len": 6},
        {"segleft": 3},  # beyond last_entry + 1 (2 would be a reduced SRH)
    ],
    ids=["routing-type", "too-many-segments", "length-mismatch", "segments-left-range"],
)
def test_srh_invalid(kwargs: dict[str, int]) -> None:
    state = t1_state()
    assert ingress(_srh_frame(**kwargs), 1, state) is DropReason.SRH_INVALID
    assert state.counters.drops.packets[DropReason.SRH_INVALID] == 1


def test_four_segments_are_accepted() -> None:
    state = t1_state()
    nxt = str(usidlib.carrier(FABRIC.block, [T0_DST.usid, H2.usid]))
    segments = [nxt, "fcbb:bb00:1::1", "fcbb:bb00:1::2", str(T1.end_sid)]
    frame = mrc_frame(T1.end_sid, segments=segments, segleft=3)
    verdict = ingress(frame, 1, state)
    assert verdict is DropReason.NO_ROUTE  # End took segment [2], which has no route
    state.ipv6_lpm.insert(
        int(ipaddress.IPv6Address("fcbb:bb00:1::2")),
        128,
        next_hop(5, mac(NEXT_SMAC), mac(NEXT_DMAC)),
    )
    out = expect_forward(ingress(frame, 1, state), 5, 0)
    assert out == mrc_frame(
        "fcbb:bb00:1::2", segments=segments, segleft=2, hlim=63, smac=NEXT_SMAC, dmac=NEXT_DMAC
    )


# -- priority, trimming, ECN ----------------------------------------------------------------


def test_control_dscp_is_high_priority() -> None:
    state = t1_state()
    expect_forward(
        ingress(mrc_frame(carrier_via_t1(), dscp=48, opcode=0x11), 1, state), OUT_PORT, 1
    )
    expect_forward(ingress(mrc_frame(carrier_via_t1(), dscp=10), 1, state), OUT_PORT, 0)
    expect_forward(ingress(mrc_frame(carrier_via_t1(), dscp=0), 1, state), OUT_PORT, 0)


@pytest.mark.parametrize("opcode", [0x0A, 0x0B])
@pytest.mark.parametrize("with_srh", [False, True])
def test_trim_cuts_payload_and_remarks(opcode: int, with_srh: bool) -> None:
    state = t1_state()
    state.port_qos.entries[OUT_PORT] = PortQos.fixed(trim_threshold=4, ecn_threshold=2)
    state.port_qdepth[OUT_PORT] = 4
    segments = [str(T1.end_sid), "fcbb:bb00:1::7"] if with_srh else None
    frame = mrc_frame(carrier_via_t1(), opcode=opcode, ecn=2, segments=segments, segleft=1)
    out = expect_forward(ingress(frame, 1, state), OUT_PORT, 1)
    shifted = usidlib.carrier(FABRIC.block, [T0_DST.usid, H2.usid])
    assert out == mrc_frame(
        shifted,
        dscp=12,
        ecn=2,
        opcode=opcode,
        payload=b"",
        hlim=63,
        segments=segments,
        segleft=1,
        smac=NEXT_SMAC,
        dmac=NEXT_DMAC,
    )
    assert state.counters.trimmed.packets[OUT_PORT] == 1
    assert state.counters.trimmed.bytes[OUT_PORT] == len(frame)
    assert state.counters.ecn_marked.packets[OUT_PORT] == 0


def test_no_trim_below_threshold_but_ecn_marks() -> None:
    state = t1_state()
    state.port_qos.entries[OUT_PORT] = PortQos.fixed(trim_threshold=5, ecn_threshold=2)
    state.port_qdepth[OUT_PORT] = 3
    frame = mrc_frame(carrier_via_t1(), ecn=1)
    out = expect_forward(ingress(frame, 1, state), OUT_PORT, 0)
    shifted = usidlib.carrier(FABRIC.block, [T0_DST.usid, H2.usid])
    assert out == mrc_frame(shifted, ecn=3, hlim=63, smac=NEXT_SMAC, dmac=NEXT_DMAC)
    assert state.counters.ecn_marked.packets[OUT_PORT] == 1
    assert state.counters.trimmed.packets[OUT_PORT] == 0


@pytest.mark.parametrize(
    ("dscp", "opcode", "ecn"),
    [(0, 0x0A, 0), (48, 0x11, 0), (10, 0x11, 0), (0, 0x0A, 3), (12, 0x0A, 0)],
    ids=["ordinary", "control", "ack-with-data-dscp", "ce-not-recounted", "already-trimmed"],
)
def test_never_trimmed_or_marked(dscp: int, opcode: int, ecn: int) -> None:
    state = t1_state()
    state.port_qos.entries[OUT_PORT] = PortQos.fixed(0, 0)
    frame = mrc_frame(carrier_via_t1(), dscp=dscp, opcode=opcode, ecn=ecn)
    out = expect_forward(ingress(frame, 1, state), OUT_PORT, 1 if dscp == 48 else 0)
    assert len(out) == len(frame)
    assert state.counters.trimmed.packets[OUT_PORT] == 0
    assert state.counters.ecn_marked.packets[OUT_PORT] == 0


def test_threshold_zero_always_trims_and_no_action_never() -> None:
    state = t1_state()
    state.port_qos.entries[OUT_PORT] = PortQos.fixed(0, 0)
    out = expect_forward(ingress(mrc_frame(carrier_via_t1()), 1, state), OUT_PORT, 1)
    traffic_class = (struct.unpack_from("!I", out, 14)[0] >> 20) & 0xFF
    assert traffic_class >> 2 == 12
    state.port_qos.entries[OUT_PORT] = NO_QOS  # a NoAction entry
    frame = mrc_frame(carrier_via_t1())
    out = expect_forward(ingress(frame, 1, state), OUT_PORT, 0)
    assert len(out) == len(frame)


def test_qos_default_action_applies_to_unlisted_ports() -> None:
    state = t1_state()
    state.port_qos_default = PortQos.fixed(0, 0)
    expect_forward(ingress(mrc_frame(carrier_via_t1()), 1, state), OUT_PORT, 1)


def test_egress_records_data_queue_depth_and_counts_port_out() -> None:
    state = t1_state()
    state.port_arrivals[OUT_PORT] = 3
    egress(state, OUT_PORT, 0, 17, 1000)
    egress(state, OUT_PORT, 0, 5, 200)
    assert (state.port_qdepth[OUT_PORT], state.port_arrivals[OUT_PORT]) == (5, 0)
    # a control packet leaving its own queue says nothing of the data queue
    state.port_arrivals[OUT_PORT] = 2
    egress(state, OUT_PORT, 1, 0, 100)
    assert (state.port_qdepth[OUT_PORT], state.port_arrivals[OUT_PORT]) == (5, 2)
    assert state.counters.port_out.packets[OUT_PORT] == 3
    assert state.counters.port_out.bytes[OUT_PORT] == 1300


def test_ingress_counts_packets_queued_for_data_only() -> None:
    state = t1_state()
    state.port_qos.entries[OUT_PORT] = PortQos.fixed(2, 100)
    expect_forward(ingress(mrc_frame(carrier_via_t1()), 1, state), OUT_PORT, 0)
    expect_forward(ingress(mrc_frame(carrier_via_t1()), 1, state), OUT_PORT, 0)
    assert state.port_arrivals[OUT_PORT] == 2
    # depth 2 >= trim threshold 2: trimmed, high priority, not counted in the data queue
    trimmed = ingress(mrc_frame(carrier_via_t1()), 1, state)
    expect_forward(trimmed, OUT_PORT, 1)
    assert state.port_arrivals[OUT_PORT] == 2 and state.counters.trimmed.packets[OUT_PORT] == 1


def test_input_frame_is_never_modified() -> None:
    state = t1_state()
    state.port_qos.entries[OUT_PORT] = PortQos.fixed(0, 0)
    frame = bytearray(mrc_frame(carrier_via_t1()))
    before = bytes(frame)
    ingress(memoryview(frame), 1, state)
    assert bytes(frame) == before


# -- the parser is total -------------------------------------------------------------------

VALID = [
    mrc_frame(carrier_via_t1()),
    mrc_frame(carrier_via_t1(), opcode=0x0B, segments=[str(T1.end_sid), "fcbb:bb00::9"], segleft=1),
    mrc_frame(T1.end_sid, segments=["fcbb:bb00::1", str(T1.end_sid)], segleft=1),
    mrc_frame(carrier_via_t1(), dscp=48, opcode=0x11),
]


def _check_total(frame: bytes) -> None:
    state = t1_state()
    state.port_qos.entries[OUT_PORT] = PortQos.fixed(0, 1)
    verdict = ingress(frame, 1, state)
    assert isinstance(verdict, (Forward, DropReason))
    counted = sum(state.counters.drops.packets)
    assert state.counters.port_in.packets[1] == 1
    if isinstance(verdict, Forward):
        assert counted == 0
        assert len(verdict.frame) <= len(frame)
    else:
        assert counted == 1 and state.counters.drops.packets[verdict] == 1


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=400))
def test_fuzz_random_bytes(frame: bytes) -> None:
    _check_total(frame)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(VALID),
    st.lists(st.tuples(st.integers(0, 300), st.integers(0, 255)), max_size=6),
    st.integers(0, 400),
)
def test_fuzz_mutated_packets(base: bytes, flips: list[tuple[int, int]], cut: int) -> None:
    frame = bytearray(base)
    for index, value in flips:
        if index < len(frame):
            frame[index] = value
    _check_total(bytes(frame[: max(cut, 0)] if cut < len(frame) else frame))


def test_fuzz_ethernet_ipv6_header_fields_exhaustively_for_next_header() -> None:
    for nh in range(256):
        frame = bytearray(VALID[0])
        frame[20] = nh
        _check_total(bytes(frame))
