"""The MRC packet codec: round trips, the trimmed form, and every kind of malformed frame."""

from __future__ import annotations

import ipaddress

import pytest
from scapy.layers.inet6 import IPv6, IPv6ExtHdrSegmentRouting
from scapy.layers.l2 import Ether

from host.transport import scapy_layers as sl
from host.transport import wire

SRC = ipaddress.IPv6Address("fcbb:bb00:c00::").packed
DST = ipaddress.IPv6Address("fcbb:bb00:c02::").packed
EV = 0x1230_0042


def prefix(dscp: int = wire.DSCP_TRIMMABLE, ecn: int = wire.ECN_ECT0) -> bytes:
    return wire.frame_prefix(
        src_mac=wire.mac_bytes("02:0c:00:00:00:00"), dst_mac=wire.mac_bytes("02:04:00:00:00:01"),
        src=SRC, dst=DST, dscp=dscp, ecn=ecn, ev=EV,
    )  # fmt: skip


def data_frame(imm: int | None = None, payload: bytes = b"abcdefgh" * 50) -> bytearray:
    return bytearray(wire.encode_data(
        prefix(), 0x123, 0xABCDEF, True, 0x7F00_0000_1000, 0xDEADBEEF, imm,
        wire.FLAG_FIRST | wire.FLAG_LAST, 1, 0, EV, 77, 4096, 1000, 0x1234_5678, payload,
    ))  # fmt: skip


@pytest.mark.parametrize("imm", [None, 0xCAFEF00D])
def test_data_round_trip(imm: int | None) -> None:
    frame = data_frame(imm)
    pkt = wire.parse(frame)
    assert isinstance(pkt, wire.DataPacket)
    assert pkt.opcode == (wire.OP_WRITE_ONLY if imm is None else wire.OP_WRITE_ONLY_IMM)
    assert (pkt.va, pkt.rkey, pkt.dma_len, pkt.imm) == (0x7F00_0000_1000, 0xDEADBEEF, 400, imm)
    assert (pkt.ev, pkt.msg_id, pkt.msg_len, pkt.msg_offset, pkt.timestamp) == (
        EV, 77, 4096, 1000, 0x1234_5678)  # fmt: skip
    assert (pkt.plane_hint, pkt.spine_hint, pkt.flags) == (1, 0, wire.FLAG_FIRST | wire.FLAG_LAST)
    assert bytes(pkt.payload) == b"abcdefgh" * 50
    assert not pkt.trimmed
    out = pkt.outer
    assert (out.dscp, out.ecn, out.flow_label) == (wire.DSCP_TRIMMABLE, wire.ECN_ECT0, EV & 0xFFFFF)
    assert (out.dest_qp, out.psn, out.ack_req) == (0x123, 0xABCDEF, True)
    assert out.udp_sport == 0xC000 | (EV >> 20)  # the whole EV: flow label + port
    assert wire.ev_of_outer(out.flow_label, out.udp_sport) == EV
    assert (out.src, out.dst) == (SRC, DST)
    header = wire.DATA_HEADER_LEN + (4 if imm is not None else 0)
    assert len(frame) == header + 400


def test_data_extension_is_24_bytes_after_reth() -> None:
    frame = data_frame()
    ext = frame[62 + 12 + 16 : 62 + 12 + 16 + 24]
    assert ext[0] == wire.EXT_DATA
    assert int.from_bytes(ext[4:8], "big") == EV
    assert frame[62] == wire.OP_WRITE_ONLY


def trim(frame: bytearray) -> bytearray:
    """What a switch does: cut after the MRC extension, DSCP 12, fix the lengths."""
    cut = wire.DATA_IMM_HEADER_LEN if frame[62] == wire.OP_WRITE_ONLY_IMM else wire.DATA_HEADER_LEN
    out = bytearray(frame[:cut])
    tc = (wire.DSCP_TRIMMED << 2) | wire.ECN_ECT0
    out[14] = (out[14] & 0xF0) | (tc >> 4)
    out[15] = (out[15] & 0x0F) | ((tc & 0xF) << 4)
    out[18:20] = (cut - 54).to_bytes(2, "big")
    out[58:60] = (cut - 54).to_bytes(2, "big")
    return out


