"""The MRC packet codec: Ethernet / IPv6 / UDP / RoCEv2 BTH / RETH / MRC extensions (struct).

Byte layouts, code points and the trimmed form are documented in docs/wire-format.md. Summary:

- data:    Eth | IPv6 | [SRH] | UDP(4791) | BTH(0x0A or 0x0B) | RETH | [ImmDt] | MRC data ext (24)
  | payload
- control: Eth | IPv6 | [SRH] | UDP(4791) | BTH(0x11) | AETH | MRC control ext (32): ACK, NACK,
  PROBE, PROBE_REPLY

The SRH (SRV6 EVs with an SRH) is a reduced one of 24 bytes holding a single segment (RFC 8754
section 4.1.1: segments left 1, last entry 0, :func:`srh_bytes`). Sending uses preassembled
Ethernet/IPv6/[SRH]/UDP prefixes (:func:`frame_prefix`, one per EV) and one ``struct.pack_into``
per header block (:func:`encode_data`, :func:`encode_ack`, ...); the length of the prefix says
whether it holds an SRH.
Receiving: :func:`parse` returns a typed packet; every malformed input raises a subclass of
:class:`WireError` whose ``reason`` is the drop counter name. No ICRC is sent or expected.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Concatenate, ParamSpec

from p4src import contract
from p4src.contract import (
    EP_FLAG_SVC_TIME,
    EP_OP_MASK,
    ETHERTYPE_IPV6,
    SRH_ROUTING_TYPE,
    AckFlag,
    DataFlag,
    Dscp,
    Ecn,
    EpOp,
    ExtType,
    NackFlag,
    Opcode,
    Syndrome,
)

# -- code points (p4src/contract.py), as plain integers under the codec's names ----------------

IPPROTO_UDP = contract.IP_PROTO_UDP
IPPROTO_ROUTING = contract.IP_PROTO_ROUTING
ROCE_PORT = contract.ROCEV2_UDP_PORT
UDP_SPORT_BASE = 0xC000  # UDP source port = 0xC000 | EV bits 31..20 (UDP format: | EV)
EV_FLOW_BITS = 20  # an EV's low 20 bits are the flow label, the bits above go into the port
# EV formats as frame_prefix() takes them (host.transport.evs.EvFormat values)
EV_MODE_SRV6, EV_MODE_STEV, EV_MODE_UDP = "srv6", "stev", "udp"

OP_WRITE_ONLY = int(Opcode.WRITE_ONLY)
OP_WRITE_ONLY_IMM = int(Opcode.WRITE_ONLY_IMM)
OP_ACKNOWLEDGE = int(Opcode.ACKNOWLEDGE)

DSCP_DEFAULT = int(Dscp.DEFAULT)  # data of a QP with trimming off: never trimmed
DSCP_TRIMMABLE = int(Dscp.TRIMMABLE)
DSCP_TRIMMED = int(Dscp.TRIMMED)  # written by a switch that trimmed the packet
DSCP_TRIMMED_LAST_HOP = int(Dscp.TRIMMED_LAST_HOP)  # ... at the receiver's own leaf
DSCP_CONTROL = int(Dscp.CONTROL)
# DataPacket.trimmed: 0 whole, 1 trimmed in the fabric, 2 trimmed at the last hop
TRIM_NONE, TRIM_FABRIC, TRIM_LAST_HOP = 0, 1, 2
_TRIM_BY_DSCP = {DSCP_TRIMMED: TRIM_FABRIC, DSCP_TRIMMED_LAST_HOP: TRIM_LAST_HOP}
ECN_NOT_ECT = int(Ecn.NOT_ECT)
ECN_ECT1 = int(Ecn.ECT1)
ECN_ECT0 = int(Ecn.ECT0)
ECN_CE = int(Ecn.CE)

AETH_ACK = int(Syndrome.ACK)
AETH_NAK_SEQ = int(Syndrome.NAK_SEQ)  # used for trim NACKs
AETH_NAK_ACCESS = int(Syndrome.NAK_ACCESS)

EXT_DATA = int(ExtType.DATA)
EXT_ACK = int(ExtType.ACK)
EXT_NACK = int(ExtType.NACK)
EXT_PROBE = int(ExtType.PROBE)
EXT_PROBE_REPLY = int(ExtType.PROBE_REPLY)
EXT_EP_REQUEST = int(ExtType.EP_REQUEST)
EXT_EP_RESPONSE = int(ExtType.EP_RESPONSE)
EP_OP_EV_PROBE = int(EpOp.EV_PROBE)
EP_OP_PORT_STATUS = int(EpOp.PORT_STATUS_UPDATE)

FLAG_FIRST = int(DataFlag.FIRST)
FLAG_LAST = int(DataFlag.LAST)
FLAG_RETX = int(DataFlag.RETX)
FLAG_ECN_ECHO = int(AckFlag.ECN_ECHO)
FLAG_TRIMMED = int(NackFlag.TRIMMED)
FLAG_ACCESS = int(NackFlag.ACCESS)
FLAG_LAST_HOP = int(NackFlag.LAST_HOP)
FLAG_NACK_CE = int(NackFlag.CE)

NO_SPINE = 0xFF  # spine hint of a path within a rack

PSN_MASK = 0xFFFFFF
QPN_MASK = 0xFFFFFF

# -- sizes and offsets (without an SRH; a prefix with one moves everything after IPv6 by SRH_LEN) --

ETH_LEN, IPV6_LEN, UDP_LEN = contract.ETHERNET_BYTES, contract.IPV6_BYTES, contract.UDP_BYTES
BTH_LEN, RETH_LEN, IMM_LEN = contract.BTH_BYTES, contract.RETH_BYTES, contract.IMMDT_BYTES
AETH_LEN, DATA_EXT_LEN, CTRL_EXT_LEN = (
    contract.AETH_BYTES,
    contract.MRC_DATA_BYTES,
    contract.MRC_CONTROL_BYTES,
)
OFF_IPV6 = ETH_LEN
OFF_UDP = ETH_LEN + IPV6_LEN  # 54
PREFIX_LEN = OFF_UDP + 4  # 58: what frame_prefix() returns (Ethernet, IPv6, UDP ports)
OFF_BTH = OFF_UDP + UDP_LEN  # 62
DATA_HEADER_LEN = OFF_BTH + BTH_LEN + RETH_LEN + DATA_EXT_LEN  # 114
DATA_IMM_HEADER_LEN = DATA_HEADER_LEN + IMM_LEN  # 118
CTRL_FRAME_LEN = OFF_BTH + BTH_LEN + AETH_LEN + CTRL_EXT_LEN  # 110
MAX_FRAME = 9600
SRH_LEN = contract.SRH_FIXED_BYTES + contract.SRH_SEGMENT_BYTES  # a reduced SRH with one segment

_ETH = struct.Struct("!6s6sH")
_IPV6 = struct.Struct("!IHBB16s16s")
_UDP = struct.Struct("!HHHH")
_BTH = struct.Struct("!BBHII")
_RETH = struct.Struct("!QII")
_IMM = struct.Struct("!I")
_DATA_EXT = struct.Struct("!BBBBIIIII")
_AETH = struct.Struct("!I")
_CTRL_HEAD = struct.Struct("!BBBBII")  # type, flags, plane hint, spine hint, EV, timestamp
_ACK_BODY = struct.Struct("!IIQHH")
_NACK_BODY = struct.Struct("!II12x")
_PROBE_BODY = struct.Struct("!II12x")
_EP_BODY = struct.Struct("!H2xII8x")  # request id, port status mask, service time (ns)
_U16 = struct.Struct("!H")
_SRH = struct.Struct("!BBBBBBH16s")  # next header, hdr ext len, type, SL, last entry, flags, tag

# Everything after the prefix's UDP ports, packed in one call: UDP length + checksum, BTH, RETH,
# [ImmDt], data extension.
_DATA_TAIL = struct.Struct("!HHBBHIIQIIBBBBIIIII")
_DATA_IMM_TAIL = struct.Struct("!HHBBHIIQIIIBBBBIIIII")
_ACK_TAIL = struct.Struct("!HHBBHIIIBBBBIIIIQHH")
_NACK_TAIL = struct.Struct("!HHBBHIIIBBBBIIII12x")
_PROBE_TAIL = struct.Struct("!HHBBHIIIBBBBIIII12x")
_EP_TAIL = struct.Struct("!HHBBHIIIBBBBIIH2xII8x")
_PAYLOAD_LEN_AT = OFF_IPV6 + 4
# public for the sender's inlined hot loop (host/transport/qp.py)
U16 = _U16
DATA_TAIL = _DATA_TAIL
_UDP_LEN_AT = OFF_UDP + 4
_MID_LEN = PREFIX_LEN - _PAYLOAD_LEN_AT - 2  # what split_prefix() leaves after the length, no SRH


_P = ParamSpec("_P")


# -- errors ---------------------------------------------------------------------------------------


class WireError(ValueError):
    """A frame that is not a well-formed MRC packet. ``reason`` names the drop counter: a
    subclass's name in snake case (``NotIpv6``: ``not_ipv6``)."""

    reason = "malformed"

    def __init_subclass__(cls) -> None:
        super().__init_subclass__()
        cls.reason = "".join(f"_{c.lower()}" if c.isupper() else c for c in cls.__name__)[1:]


