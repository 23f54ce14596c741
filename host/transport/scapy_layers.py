"""scapy layers for MRC packets (tests, debugging, captures; never on the hot path).

The layers mirror :mod:`host.transport.wire`: ``MrcBTH`` (RoCEv2 BTH), ``RETH``, ``ImmDt``, ``MrcData``
(the 24-byte data extension), ``MrcAETH`` and the control extensions ``MrcAck``, ``MrcNack``,
``MrcProbe``. scapy.contrib.roce's ``BTH`` ends with a 4-byte ICRC field that it takes from the
end of every packet; MRC here sends no ICRC, so that layer would swallow the last four bytes of
each payload. Importing this module therefore binds UDP port 4791 to ``MrcBTH`` (same fields,
no ICRC) in place of scapy.contrib.roce's ``BTH``.

``dissect(frame)`` decodes a frame; ``build_data(...)`` builds a data frame layer by layer
(tests compare it with the struct codec).
"""

from __future__ import annotations

from typing import Any

from scapy.contrib import roce
from scapy.fields import (
    BitField,
    ByteEnumField,
    ByteField,
    IntField,
    LongField,
    ShortField,
    XByteField,
    XIntField,
    XLongField,
    XShortField,
)
from scapy.layers.inet import UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw, bind_layers, split_layers

from host.transport import wire
from p4src.contract import ExtType

_OPCODES = {
    wire.OP_WRITE_ONLY: "RC_RDMA_WRITE_ONLY",
    wire.OP_WRITE_ONLY_IMM: "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
    wire.OP_ACKNOWLEDGE: "RC_ACKNOWLEDGE",
}
_CONTROL_TYPES = {int(kind): kind.name for kind in ExtType if kind is not ExtType.DATA}


class MrcBTH(Packet):
    """RoCEv2 Base Transport Header (12 bytes, no ICRC trailer)."""

    name = "MRC BTH"
    fields_desc = [
        ByteEnumField("opcode", 0, _OPCODES),
        BitField("solicited", 0, 1),
        BitField("migreq", 0, 1),
        BitField("padcount", 0, 2),
        BitField("version", 0, 4),
        XShortField("pkey", 0xFFFF),
        BitField("fecn", 0, 1),
        BitField("becn", 0, 1),
        BitField("resv6", 0, 6),
        BitField("dqpn", 0, 24),
        BitField("ackreq", 0, 1),
        BitField("resv7", 0, 7),
        BitField("psn", 0, 24),
    ]

    def guess_payload_class(self, payload: bytes) -> Any:
        """RETH for WRITE opcodes, AETH for ACKNOWLEDGE."""
        if self.opcode in (wire.OP_WRITE_ONLY, wire.OP_WRITE_ONLY_IMM):
            return RETH
        if self.opcode == wire.OP_ACKNOWLEDGE:
            return MrcAETH
        return Raw


class RETH(Packet):
    """RDMA Extended Transport Header: remote address, rkey, DMA length."""

    name = "RETH"
    fields_desc = [XLongField("va", 0), XIntField("rkey", 0), IntField("dma_len", 0)]

    def guess_payload_class(self, payload: bytes) -> Any:
        """ImmDt when the BTH opcode is WRITE Only with Immediate, else the MRC extension."""
        under = self.underlayer
        if under is not None and getattr(under, "opcode", None) == wire.OP_WRITE_ONLY_IMM:
            return ImmDt
        return MrcData


class ImmDt(Packet):
    """Immediate data (4 bytes)."""

    name = "ImmDt"
    fields_desc = [XIntField("imm", 0)]

    def guess_payload_class(self, payload: bytes) -> Any:
        """The MRC data extension follows."""
        return MrcData


class MrcData(Packet):
    """The 24-byte MRC data extension."""

    name = "MRC data"
    fields_desc = [
        ByteField("type", wire.EXT_DATA),
        XByteField("flags", 0),
        ByteField("plane_hint", 0),
        ByteField("spine_hint", wire.NO_SPINE),
        XIntField("ev", 0),
        IntField("msg_id", 0),
        IntField("msg_len", 0),
        IntField("msg_offset", 0),
        IntField("timestamp", 0),
    ]