@pytest.mark.parametrize("imm", [None, 7])
def test_trimmed_form_is_recognised(imm: int | None) -> None:
    pkt = wire.parse(trim(data_frame(imm)))
    assert isinstance(pkt, wire.DataPacket)
    assert pkt.trimmed and len(pkt.payload) == 0 and pkt.dma_len == 400
    assert pkt.outer.dscp == wire.DSCP_TRIMMED
    assert pkt.ev == EV and pkt.outer.psn == 0xABCDEF


def test_short_payload_without_dscp_12_is_trimmed_too() -> None:
    frame = data_frame()
    del frame[-100:]
    frame[18:20] = (len(frame) - 54).to_bytes(2, "big")
    frame[58:60] = (len(frame) - 54).to_bytes(2, "big")
    pkt = wire.parse(frame)
    assert isinstance(pkt, wire.DataPacket) and pkt.trimmed


def test_control_round_trips() -> None:
    p = prefix(wire.DSCP_CONTROL, wire.ECN_NOT_ECT)
    ack = wire.parse(wire.encode_ack(p, 9, 5, wire.FLAG_ECN_ECHO, 1, 0xFF, EV, 99, 1000, 1010,
                                     0x8000_0000_0000_0005, 3, 4))  # fmt: skip
    assert isinstance(ack, wire.AckPacket)
    assert (ack.cum_psn, ack.sack_base, ack.sack_bitmap) == (1000, 1010, 0x8000_0000_0000_0005)
    assert (ack.ev, ack.ts_echo, ack.ce_count, ack.pkt_count, ack.msn) == (EV, 99, 3, 4, 5)
    assert ack.outer.psn == 999 and ack.outer.dscp == wire.DSCP_CONTROL
    assert ack.flags == wire.FLAG_ECN_ECHO and ack.spine_hint == 0xFF
    nack = wire.parse(wire.encode_nack(p, 9, wire.FLAG_TRIMMED, 0, 1, EV, 42, 0x10, 0x0F))
    assert isinstance(nack, wire.NackPacket)
    assert (nack.psn, nack.cum_psn, nack.ev, nack.ts_echo) == (0x10, 0x0F, EV, 42)
    assert nack.syndrome == wire.AETH_NAK_SEQ and nack.flags == wire.FLAG_TRIMMED
    refused = wire.parse(wire.encode_nack(p, 9, wire.FLAG_ACCESS, 0, 1, EV, 42, 0x10, 0x0F))
    assert isinstance(refused, wire.NackPacket) and refused.syndrome == wire.AETH_NAK_ACCESS
    for reply in (False, True):
        probe = wire.parse(wire.encode_probe(p, 9, reply, 1, 1, EV, 1234, 55, 0x300))
        assert isinstance(probe, wire.ProbePacket)
        assert (probe.reply, probe.ev, probe.timestamp, probe.probe_id, probe.src_qp) == (
            reply, EV, 1234, 55, 0x300)  # fmt: skip
        assert probe.outer.dest_qp == 9


def test_psn_wraps_at_24_bits() -> None:
    frame = wire.encode_data(prefix(), 1, (1 << 24) + 5, False, 0, 1, None, 0, 0, 0, EV, 1, 1, 0,
                             0, b"x")  # fmt: skip
    pkt = wire.parse(frame)
    assert pkt.outer.psn == 5 and not pkt.outer.ack_req


def test_srh_is_skipped() -> None:
    frame = data_frame()
    pkt = Ether(bytes(frame))
    ip = pkt[IPv6]
    inner = bytes(ip.payload)
    srh = IPv6ExtHdrSegmentRouting(addresses=["fcbb:bb00:c02::"], segleft=0, nh=17)
    rebuilt = bytes(Ether(bytes(frame[:14])) / IPv6(src=ip.src, dst=ip.dst, tc=ip.tc, fl=ip.fl,
                                                     hlim=ip.hlim) / srh / inner)  # fmt: skip
    parsed = wire.parse(rebuilt)
    assert isinstance(parsed, wire.DataPacket) and bytes(parsed.payload) == b"abcdefgh" * 50