class Truncated(WireError):
    """The frame ends before a header or length field says it should."""


class Oversize(WireError):
    """The frame is longer than any MRC frame may be."""


class NotIpv6(WireError):
    """Not an IPv6 Ethernet frame."""


class NotMrc(WireError):
    """IPv6, but not UDP to port 4791."""


class BadOpcode(WireError):
    """A BTH opcode this stack does not speak."""


class BadExtension(WireError):
    """An MRC extension of an unknown type or with inconsistent fields."""


class BadLength(WireError):
    """Length fields that contradict each other or the frame."""


# -- parsed packets --------------------------------------------------------------------------------


@dataclass(slots=True)
class Outer:
    """The Ethernet / IPv6 / UDP fields of a received frame."""

    src_mac: bytes  #: 6 bytes
    dst_mac: bytes  #: 6 bytes
    src: bytes  #: IPv6 source address, 16 bytes
    dst: bytes  #: IPv6 destination (the exhausted carrier: the NIC address), 16 bytes
    dscp: int  #: DSCP code point
    ecn: int  #: ECN field (0 Not-ECT, 1 ECT(1), 2 ECT(0), 3 CE)
    flow_label: int  #: 20 bits (the EV's low 20 bits)
    hop_limit: int  #: IPv6 hop limit on arrival
    udp_sport: int  #: UDP source port
    dest_qp: int  #: BTH destination QP
    psn: int  #: BTH PSN (24 bits)
    ack_req: bool  #: BTH ack-request bit