class MrcAETH(Packet):
    """ACK Extended Transport Header: syndrome and message sequence number."""

    name = "MRC AETH"
    fields_desc = [XByteField("syndrome", wire.AETH_ACK), BitField("msn", 0, 24)]

    def guess_payload_class(self, payload: bytes) -> Any:
        """The control extension, by its type byte."""
        kind = payload[0] if payload else 0
        if kind == wire.EXT_ACK:
            return MrcAck
        if kind == wire.EXT_NACK:
            return MrcNack
        if kind in (wire.EXT_PROBE, wire.EXT_PROBE_REPLY):
            return MrcProbe
        return Raw


def _control_head() -> list[Any]:
    return [
        ByteEnumField("type", wire.EXT_ACK, _CONTROL_TYPES),
        XByteField("flags", 0),
        ByteField("plane_hint", 0),
        ByteField("spine_hint", wire.NO_SPINE),
        XIntField("ev", 0),
        IntField("timestamp", 0),
    ]


class MrcAck(Packet):
    """ACK/SACK extension (32 bytes)."""

    name = "MRC ACK"
    fields_desc = [
        *_control_head(),
        IntField("cum_psn", 0),
        IntField("sack_base", 0),
        XLongField("sack_bitmap", 0),
        ShortField("ce_count", 0),
        ShortField("pkt_count", 0),
    ]


def _two_words(first: str, second: str) -> list[Any]:
    """A control extension whose body is two 32-bit words and 12 reserved bytes."""
    return [
        *_control_head(),
        IntField(first, 0),
        IntField(second, 0),
        LongField("reserved1", 0),
        IntField("reserved2", 0),
    ]


class MrcNack(Packet):
    """NACK extension (32 bytes)."""

    name = "MRC NACK"
    fields_desc = _two_words("psn", "cum_psn")


class MrcProbe(Packet):
    """PROBE / PROBE_REPLY extension (32 bytes)."""

    name = "MRC PROBE"
    fields_desc = _two_words("probe_id", "src_qp")


split_layers(UDP, roce.BTH, dport=wire.ROCE_PORT)
bind_layers(UDP, MrcBTH, dport=wire.ROCE_PORT)


def dissect(frame: bytes) -> Any:
    """Decode an Ethernet frame with the MRC layers."""
    return Ether(bytes(frame))


def build_data(
    *, src_mac: str, dst_mac: str, src: str, dst: str, ev: int, dest_qp: int, psn: int,
    ack_req: bool, va: int, rkey: int, imm: int | None, flags: int, plane_hint: int,
    spine_hint: int, msg_id: int, msg_len: int, msg_offset: int, timestamp: int, payload: bytes,
    dscp: int = wire.DSCP_TRIMMABLE, ecn: int = wire.ECN_ECT0, hop_limit: int = 64,
) -> Any:  # fmt: skip
    """A data frame built from the scapy layers (bytes(...) equals the codec's output)."""
    opcode = wire.OP_WRITE_ONLY if imm is None else wire.OP_WRITE_ONLY_IMM
    pkt = (
        Ether(src=src_mac, dst=dst_mac)
        / IPv6(src=src, dst=dst, tc=(dscp << 2) | ecn, fl=ev & 0xFFFFF, hlim=hop_limit)
        / UDP(sport=wire.udp_sport(ev), dport=wire.ROCE_PORT, chksum=0)
        / MrcBTH(opcode=opcode, dqpn=dest_qp, ackreq=int(ack_req), psn=psn & wire.PSN_MASK)
        / RETH(va=va, rkey=rkey, dma_len=len(payload))
    )
    if imm is not None:
        pkt = pkt / ImmDt(imm=imm)
    return pkt / MrcData(
        flags=flags, plane_hint=plane_hint, spine_hint=spine_hint, ev=ev & 0xFFFFFFFF,
        msg_id=msg_id, msg_len=msg_len, msg_offset=msg_offset, timestamp=timestamp,
    ) / Raw(payload)  # fmt: skip