MALFORMED = [
    ("empty", b"", wire.Truncated),
    ("ethernet only", bytes(14), wire.Truncated),
    ("ipv4", bytes(12) + b"\x08\x00" + bytes(100), wire.NotIpv6),
]


@pytest.mark.parametrize(("name", "frame", "error"), MALFORMED)
def test_malformed_simple(name: str, frame: bytes, error: type[wire.WireError]) -> None:
    with pytest.raises(error):
        wire.parse(frame)


def test_every_truncation_raises_a_wire_error() -> None:
    for frame in (data_frame(), data_frame(5), wire.encode_ack(prefix(), 1, 0, 0, 0, 0, 0, 0, 0,
                                                                0, 0, 0, 0)):  # fmt: skip
        for cut in range(len(frame)):
            short = bytearray(frame[:cut])
            with pytest.raises(wire.WireError):
                wire.parse(short)


def test_length_fields_that_lie_are_rejected() -> None:
    frame = data_frame()
    frame[18:20] = (len(frame)).to_bytes(2, "big")  # IPv6 payload longer than the frame
    with pytest.raises(wire.Truncated):
        wire.parse(frame)
    frame = data_frame()
    frame[58:60] = (4).to_bytes(2, "big")  # UDP length shorter than its header
    with pytest.raises(wire.BadLength):
        wire.parse(frame)
    frame = data_frame()
    frame[74 + 12 : 74 + 16] = (10).to_bytes(4, "big")  # RETH DMA length < payload
    with pytest.raises(wire.BadLength):
        wire.parse(frame)


def test_wrong_port_opcode_extension() -> None:
    frame = data_frame()
    frame[56:58] = (4792).to_bytes(2, "big")
    with pytest.raises(wire.NotMrc):
        wire.parse(frame)
    frame = data_frame()
    frame[62] = 0x04  # SEND Only
    with pytest.raises(wire.BadOpcode):
        wire.parse(frame)
    frame = data_frame()
    frame[90] = 9  # extension type
    with pytest.raises(wire.BadExtension):
        wire.parse(frame)
    ack = wire.encode_ack(prefix(), 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    ack[78] = 0x7F
    with pytest.raises(wire.BadExtension):
        wire.parse(ack)
    frame = data_frame()
    frame[20] = 6  # TCP
    with pytest.raises(wire.NotMrc):
        wire.parse(frame)


def test_oversize() -> None:
    with pytest.raises(wire.Oversize):
        wire.parse(bytes(wire.MAX_FRAME + 1))


def test_mac_bytes_names_bad_input() -> None:
    with pytest.raises(ValueError, match="zz"):
        wire.mac_bytes("zz:00:00:00:00:00")


def test_scapy_layers_agree_with_the_codec() -> None:
    pkt = sl.dissect(bytes(data_frame(0x55)))
    assert pkt[sl.MrcBTH].opcode == wire.OP_WRITE_ONLY_IMM
    assert pkt[sl.RETH].va == 0x7F00_0000_1000 and pkt[sl.RETH].dma_len == 400
    assert pkt[sl.ImmDt].imm == 0x55
    assert pkt[sl.MrcData].ev == EV and pkt[sl.MrcData].msg_id == 77
    assert len(bytes(pkt[sl.MrcData].payload)) == 400
    ack = sl.dissect(bytes(wire.encode_ack(prefix(), 9, 5, 1, 1, 0, EV, 99, 1000, 1010, 5, 3, 4)))
    assert ack[sl.MrcAck].cum_psn == 1000 and ack[sl.MrcAck].sack_bitmap == 5
    built = sl.build_data(
        src_mac="02:0c:00:00:00:00", dst_mac="02:04:00:00:00:01", src="fcbb:bb00:c00::",
        dst="fcbb:bb00:c02::", ev=EV, dest_qp=0x123, psn=0xABCDEF, ack_req=True,
        va=0x7F00_0000_1000, rkey=0xDEADBEEF, imm=None, flags=3, plane_hint=1, spine_hint=0,
        msg_id=77, msg_len=4096, msg_offset=1000, timestamp=0x12345678, payload=b"abcdefgh" * 50,
    )  # fmt: skip
    assert bytes(built) == bytes(data_frame())