@dataclass(slots=True)
class DataPacket:
    """An RDMA WRITE (with immediate) data packet, possibly trimmed by a switch."""

    outer: Outer  #: Ethernet / IPv6 / UDP / BTH fields
    opcode: int  #: 0x0A or 0x0B
    va: int  #: RETH virtual address of this packet's payload at the receiver
    rkey: int  #: RETH remote key
    dma_len: int  #: RETH DMA length: the payload length as sent
    imm: int | None  #: immediate data (opcode 0x0B)
    flags: int  #: FLAG_FIRST | FLAG_LAST | FLAG_RETX
    plane_hint: int  #: plane of the path the sender used
    spine_hint: int  #: spine of that path (NO_SPINE within a rack)
    ev: int  #: entropy value (32 bits)
    msg_id: int  #: message id
    msg_len: int  #: message length in bytes
    msg_offset: int  #: offset of this payload within the message
    timestamp: int  #: sender timestamp (ns, modulo 2^32)
    payload: memoryview  #: the payload bytes present (empty when trimmed)
    trimmed: int  #: TRIM_FABRIC (DSCP 12, or payload shorter than dma_len), TRIM_LAST_HOP (DSCP 13), or 0


@dataclass(slots=True)
class AckPacket:
    """ACK / SACK: cumulative PSN plus a 64-bit bitmap of PSNs received from sack_base on."""

    outer: Outer  #: Ethernet / IPv6 / UDP / BTH fields
    msn: int  #: AETH message sequence number (messages completed, 24 bits)
    flags: int  #: FLAG_ECN_ECHO
    plane_hint: int  #: plane of the data packet that triggered this ACK
    spine_hint: int  #: spine of that packet's path
    ev: int  #: EV echo: EV of the packet that triggered this ACK
    ts_echo: int  #: that packet's sender timestamp
    cum_psn: int  #: next PSN expected: every PSN before it was received (24 bits)
    sack_base: int  #: PSN of bit 0 of the bitmap
    sack_bitmap: int  #: bit i set: PSN sack_base + i received
    ce_count: int  #: CE-marked data packets since the previous ACK
    pkt_count: int  #: data packets since the previous ACK


@dataclass(slots=True)
class NackPacket:
    """NACK for one data packet (trimmed, or refused by the receiver)."""

    outer: Outer  #: Ethernet / IPv6 / UDP / BTH fields
    syndrome: int  #: AETH syndrome (0x60 trimmed, 0x62 access error)
    flags: int  #: FLAG_TRIMMED | FLAG_ACCESS | FLAG_LAST_HOP | FLAG_NACK_CE
    plane_hint: int  #: plane of the NACKed packet's path
    spine_hint: int  #: spine of that path
    ev: int  #: EV echo of the NACKed packet
    ts_echo: int  #: sender timestamp of the NACKed packet
    psn: int  #: PSN of the NACKed packet
    cum_psn: int  #: the receiver's cumulative PSN


@dataclass(slots=True)
class ProbePacket:
    """A connectionless path probe (PROBE) or its answer (PROBE_REPLY)."""

    outer: Outer  #: Ethernet / IPv6 / UDP / BTH fields (dest_qp: the QP that answers / is answered)
    reply: bool  #: True for PROBE_REPLY
    plane_hint: int  #: plane of the probed path
    spine_hint: int  #: spine of the probed path
    ev: int  #: the EV probed
    timestamp: int  #: prober's timestamp (echoed in the reply)
    probe_id: int  #: probe id (echoed)
    src_qp: int  #: the prober's QP (the reply's destination QP)


