"""MRC packets for the data-plane tests, built with scapy from fabric-model values.

The layout is the one the switch parses (docs/wire-format.md owns the fields inside the MRC
extensions): Ethernet / IPv6 (traffic class DSCP<<2 | ECN) / [SRH] / UDP 4791 (checksum 0) /
BTH (12) / RETH (16) / [ImmDt (4)] / MRC data extension (24) / payload. A trimmed packet is the
same packet built with an empty payload and DSCP 12: lengths then follow by construction.

The case table builds frames from the fabric model (:func:`ipv6_frame` with :func:`mrc_udp`);
tests that need no fabric take :func:`mrc_frame`: the same builders with a host's and a
switch's MAC and a source address fixed.
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Sequence

from scapy.layers.inet import IP
from scapy.layers.inet6 import UDP, IPv6, IPv6ExtHdrSegmentRouting
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw

from p4src.contract import (
    ETHERTYPE_IPV6,
    MRC_DATA_BYTES,
    ROCEV2_UDP_PORT,
    SRH_ROUTING_TYPE,
    Dscp,
    Ecn,
    ExtType,
    Opcode,
)

#: A recognisable MRC data extension (of type DATA); the switch must keep it byte for byte.
MRC_DATA_EXT = bytes([ExtType.DATA]) + bytes(range(0xA1, 0xA1 + MRC_DATA_BYTES - 1))
Address = ipaddress.IPv6Address | str

#: Addresses of :func:`mrc_frame`: a host sends to a switch from a NIC of rack 0, plane 0.
HOST_MAC = "02:aa:00:00:00:01"
SWITCH_MAC = "02:bb:00:00:00:01"
SRC = "fcbb:bb00:1c00::"


def bth(opcode: int, dest_qp: int = 0x000123, psn: int = 0x000456, ack_req: bool = True) -> bytes:
    """RoCEv2 Base Transport Header (12 bytes), P_Key 0xFFFF, transport version 0."""
    return struct.pack("!BBHII", opcode, 0, 0xFFFF, dest_qp & 0xFFFFFF, (ack_req << 31) | psn)


def reth(virtual_address: int = 0x7F00_0000_1000, rkey: int = 0x1234, length: int = 4096) -> bytes:
    """RDMA Extended Transport Header (16 bytes)."""
    return struct.pack("!QII", virtual_address, rkey, length)


def ipv6_frame(
    *,
    src_mac: str,
    dst_mac: str,
    src: Address,
    dst: Address,
    upper: Packet | bytes,
    dscp: int = Dscp.DEFAULT,
    ecn: int = Ecn.NOT_ECT,
    hop_limit: int = 64,
    flow_label: int = 0x5A5A5,
    segments: Sequence[Address] | None = None,
    segments_left: int | None = None,
    srh_len: int | None = None,
    routing_type: int = SRH_ROUTING_TYPE,
) -> bytes:
    """Ethernet / IPv6 / [SRH with ``segments`` as segment list 0..n] / ``upper``."""
    packet = Ether(src=src_mac, dst=dst_mac, type=ETHERTYPE_IPV6) / IPv6(
        src=str(src), dst=str(dst), tc=(dscp << 2) | ecn, fl=flow_label, hlim=hop_limit
    )
    if segments is not None:
        packet = packet / IPv6ExtHdrSegmentRouting(
            addresses=[str(s) for s in segments],
            segleft=segments_left,
            len=srh_len,
            type=routing_type,
        )
    packet = packet / (Raw(upper) if isinstance(upper, bytes) else upper)
    return bytes(packet)


def mrc_transport(
    opcode: int, payload: bytes, immediate: int | None = None, dma_length: int | None = None
) -> bytes:
    """What follows UDP in an MRC packet: BTH, then for WRITE (with immediate) RETH [+ ImmDt]
    + MRC data extension, then the payload. RETH's DMA length is the payload's unless given
    (a trimmed packet keeps the length of the payload it lost)."""
    data = bth(opcode)
    if opcode in (Opcode.WRITE_ONLY, Opcode.WRITE_ONLY_IMM):
        data += reth(length=len(payload) if dma_length is None else dma_length)
        if opcode == Opcode.WRITE_ONLY_IMM:
            data += struct.pack("!I", 0xC0FFEE if immediate is None else immediate)
        data += MRC_DATA_EXT
    return data + payload


def mrc_udp(
    opcode: int,
    payload: bytes,
    *,
    sport: int = 0xC123,
    immediate: int | None = None,
    dma_length: int | None = None,
) -> Packet:
    """UDP (destination 4791, checksum 0 as MRC sends it) carrying an MRC transport."""
    transport = mrc_transport(opcode, payload, immediate, dma_length)
    return UDP(sport=sport, dport=ROCEV2_UDP_PORT, chksum=0) / Raw(transport)


def truncated_mrc_udp(keep: int, *, sport: int = 0xC123) -> Packet:
    """A WRITE whose transport headers stop after ``keep`` bytes (BTH is 12, RETH 16)."""
    transport = mrc_transport(Opcode.WRITE_ONLY, b"")[:keep]
    return UDP(sport=sport, dport=ROCEV2_UDP_PORT, chksum=0) / Raw(transport)


def ack_udp(*, sport: int = 0xC123) -> Packet:
    """A control packet: BTH opcode ACKNOWLEDGE, AETH, and a small control extension."""
    return UDP(sport=sport, dport=ROCEV2_UDP_PORT, chksum=0) / Raw(
        bth(Opcode.ACKNOWLEDGE) + struct.pack("!I", 0x00000456) + bytes(16)
    )


def plain_udp(payload: bytes, *, dport: int = 9000) -> Packet:
    """Ordinary UDP, not RoCEv2."""
    return UDP(sport=40000, dport=dport, chksum=0) / Raw(payload)


def ipv4_frame(src_mac: str, dst_mac: str) -> bytes:
    """A frame that is not IPv6."""
    return bytes(
        Ether(src=src_mac, dst=dst_mac) / IP(src="192.0.2.1", dst="192.0.2.2") / plain_udp(b"v4")
    )


def arp_frame(src_mac: str, dst_mac: str) -> bytes:
    """Ether type ARP and a 28-byte body of zeros: a frame that is not IPv6."""
    return bytes(Ether(src=src_mac, dst=dst_mac, type=0x0806)) + bytes(28)


def truncated_ipv6_frame(src_mac: str, dst_mac: str, header_bytes: int = 20) -> bytes:
    """Ether type IPv6 followed by only ``header_bytes`` of a 40-byte IPv6 header."""
    whole = bytes(IPv6(src="fd00::1", dst="fd00::2", nh=59))
    return bytes(Ether(src=src_mac, dst=dst_mac, type=ETHERTYPE_IPV6)) + whole[:header_bytes]


def payload_bytes(length: int) -> bytes:
    """A recognisable payload of ``length`` bytes."""
    return bytes((i * 7 + 3) & 0xFF for i in range(length))


def mrc_frame(
    dst: Address,
    *,
    dscp: int = Dscp.TRIMMABLE,
    ecn: int = Ecn.NOT_ECT,
    hop_limit: int = 64,
    segments: Sequence[Address] | None = None,
    segments_left: int | None = None,
    opcode: int | None = Opcode.WRITE_ONLY,
    payload: bytes = b"\xab" * 200,
    dma_length: int | None = None,
    dport: int = ROCEV2_UDP_PORT,
    src_mac: str = HOST_MAC,
    dst_mac: str = SWITCH_MAC,
) -> bytes:
    """A frame from :data:`HOST_MAC` to :data:`SWITCH_MAC`, :data:`SRC` to ``dst``: an MRC
    packet of ``opcode`` (see :func:`mrc_transport`) to UDP ``dport``, or with ``opcode`` None
    plain UDP carrying ``payload``; segments left defaults to the last segment's index."""
    if segments is not None and segments_left is None:
        segments_left = len(segments) - 1
    body = payload if opcode is None else mrc_transport(opcode, payload, dma_length=dma_length)
    upper = UDP(sport=0xC123, dport=dport, chksum=0) / Raw(body)
    return ipv6_frame(
        src_mac=src_mac, dst_mac=dst_mac, src=SRC, dst=dst, upper=upper, dscp=dscp, ecn=ecn,
        hop_limit=hop_limit, segments=segments, segments_left=segments_left,
    )  # fmt: skip


def describe(frame: bytes | None) -> str:
    """One readable line per layer, for assertion messages."""
    if frame is None:
        return "(no frame)"
    return str(Ether(frame).show2(dump=True))
