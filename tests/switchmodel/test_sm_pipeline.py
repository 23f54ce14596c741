"""What only the pure switchmodel pipeline shows: verdicts and state below the frames.

Every frame-in, frames-out behaviour of the pipeline is a case of the data-plane case table
(``tests/dataplane/cases.py``), which runs on this pipeline in-process as on BMv2 and mrc-switch.
Checked here, on :func:`switchmodel.pipeline.ingress` and :func:`egress` with a
:class:`PipelineState` filled by hand: the priority of each verdict, byte counts, frames too
short to put on a wire, trimming at a recorded queue depth, the depth registers, that the input
is never modified, and that the parser is total (fuzzed). Frames come from the case table's
builder (:func:`dataplane.packets.mrc_frame`).
"""

from __future__ import annotations

import ipaddress
import struct

import pytest
from dataplane import packets as pk
from dataplane.packets import mrc_frame
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.fabric import small_fabric

from p4src.contract import DropReason, Dscp, Ecn, Opcode
from switchmodel.pipeline import Forward, egress, ingress, usid_shift
from switchmodel.tables import PipelineState, PortQos, SidAction, next_hop
from topologies import usid as usidlib

FABRIC = small_fabric()
T1 = FABRIC.switch("t1-p0-s0")
T0_DST = FABRIC.switch("t0-p0-r1")
H2 = FABRIC.host("h2").nic(0)  # a host in rack 1
NEXT_SMAC = "02:00:00:00:99:01"
NEXT_DMAC = "02:00:00:00:99:02"
OUT_PORT = 3
PAYLOAD = 200  # mrc_frame's payload bytes


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


def shifted() -> ipaddress.IPv6Address:
    return usidlib.carrier(FABRIC.block, [T0_DST.usid, H2.usid])


def expect_forward(verdict: object, port: int, priority: int) -> bytes:
    assert isinstance(verdict, Forward), f"expected a forward, got {verdict!r}"
    assert verdict.port == port
    assert verdict.priority == priority
    return bytes(verdict.frame)


def test_un_shift_is_the_fabric_models_shift() -> None:
    assert (
        usid_shift(int(carrier_via_t1())) == int(shifted()) == int(usidlib.shift(carrier_via_t1()))
    )


# -- counters count the bytes of the frame as it arrived ------------------------------------


def test_counters_count_bytes_as_the_frame_arrived() -> None:
    state = t1_state()
    state.port_qos.entries[OUT_PORT] = PortQos.fixed(0, 0)
    forwarded = mrc_frame(carrier_via_t1())
    expect_forward(ingress(forwarded, 1, state), OUT_PORT, 1)  # trimmed
    sid_end = mrc_frame(usidlib.carrier(FABRIC.block, [T1.usid]))
    assert ingress(sid_end, 1, state) is DropReason.SID_END
    arp = pk.arp_frame(pk.HOST_MAC, pk.SWITCH_MAC)
    assert ingress(arp, 4, state) is DropReason.NOT_IPV6
    counters = state.counters
    assert (counters.port_in.packets[1], counters.port_in.bytes[1]) == (
        2,
        len(forwarded) + len(sid_end),
    )
    assert counters.port_in.bytes[4] == len(arp)
    assert counters.trimmed.bytes[OUT_PORT] == len(forwarded)
    assert counters.drops.bytes[DropReason.SID_END] == len(sid_end)
    assert counters.drops.bytes[DropReason.NOT_IPV6] == len(arp)


# -- frames too short for a wire: parse errors ----------------------------------------------


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


@pytest.mark.parametrize("opcode", [Opcode.WRITE_ONLY, Opcode.WRITE_ONLY_IMM])
def test_truncated_mrc_data_is_parse_error(opcode: int) -> None:
    state = t1_state()
    full = mrc_frame(carrier_via_t1(), opcode=opcode, payload=b"")
    assert isinstance(ingress(full, 1, state), Forward)
    assert ingress(full[:-1], 1, state) is DropReason.PARSE_ERROR


def test_truncated_bth_is_parse_error() -> None:
    state = t1_state()
    frame = mrc_frame(carrier_via_t1(), opcode=Opcode.ACKNOWLEDGE, payload=b"")
    assert isinstance(ingress(frame, 1, state), Forward)
    assert ingress(frame[:-1], 1, state) is DropReason.PARSE_ERROR


def test_truncated_segment_list_is_parse_error() -> None:
    state = t1_state()
    frame = mrc_frame(
        T1.end_sid, segments=["fcbb:bb00::1", str(T1.end_sid)], opcode=None, payload=b""
    )
    srh_end = 14 + 40 + 8 + 32
    assert ingress(frame[: srh_end - 1], 1, state) is DropReason.PARSE_ERROR
    assert ingress(frame[: 14 + 40 + 5], 1, state) is DropReason.PARSE_ERROR


# -- priority of the verdict ----------------------------------------------------------------


def test_control_dscp_is_high_priority() -> None:
    state = t1_state()
    control = mrc_frame(carrier_via_t1(), dscp=Dscp.CONTROL, opcode=Opcode.ACKNOWLEDGE)
    expect_forward(ingress(control, 1, state), OUT_PORT, 1)
    expect_forward(ingress(mrc_frame(carrier_via_t1(), dscp=Dscp.TRIMMABLE), 1, state), OUT_PORT, 0)
    expect_forward(ingress(mrc_frame(carrier_via_t1(), dscp=Dscp.DEFAULT), 1, state), OUT_PORT, 0)