@dataclass(slots=True)
class EndpointPacket:
    """A connectionless endpoint request (EP_REQUEST) or its response (EP_RESPONSE), addressed
    by source, destination and EV: an EV probe or a port status update (``mrc_ctl_ep_req``)."""

    outer: Outer  #: Ethernet / IPv6 / UDP / BTH fields (dest_qp 0: no QP)
    response: bool  #: True for EP_RESPONSE
    op: int  #: EP_OP_EV_PROBE or EP_OP_PORT_STATUS
    flags: int  #: EP_FLAG_SVC_TIME on a response whose service time is set
    plane_hint: int  #: plane of the NIC the request was sent from
    ev: int  #: the EV (32-bit wire form) the request was sent on
    timestamp: int  #: requester's timestamp (ns mod 2^32), echoed in the response
    req_id: int  #: request id (16 bits), echoed
    port_status: int  #: port status mask of the sender (bit N: port N = plane N - 1 is up)
    service_ns: int  #: response: ns between the request's arrival and the response's departure
    #: request: the spine of the requester's SRV6 path (NO_SPINE: none or not known), which the
    #: responder's answer goes back through
    spine_hint: int = 0xFF


Packet = DataPacket | AckPacket | NackPacket | ProbePacket | EndpointPacket


# -- building ------------------------------------------------------------------------------------


def mac_bytes(mac: str) -> bytes:
    """``"02:1c:02:00:00:00"`` as 6 bytes."""
    parts = mac.split(":")
    if len(parts) != 6:
        raise ValueError(f"MAC address {mac!r}: expected six hex octets separated by ':'")
    try:
        return bytes(int(p, 16) for p in parts)
    except ValueError:
        raise ValueError(f"MAC address {mac!r}: expected six hex octets separated by ':'") from None


def udp_sport(ev: int) -> int:
    """The UDP source port of a 32-bit EV (SRV6 and STEV formats): ``0xC000 | EV >> 20``, so
    that with the flow label (the low 20 bits) the whole EV is in the outer headers."""
    return UDP_SPORT_BASE | ((ev >> EV_FLOW_BITS) & 0xFFF)


def ev_outer(ev: int, mode: str = EV_MODE_STEV) -> tuple[int, int]:
    """``(flow label, UDP source port)`` carrying ``ev`` in format ``mode``: SRV6 and STEV put
    the low 20 bits in the flow label and bits 31..20 in the port (``0xC000 | EV >> 20``); UDP
    puts the EV in the port alone (``0xC000 | EV`` up to 14 bits, the EV itself for 15 or 16
    bits) with flow label 0."""
    if mode == EV_MODE_UDP:
        if not 0 <= ev <= 0xFFFF:
            raise ValueError(f"EV {ev:#x}: the UDP format carries at most 16 bits")
        return 0, (UDP_SPORT_BASE | ev) if ev <= 0x3FFF else ev
    ev &= 0xFFFFFFFF
    return ev & 0xFFFFF, udp_sport(ev)


def ev_of_outer(flow_label: int, sport: int, mode: str = EV_MODE_STEV) -> int:
    """The EV a packet's flow label and UDP source port carry (inverse of :func:`ev_outer`;
    a UDP-format EV of 15 or 16 bits at or above 0xC000 reads back without its top bits)."""
    if mode == EV_MODE_UDP:
        return sport & 0x3FFF if sport & 0xC000 == 0xC000 else sport
    return ((sport & 0xFFF) << EV_FLOW_BITS) | (flow_label & 0xFFFFF)


def srh_bytes(segment: bytes, next_header: int = IPPROTO_UDP) -> bytes:
    """A reduced SRH (RFC 8754 section 4.1.1) holding one segment: the IPv6 destination is the
    first segment, End at the node it names copies ``segment`` into the destination (segments
    left 1 -> 0). 24 bytes: next header, hdr ext len 2, routing type 4, segments left 1, last
    entry 0, flags 0, tag 0, the segment."""
    if len(segment) != 16:
        raise ValueError(f"SRH segment of {len(segment)} bytes: expected a 16-byte IPv6 address")
    return _SRH.pack(next_header, 2, SRH_ROUTING_TYPE, 1, 0, 0, 0, segment)


def frame_prefix(
    *,
    src_mac: bytes,
    dst_mac: bytes,
    src: bytes,
    dst: bytes,
    dscp: int,
    ecn: int,
    ev: int,
    hop_limit: int = 64,
    mode: str = EV_MODE_SRV6,
    outer: tuple[int, int] | None = None,
    srh: bytes | None = None,
) -> bytes:
    """Ethernet + IPv6 [+ SRH] + UDP ports for one EV (58 bytes, 82 with an SRH; lengths are
    filled per packet); the EV goes into the flow label and the UDP source port as format
    ``mode`` says (:func:`ev_outer`), or ``outer`` gives both as they are (a response copying a
    request's). ``srh`` is the 16-byte segment of a single-segment SRH (:func:`srh_bytes`)."""
    if len(src_mac) != 6 or len(dst_mac) != 6 or len(src) != 16 or len(dst) != 16:
        raise ValueError("frame_prefix: expected 6-byte MACs and 16-byte IPv6 addresses")
    flow, sport = ev_outer(ev, mode) if outer is None else outer
    first = (6 << 28) | (((dscp << 2) | ecn) << 20) | flow
    ext = b"" if srh is None else srh_bytes(srh)
    return b"".join((
        _ETH.pack(dst_mac, src_mac, ETHERTYPE_IPV6),
        _IPV6.pack(first, 0, IPPROTO_ROUTING if ext else IPPROTO_UDP, hop_limit, src, dst),
        ext,
        _UDP.pack(sport, ROCE_PORT, 0, 0)[:4],
    ))  # fmt: skip


