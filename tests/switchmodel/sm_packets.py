"""Test packets for the switchmodel tests, built with scapy (never on the switch's hot path).

:func:`mrc_frame` builds Ethernet / IPv6 / [SRH] / UDP / BTH / RETH / [ImmDt] / MRC data
extension / payload with every length computed by scapy, so the expected output of a test is an
independently built frame, compared byte for byte with what the pipeline produced.
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Sequence

from scapy.layers.inet import UDP
from scapy.layers.inet6 import IPv6, IPv6ExtHdrSegmentRouting
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from topologies import Fabric, load_topology
from topologies.config import shipped_topology

HOST_MAC = "02:aa:00:00:00:01"
SWITCH_MAC = "02:bb:00:00:00:01"
SRC = "fcbb:bb00:1c00::"
ROCE = 4791
DATA_EXT = bytes([1]) + bytes(range(1, 24))  # 24 bytes, type 1


def small_fabric() -> Fabric:
    """The shipped two-plane demo fabric."""
    return Fabric(load_topology(shipped_topology("small")))


def bth(opcode: int, qp: int = 0x12, psn: int = 7) -> bytes:
    """A 12-byte RoCEv2 BTH."""
    return struct.pack("!BBHI I", opcode, 0, 0xFFFF, qp & 0xFFFFFF, psn & 0xFFFFFF)


def reth(address: int = 0x1000, rkey: int = 0x55, length: int = 256) -> bytes:
    """A 16-byte RETH."""
    return struct.pack("!QII", address, rkey, length)


def mrc_frame(
    dst: str | ipaddress.IPv6Address,
    *,
    dscp: int = 10,
    ecn: int = 0,
    hlim: int = 64,
    segments: Sequence[str] | None = None,
    segleft: int | None = None,
    opcode: int | None = 0x0A,
    dport: int = ROCE,
    payload: bytes = b"\xab" * 200,
    smac: str = HOST_MAC,
    dmac: str = SWITCH_MAC,
    next_header: int | None = None,
) -> bytes:
    """An MRC (or other UDP) frame; ``opcode=None`` gives plain UDP with ``payload``."""
    l3 = IPv6(src=SRC, dst=str(dst), tc=dscp << 2 | ecn, hlim=hlim, fl=0x2345)
    if next_header is not None:
        l3.nh = next_header
    if segments is not None:
        srh = IPv6ExtHdrSegmentRouting(
            addresses=list(segments), segleft=len(segments) - 1 if segleft is None else segleft
        )
        l3 = l3 / srh
    if opcode is None:
        body = payload
    elif opcode in (0x0A, 0x0B):
        body = bth(opcode) + reth() + (b"\x00\x00\x00\x2a" if opcode == 0x0B else b"") + DATA_EXT
        body += payload
    else:
        body = bth(opcode) + payload
    packet = Ether(src=smac, dst=dmac) / l3 / UDP(sport=0xC123, dport=dport, chksum=0) / Raw(body)
    return bytes(packet)