@pytest.mark.parametrize(
    ("dscp", "opcode", "ecn"),
    [
        (Dscp.DEFAULT, Opcode.WRITE_ONLY, Ecn.NOT_ECT),
        (Dscp.CONTROL, Opcode.ACKNOWLEDGE, Ecn.NOT_ECT),
        (Dscp.TRIMMABLE, Opcode.ACKNOWLEDGE, Ecn.NOT_ECT),
        (Dscp.DEFAULT, Opcode.WRITE_ONLY, Ecn.CE),
        (Dscp.TRIMMED, Opcode.WRITE_ONLY, Ecn.NOT_ECT),
        (Dscp.TRIMMED_LAST_HOP, Opcode.WRITE_ONLY, Ecn.NOT_ECT),
    ],
    ids=[
        "ordinary",
        "control",
        "ack-with-data-dscp",
        "ce-not-recounted",
        "already-trimmed",
        "already-trimmed-last-hop",
    ],
)
def test_untouched_packets_keep_their_priority(dscp: int, opcode: int, ecn: int) -> None:
    state = t1_state()
    state.port_qos.entries[OUT_PORT] = PortQos.fixed(0, 0)
    frame = mrc_frame(carrier_via_t1(), dscp=dscp, opcode=opcode, ecn=ecn)
    # control and headers trimmed upstream go high, as the program's step 7 puts them
    high = dscp in (Dscp.CONTROL, Dscp.TRIMMED, Dscp.TRIMMED_LAST_HOP)
    out = expect_forward(ingress(frame, 1, state), OUT_PORT, 1 if high else 0)
    assert len(out) == len(frame)


def test_trimmed_is_high_priority_and_a_default_route_returns_before_priority() -> None:
    state = t1_state()
    state.port_qos_default = PortQos.fixed(0, 0)  # the QoS default applies to OUT_PORT
    out = expect_forward(ingress(mrc_frame(carrier_via_t1()), 1, state), OUT_PORT, 1)
    traffic_class = (struct.unpack_from("!I", out, 14)[0] >> 20) & 0xFF
    assert traffic_class >> 2 == Dscp.TRIMMED
    state.ipv6_lpm_default = next_hop(9, mac(NEXT_SMAC), mac(NEXT_DMAC))
    miss = mrc_frame("2001:db8::1", dscp=Dscp.CONTROL, ecn=Ecn.ECT0)
    expect_forward(ingress(miss, 1, state), 9, 0)  # the program returns on a miss


# -- trimming and ECN at a recorded queue depth ----------------------------------------------


@pytest.mark.parametrize("opcode", [Opcode.WRITE_ONLY, Opcode.WRITE_ONLY_IMM])
@pytest.mark.parametrize("with_srh", [False, True])
def test_trim_cuts_payload_and_remarks(opcode: int, with_srh: bool) -> None:
    state = t1_state()
    state.port_qos.entries[OUT_PORT] = PortQos.fixed(trim_threshold=4, ecn_threshold=2)
    state.port_qdepth[OUT_PORT] = 4
    segments = [str(T1.end_sid), "fcbb:bb00:1::7"] if with_srh else None
    frame = mrc_frame(
        carrier_via_t1(), opcode=opcode, ecn=Ecn.ECT0, segments=segments, segments_left=1
    )
    out = expect_forward(ingress(frame, 1, state), OUT_PORT, 1)
    assert out == mrc_frame(
        shifted(),
        dscp=Dscp.TRIMMED,
        ecn=Ecn.ECT0,
        opcode=opcode,
        payload=b"",
        dma_length=PAYLOAD,
        hop_limit=63,
        segments=segments,
        segments_left=1,
        src_mac=NEXT_SMAC,
        dst_mac=NEXT_DMAC,
    )
    assert state.counters.trimmed.packets[OUT_PORT] == 1
    assert state.counters.ecn_marked.packets[OUT_PORT] == 0


def test_no_trim_below_threshold_but_ecn_marks() -> None:
    state = t1_state()
    state.port_qos.entries[OUT_PORT] = PortQos.fixed(trim_threshold=5, ecn_threshold=2)
    state.port_qdepth[OUT_PORT] = 3
    frame = mrc_frame(carrier_via_t1(), ecn=Ecn.ECT1)
    out = expect_forward(ingress(frame, 1, state), OUT_PORT, 0)
    assert out == mrc_frame(
        shifted(), ecn=Ecn.CE, hop_limit=63, src_mac=NEXT_SMAC, dst_mac=NEXT_DMAC
    )
    assert state.counters.ecn_marked.packets[OUT_PORT] == 1
    assert state.counters.trimmed.packets[OUT_PORT] == 0


# -- the depth registers --------------------------------------------------------------------


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
    mrc_frame(
        carrier_via_t1(),
        opcode=Opcode.WRITE_ONLY_IMM,
        segments=[str(T1.end_sid), "fcbb:bb00::9"],
        segments_left=1,
    ),
    mrc_frame(T1.end_sid, segments=["fcbb:bb00::1", str(T1.end_sid)], segments_left=1),
    mrc_frame(carrier_via_t1(), dscp=Dscp.CONTROL, opcode=Opcode.ACKNOWLEDGE),
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