def ext_len(prefix: bytes) -> int:
    """Bytes of extension headers (the SRH) a frame prefix holds between IPv6 and UDP."""
    return len(prefix) - PREFIX_LEN


def split_prefix(prefix: bytes) -> tuple[bytes, bytes]:
    """A frame prefix cut around the IPv6 payload length (what :func:`encode_data_split` takes)."""
    return prefix[:_PAYLOAD_LEN_AT], prefix[_PAYLOAD_LEN_AT + 2 :]


def encode_data_split(
    head: bytes,
    mid: bytes,
    dest_qp: int,
    psn: int,
    ack_req: bool,
    va: int,
    rkey: int,
    imm: int | None,
    flags: int,
    plane_hint: int,
    spine_hint: int,
    ev: int,
    msg_id: int,
    msg_len: int,
    msg_offset: int,
    timestamp: int,
    payload: bytes | memoryview,
) -> bytes:
    """A complete data frame, WRITE Only (``imm`` None) or WRITE Only with Immediate, on a prefix
    already split by :func:`split_prefix` (the hot path; the IPv6 payload length counts the SRH
    ``mid`` may hold). :func:`encode_data` takes the whole prefix."""
    n = len(payload)
    ack_psn = (0x80000000 if ack_req else 0) | (psn & PSN_MASK)
    ev32 = ev & 0xFFFFFFFF
    if imm is None:
        udp_len = UDP_LEN + BTH_LEN + RETH_LEN + DATA_EXT_LEN + n
        tail = _DATA_TAIL.pack(
            udp_len, 0,
            OP_WRITE_ONLY, 0, 0xFFFF, dest_qp & QPN_MASK, ack_psn,
            va, rkey, n,
            EXT_DATA, flags, plane_hint, spine_hint, ev32, msg_id, msg_len, msg_offset, timestamp,
        )  # fmt: skip
    else:
        udp_len = UDP_LEN + BTH_LEN + RETH_LEN + IMM_LEN + DATA_EXT_LEN + n
        tail = _DATA_IMM_TAIL.pack(
            udp_len, 0,
            OP_WRITE_ONLY_IMM, 0, 0xFFFF, dest_qp & QPN_MASK, ack_psn,
            va, rkey, n, imm & 0xFFFFFFFF,
            EXT_DATA, flags, plane_hint, spine_hint, ev32, msg_id, msg_len, msg_offset, timestamp,
        )  # fmt: skip
    return b"".join((head, _U16.pack(udp_len + len(mid) - _MID_LEN), mid, tail, payload))


def _on_whole_prefix(
    split: Callable[Concatenate[bytes, bytes, _P], bytes],
) -> Callable[Concatenate[bytes, _P], bytes]:
    """``split`` taking a whole frame prefix in place of the two parts of :func:`split_prefix`."""

    def whole(prefix: bytes, /, *args: _P.args, **kwargs: _P.kwargs) -> bytes:
        head, mid = split_prefix(prefix)
        return split(head, mid, *args, **kwargs)

    return whole


#: A complete data frame: WRITE Only (``imm`` None) or WRITE Only with Immediate, from a whole
#: frame prefix and the fields of :func:`encode_data_split`.
encode_data = _on_whole_prefix(encode_data_split)


_CTRL_UDP_LEN = CTRL_FRAME_LEN - OFF_UDP


def _control(prefix: bytes) -> tuple[bytearray, int]:
    """A control frame holding ``prefix`` and its IPv6 payload length, and the offset of its
    UDP length (where the tail structs start)."""
    ext = len(prefix) - PREFIX_LEN
    frame = bytearray(CTRL_FRAME_LEN + ext)
    frame[: PREFIX_LEN + ext] = prefix
    _U16.pack_into(frame, _PAYLOAD_LEN_AT, _CTRL_UDP_LEN + ext)
    return frame, _UDP_LEN_AT + ext


def encode_ack(
    prefix: bytes,
    dest_qp: int,
    msn: int,
    flags: int,
    plane_hint: int,
    spine_hint: int,
    ev: int,
    ts_echo: int,
    cum_psn: int,
    sack_base: int,
    sack_bitmap: int,
    ce_count: int,
    pkt_count: int,
) -> bytearray:
    """An ACK/SACK frame (BTH PSN = cum_psn - 1, the last PSN received in order)."""
    frame, at = _control(prefix)
    _ACK_TAIL.pack_into(
        frame, at, _CTRL_UDP_LEN, 0,
        OP_ACKNOWLEDGE, 0, 0xFFFF, dest_qp & QPN_MASK, (cum_psn - 1) & PSN_MASK,
        (AETH_ACK << 24) | (msn & 0xFFFFFF),
        EXT_ACK, flags, plane_hint, spine_hint, ev & 0xFFFFFFFF, ts_echo & 0xFFFFFFFF,
        cum_psn & PSN_MASK, sack_base & PSN_MASK, sack_bitmap & 0xFFFFFFFFFFFFFFFF,
        min(ce_count, 0xFFFF), min(pkt_count, 0xFFFF),
    )  # fmt: skip
    return frame


