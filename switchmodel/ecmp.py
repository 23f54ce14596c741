"""The ECMP hash of ``MrcIngress.ipv6_ecmp``, computed as BMv2 computes it.

The table's action selector (``action_selector(HashAlgorithm.crc32, ...)``) hashes four fields,
in the order the table's key lists them:

=================================  ====  ===============================================
field                              bits  value
=================================  ====  ===============================================
``hdr.ipv6.src_addr``               128  IPv6 source address
``hdr.ipv6.dst_addr``               128  IPv6 destination (after a uN shift or End, if any)
``hdr.ipv6.flow_label``              20  IPv6 flow label
``meta.ecmp_l4_src_port``            16  UDP source port, 0 when the packet has no UDP
=================================  ====  ===============================================

BMv2 packs the fields one after the other, most significant bit first and with no padding
between them (so the 20-bit flow label straddles byte boundaries), and fills the last byte
with zero bits: 292 bits in 37 bytes. It hashes those bytes with its ``crc32`` (polynomial
0x04C11DB7, reflected, initial value and final XOR 0xFFFFFFFF: the CRC-32 of zlib) and picks
member ``hash mod n`` of the group's ``n`` members, the members ordered by the handle BMv2 gave
them when they were created (the smallest free handle: creation order on a fresh switch).

switchmodel calls :func:`ecmp_hash` for every packet the table matches; the data-plane tests
use the same function to predict which uplink a flow takes on both targets.
"""

from __future__ import annotations

import zlib

#: bits of the selector input: source, destination, flow label, UDP source port
SELECTOR_BITS = 128 + 128 + 20 + 16
#: bytes of the selector input (the last 4 bits are zero padding)
SELECTOR_BYTES = (SELECTOR_BITS + 7) // 8
_PAD = SELECTOR_BYTES * 8 - SELECTOR_BITS

_FLOW_LABEL_MAX = (1 << 20) - 1
_PORT_MAX = (1 << 16) - 1
_ADDR_MAX = (1 << 128) - 1


def selector_input(src: int, dst: int, flow_label: int, l4_src_port: int) -> bytes:
    """The bytes BMv2 hashes for these field values (37 bytes, see the module docstring)."""
    for name, value, top in (
        ("src", src, _ADDR_MAX),
        ("dst", dst, _ADDR_MAX),
        ("flow_label", flow_label, _FLOW_LABEL_MAX),
        ("l4_src_port", l4_src_port, _PORT_MAX),
    ):
        if not 0 <= value <= top:
            raise ValueError(f"ECMP selector field {name}={value:#x}: expected 0..{top:#x}")
    packed = ((((src << 128 | dst) << 20 | flow_label) << 16) | l4_src_port) << _PAD
    return packed.to_bytes(SELECTOR_BYTES, "big")


def ecmp_hash(src: int, dst: int, flow_label: int, l4_src_port: int) -> int:
    """The 32-bit hash BMv2's ``crc32`` gives for these field values."""
    return zlib.crc32(selector_input(src, dst, flow_label, l4_src_port))


def member_index(src: int, dst: int, flow_label: int, l4_src_port: int, members: int) -> int:
    """Which of a group's ``members`` (0-based, in handle order) carries this flow."""
    if members < 1:
        raise ValueError(f"ECMP group of {members} members: expected at least 1")
    return ecmp_hash(src, dst, flow_label, l4_src_port) % members
