"""The 16-bit uSID encoding and uSID carrier arithmetic (SRv6 NEXT-C-SID, "uN").

Every node of the fabric has one uSID, encoded ``plane(4) | tier(2) | index(10)``::

     15   12 11 10 9                 0
    +-------+-----+-------------------+
    | plane | tier|       index       |
    +-------+-----+-------------------+

with the tier code 1 for T0 (leaf), 2 for T1 (spine) and 3 for a host NIC. The code 0 is never
used, so no uSID is ever zero and a zero 16-bit field always means "end of carrier". In hex the
first digit of a uSID is its plane: ``0x1c02`` is plane 1, tier code 3 (host NIC), host 2.

A carrier is a 128-bit IPv6 address ``block(32) | uSID | uSID | ... | 0...`` holding up to six
uSIDs. A switch whose uSID is the first one after the block shifts the rest left by 16 bits,
zero-filling the end (:func:`shift`); the carrier is exhausted when no uSID follows.

A route longer than one carrier should hold, or one sent as SRv6 with an SRH, is cut in two
(:func:`split`): a first carrier for the IPv6 destination and a second one, the single segment
of a reduced SRH (RFC 8754 section 4.1.1: segments left 1, last entry 0). The switch whose uSID
ends the first carrier finds it exhausted, performs End and copies the segment into the
destination; the uN shifts go on from there.
"""

from __future__ import annotations

import enum
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

BLOCK_BITS = 32
USID_BITS = 16
CARRIER_SLOTS = (128 - BLOCK_BITS) // USID_BITS  # six uSIDs after a 32-bit block
_USID_MASK = (1 << USID_BITS) - 1
_ARG_BITS = 128 - BLOCK_BITS - USID_BITS  # the bits after the active uSID


class TierCode(enum.IntEnum):
    """The 2-bit tier field of a uSID."""

    T0 = 1
    T1 = 2
    HOST = 3


@dataclass(frozen=True)
class UsidFields:
    """A uSID decoded into its plane, tier code and index."""

    plane: int
    tier: TierCode
    index: int


def encode(plane: int, tier: TierCode, index: int) -> int:
    """The uSID of node ``index`` of ``tier`` in ``plane``."""
    if not 0 <= plane < 16:
        raise ValueError(f"plane {plane}: expected 0..15 (4-bit field)")
    if not 0 <= index < 1024:
        raise ValueError(f"index {index}: expected 0..1023 (10-bit field)")
    return (plane << 12) | (int(tier) << 10) | index


def decode(usid: int) -> UsidFields:
    """Split a uSID into plane, tier code and index."""
    if not 0 < usid <= _USID_MASK:
        raise ValueError(f"uSID {usid:#x}: expected a non-zero 16-bit value")
    return UsidFields(plane=usid >> 12, tier=TierCode((usid >> 10) & 0x3), index=usid & 0x3FF)


def carrier(block: ipaddress.IPv6Network, usids: Sequence[int]) -> ipaddress.IPv6Address:
    """The carrier address ``block | usids[0] | usids[1] | ... | 0...``."""
    if block.prefixlen != BLOCK_BITS:
        raise ValueError(f"block {block}: expected a /{BLOCK_BITS}")
    if not 0 < len(usids) <= CARRIER_SLOTS:
        raise ValueError(f"{len(usids)} uSIDs: a carrier holds 1 to {CARRIER_SLOTS}")
    value = int(block.network_address)
    for slot, usid in enumerate(usids):
        if not 0 < usid <= _USID_MASK:
            raise ValueError(f"uSID {usid:#x}: expected a non-zero 16-bit value")
        value |= usid << (128 - BLOCK_BITS - USID_BITS * (slot + 1))
    return ipaddress.IPv6Address(value)


def split(
    block: ipaddress.IPv6Network, usids: Sequence[int], at: int
) -> tuple[ipaddress.IPv6Address, ipaddress.IPv6Address]:
    """``usids`` cut before index ``at``: the carrier of the first ``at`` uSIDs (the IPv6
    destination) and the carrier of the rest (the SRH segment)."""
    if not 0 < at < len(usids):
        raise ValueError(f"split at {at}: expected 1..{len(usids) - 1} for {len(usids)} uSIDs")
    return carrier(block, usids[:at]), carrier(block, usids[at:])


def active(address: ipaddress.IPv6Address) -> int:
    """The active uSID of a carrier: the 16 bits right after the block (0 when exhausted)."""
    return (int(address) >> _ARG_BITS) & _USID_MASK


def exhausted(address: ipaddress.IPv6Address) -> bool:
    """True when nothing follows the active uSID (the bits after it are all zero)."""
    return int(address) & ((1 << _ARG_BITS) - 1) == 0


def shift(address: ipaddress.IPv6Address) -> ipaddress.IPv6Address:
    """The uN behaviour: drop the active uSID, move the rest left 16 bits, zero-fill."""
    value = int(address)
    block = value >> (128 - BLOCK_BITS) << (128 - BLOCK_BITS)
    rest = value & ((1 << _ARG_BITS) - 1)
    return ipaddress.IPv6Address(block | (rest << USID_BITS))


def usids(address: ipaddress.IPv6Address) -> list[int]:
    """The uSIDs a carrier still holds, in order (empty when the block is followed by zero)."""
    value = int(address)
    found = []
    for slot in range(CARRIER_SLOTS):
        usid = (value >> (128 - BLOCK_BITS - USID_BITS * (slot + 1))) & _USID_MASK
        if usid == 0:
            break
        found.append(usid)
    return found


def prefix(block: ipaddress.IPv6Network, usid: int) -> ipaddress.IPv6Network:
    """The /48 that routes to a node: ``block:uSID::/48``."""
    return ipaddress.IPv6Network((int(carrier(block, [usid])), BLOCK_BITS + USID_BITS))