def encode_nack(
    prefix: bytes,
    dest_qp: int,
    flags: int,
    plane_hint: int,
    spine_hint: int,
    ev: int,
    ts_echo: int,
    psn: int,
    cum_psn: int,
) -> bytearray:
    """A NACK frame for one data packet (trimmed, or refused with FLAG_ACCESS)."""
    frame, at = _control(prefix)
    syndrome = AETH_NAK_ACCESS if flags & FLAG_ACCESS else AETH_NAK_SEQ
    _NACK_TAIL.pack_into(
        frame, at, _CTRL_UDP_LEN, 0,
        OP_ACKNOWLEDGE, 0, 0xFFFF, dest_qp & QPN_MASK, psn & PSN_MASK,
        syndrome << 24,
        EXT_NACK, flags, plane_hint, spine_hint, ev & 0xFFFFFFFF, ts_echo & 0xFFFFFFFF,
        psn & PSN_MASK, cum_psn & PSN_MASK,
    )  # fmt: skip
    return frame


def encode_probe(
    prefix: bytes,
    dest_qp: int,
    reply: bool,
    plane_hint: int,
    spine_hint: int,
    ev: int,
    timestamp: int,
    probe_id: int,
    src_qp: int,
) -> bytearray:
    """A PROBE (reply False) or PROBE_REPLY frame."""
    frame, at = _control(prefix)
    _PROBE_TAIL.pack_into(
        frame, at, _CTRL_UDP_LEN, 0,
        OP_ACKNOWLEDGE, 0, 0xFFFF, dest_qp & QPN_MASK, 0,
        AETH_ACK << 24,
        EXT_PROBE_REPLY if reply else EXT_PROBE, 0, plane_hint, spine_hint,
        ev & 0xFFFFFFFF, timestamp & 0xFFFFFFFF, probe_id & 0xFFFFFFFF, src_qp & QPN_MASK,
    )  # fmt: skip
    return frame


def encode_endpoint(
    prefix: bytes,
    response: bool,
    op: int,
    plane_hint: int,
    ev: int,
    timestamp: int,
    req_id: int,
    port_status: int = 0,
    service_ns: int = 0,
    spine_hint: int = NO_SPINE,
) -> bytearray:
    """An EP_REQUEST (response False) or EP_RESPONSE frame (BTH dest QP 0: connectionless)."""
    frame, at = _control(prefix)
    flags = (op & EP_OP_MASK) | (EP_FLAG_SVC_TIME if response else 0)
    _EP_TAIL.pack_into(
        frame, at, _CTRL_UDP_LEN, 0,
        OP_ACKNOWLEDGE, 0, 0xFFFF, 0, 0,
        AETH_ACK << 24,
        EXT_EP_RESPONSE if response else EXT_EP_REQUEST, flags, plane_hint, spine_hint & 0xFF,
        ev & 0xFFFFFFFF, timestamp & 0xFFFFFFFF, req_id & 0xFFFF, port_status & 0xFFFFFFFF,
        min(max(service_ns, 0), 0xFFFFFFFF),
    )  # fmt: skip
    return frame


#: offset of an EP_RESPONSE's service time in a frame without an SRH (the sender fills it in on
#: departure)
EP_SERVICE_AT = OFF_BTH + BTH_LEN + AETH_LEN + _CTRL_HEAD.size + 8
_U32 = struct.Struct("!I")


def set_service_time(frame: bytearray, service_ns: int) -> None:
    """Write an EP_RESPONSE's service time (ns) into the frame (after its SRH, if it has one:
    a control frame is CTRL_FRAME_LEN bytes plus its extension headers)."""
    at = EP_SERVICE_AT + len(frame) - CTRL_FRAME_LEN
    _U32.pack_into(frame, at, min(max(int(service_ns), 0), 0xFFFFFFFF))


# -- parsing -------------------------------------------------------------------------------------


def parse(frame: bytes | bytearray | memoryview, max_frame: int = MAX_FRAME) -> Packet:
    """Decode one Ethernet frame; raises a :class:`WireError` subclass if it is not MRC."""
    size = len(frame)
    if size > max_frame:
        raise Oversize(f"frame of {size} bytes: expected at most {max_frame}")
    if size < OFF_UDP:
        raise Truncated(f"frame of {size} bytes: expected Ethernet + IPv6 (54 bytes) at least")
    dst_mac, src_mac, ethertype = _ETH.unpack_from(frame, 0)
    if ethertype != ETHERTYPE_IPV6:
        raise NotIpv6(f"ethertype {ethertype:#06x}: expected IPv6 ({ETHERTYPE_IPV6:#06x})")
    first, plen, next_header, hop_limit, src, dst = _IPV6.unpack_from(frame, OFF_IPV6)
    if first >> 28 != 6:
        raise NotIpv6(f"IP version {first >> 28}: expected 6")
    end = OFF_UDP + plen
    if end > size:
        raise Truncated(f"IPv6 payload length {plen}: frame holds only {size - OFF_UDP} bytes")
    off = OFF_UDP
    if next_header == IPPROTO_ROUTING:  # an SRH (classic SRv6 mode) before UDP
        if off + 8 > end:
            raise Truncated("routing header cut short")
        next_header = frame[off]
        off += 8 + frame[off + 1] * 8
        if off > end:
            raise Truncated("routing header longer than the IPv6 payload")
    if next_header != IPPROTO_UDP:
        raise NotMrc(f"IPv6 next header {next_header}: expected UDP (17)")
    if off + UDP_LEN + BTH_LEN > end:
        raise Truncated("UDP + BTH do not fit in the IPv6 payload")
    sport, dport, udp_len, _ = _UDP.unpack_from(frame, off)
    if dport != ROCE_PORT:
        raise NotMrc(f"UDP destination port {dport}: expected {ROCE_PORT}")
    if udp_len < UDP_LEN + BTH_LEN or off + udp_len > end:
        raise BadLength(f"UDP length {udp_len}: expected 20..{end - off}")
    end = off + udp_len
    off += UDP_LEN
    opcode, _, _, qp_word, psn_word = _BTH.unpack_from(frame, off)
    off += BTH_LEN
    tc = (first >> 20) & 0xFF
    outer = Outer(
        src_mac, dst_mac, src, dst, tc >> 2, tc & 3, first & 0xFFFFF, hop_limit, sport,
        qp_word & QPN_MASK, psn_word & PSN_MASK, bool(psn_word & 0x80000000),
    )  # fmt: skip
    if opcode in (OP_WRITE_ONLY, OP_WRITE_ONLY_IMM):
        imm: int | None = None
        head = RETH_LEN + DATA_EXT_LEN + (IMM_LEN if opcode == OP_WRITE_ONLY_IMM else 0)
        if off + head > end:
            raise Truncated(f"data packet of {end - off} bytes after BTH: expected {head} at least")
        va, rkey, dma_len = _RETH.unpack_from(frame, off)
        off += RETH_LEN
        if opcode == OP_WRITE_ONLY_IMM:
            (imm,) = _IMM.unpack_from(frame, off)
            off += IMM_LEN
        kind, flags, plane, spine, ev, msg_id, msg_len, msg_off, ts = _DATA_EXT.unpack_from(
            frame, off
        )
        off += DATA_EXT_LEN
        if kind != EXT_DATA:
            raise BadExtension(f"data extension type {kind}: expected {EXT_DATA}")
        present = end - off
        if present > dma_len:
            raise BadLength(f"payload of {present} bytes: RETH DMA length says {dma_len}")
        if msg_off + dma_len > msg_len:
            raise BadExtension(
                f"payload at offset {msg_off} + {dma_len} bytes: message is {msg_len} bytes"
            )
        trimmed = _TRIM_BY_DSCP.get(outer.dscp, TRIM_FABRIC if present < dma_len else TRIM_NONE)
        payload = memoryview(frame)[off:end]
        return DataPacket(
            outer, opcode, va, rkey, dma_len, imm, flags, plane, spine, ev, msg_id, msg_len,
            msg_off, ts, payload, trimmed,
        )  # fmt: skip
    if opcode != OP_ACKNOWLEDGE:
        raise BadOpcode(f"BTH opcode {opcode:#04x}: expected 0x0a, 0x0b or 0x11")
    if off + AETH_LEN + CTRL_EXT_LEN > end:
        raise Truncated(f"control packet of {end - off} bytes after BTH: expected 36")
    (aeth,) = _AETH.unpack_from(frame, off)
    off += AETH_LEN
    kind, flags, plane, spine, ev, ts = _CTRL_HEAD.unpack_from(frame, off)
    off += _CTRL_HEAD.size
    if kind == EXT_ACK:
        cum, base, bitmap, ce, count = _ACK_BODY.unpack_from(frame, off)
        return AckPacket(
            outer, aeth & 0xFFFFFF, flags, plane, spine, ev, ts, cum & PSN_MASK, base & PSN_MASK,
            bitmap, ce, count,
        )  # fmt: skip
    if kind == EXT_NACK:
        psn, cum = _NACK_BODY.unpack_from(frame, off)
        return NackPacket(
            outer, aeth >> 24, flags, plane, spine, ev, ts, psn & PSN_MASK, cum & PSN_MASK
        )
    if kind in (EXT_PROBE, EXT_PROBE_REPLY):
        probe_id, src_qp = _PROBE_BODY.unpack_from(frame, off)
        return ProbePacket(
            outer, kind == EXT_PROBE_REPLY, plane, spine, ev, ts, probe_id, src_qp & QPN_MASK
        )
    if kind in (EXT_EP_REQUEST, EXT_EP_RESPONSE):
        req_id, status, service = _EP_BODY.unpack_from(frame, off)
        return EndpointPacket(
            outer, kind == EXT_EP_RESPONSE, flags & EP_OP_MASK, flags & ~EP_OP_MASK, plane, ev,
            ts, req_id, status, service, spine,
        )  # fmt: skip
    raise BadExtension(f"control extension type {kind}: expected 2 (ACK) .. 7 (EP_RESPONSE)")


# -- fast path ----------------------------------------------------------------------------------

_FAST_HEAD = struct.Struct("!12xHIHBB32xHHHHBBHII")  # Ethernet .. BTH, addresses skipped
_FAST_DATA = struct.Struct("!QIIBBBBIIIII")  # RETH + data extension
_FAST_DATA_IMM = struct.Struct("!QIIIBBBBIIIII")  # RETH + ImmDt + data extension

DataFields = tuple[
    int, int, bool, int, int, int, int, int, "int | None", int, int, int, int, int, int, int,
    memoryview, int,
]  # fmt: skip


_FAST_CTRL = struct.Struct("!12xHIHBB32xHHHHBBHIIIBBBBIIIIQHH")  # .. BTH, AETH, control ext

AckFields = tuple[int, int, int, int, int, int, int, int, int]


def decode_ack(frame: bytes | bytearray | memoryview) -> AckFields | None:
    """Fast path for ACKs: ``(dest_qp, cum_psn, sack_base, sack_bitmap, ts_echo, ce_count,
    pkt_count, flags, ev)`` of a plain ACK frame, or None for anything else (use :func:`parse`)."""
    if len(frame) < CTRL_FRAME_LEN:
        return None
    (
        ethertype, first, plen, nh, _, _, dport, udp_len, _, opcode, _, _, qp_word, _, _, kind,
        flags, _, _, ev, ts, cum, base, bitmap, ce, count,
    ) = _FAST_CTRL.unpack_from(frame, 0)  # fmt: skip
    if (
        ethertype != ETHERTYPE_IPV6
        or nh != IPPROTO_UDP
        or dport != ROCE_PORT
        or opcode != OP_ACKNOWLEDGE
        or kind != EXT_ACK
        or udp_len != plen
        or plen < CTRL_FRAME_LEN - OFF_UDP
        or OFF_UDP + plen > len(frame)
        or first >> 28 != 6
    ):
        return None
    return qp_word & QPN_MASK, cum & PSN_MASK, base & PSN_MASK, bitmap, ts, ce, count, flags, ev


def decode_data(frame: bytes | bytearray | memoryview) -> DataFields | None:
    """The receiver's fast path: the fields of a plain data frame (no SRH) in one tuple.

    Returns ``(dest_qp, psn, ack_req, ecn, opcode, va, rkey, dma_len, imm, plane_hint,
    spine_hint, ev, msg_id, msg_len, msg_offset, timestamp, payload, trimmed)``, or None for
    anything else (control packets, SRH, malformed frames): :func:`parse` handles those and
    raises the :class:`WireError` that names the problem.
    """
    size = len(frame)
    if size < DATA_HEADER_LEN:
        return None
    ethertype, first, plen, nh, _, _, dport, udp_len, _, opcode, _, _, qp_word, psn_word = (
        _FAST_HEAD.unpack_from(frame, 0)
    )
    if (
        ethertype != ETHERTYPE_IPV6
        or nh != IPPROTO_UDP
        or dport != ROCE_PORT
        or udp_len != plen
        or OFF_UDP + plen > size
        or first >> 28 != 6
    ):
        return None
    end = OFF_UDP + udp_len
    if opcode == OP_WRITE_ONLY:
        head = DATA_HEADER_LEN
        va, rkey, dma_len, kind, _, plane, spine, ev, msg_id, msg_len, msg_off, ts = (
            _FAST_DATA.unpack_from(frame, OFF_BTH + BTH_LEN)
        )
        imm: int | None = None
    elif opcode == OP_WRITE_ONLY_IMM:
        head = DATA_IMM_HEADER_LEN
        if size < head:
            return None
        va, rkey, dma_len, imm, kind, _, plane, spine, ev, msg_id, msg_len, msg_off, ts = (
            _FAST_DATA_IMM.unpack_from(frame, OFF_BTH + BTH_LEN)
        )
    else:
        return None
    present = end - head
    if kind != EXT_DATA or present < 0 or present > dma_len or msg_off + dma_len > msg_len:
        return None
    tc = (first >> 20) & 0xFF
    return (
        qp_word & QPN_MASK, psn_word & PSN_MASK, psn_word >= 0x80000000, tc & 3, opcode, va,
        rkey, dma_len, imm, plane, spine, ev, msg_id, msg_len, msg_off, ts,
        memoryview(frame)[head:end],
        _TRIM_BY_DSCP.get(tc >> 2, TRIM_FABRIC if present < dma_len else TRIM_NONE),
    )  # fmt: skip
