"""Registered memory regions: the only places a receiver ever writes.

A region is ``length`` bytes at virtual address ``addr`` backed by a bytearray, named on the
wire by its ``rkey``. :meth:`MemoryRegion.place` is the single write path of the receiver and
refuses anything that does not lie entirely inside the region.
"""

from __future__ import annotations

import secrets
from typing import Any, Protocol


class PlacementTarget(Protocol):
    """Memory a region can be backed by besides a bytearray (e.g. a driver's view of another
    process's memory): sized, sliced reads, sliced writes. The core only ever calls
    ``target[start:stop] = data`` and ``target[start:stop]`` within ``len(target)``; a write
    the memory cannot take (unmapped, read-only, its process gone) raises
    :class:`PlacementError`, which the receiver answers as a NIC answers a protection fault."""

    def __len__(self) -> int: ...  # noqa: D105

    def __getitem__(self, index: slice) -> bytes: ...  # noqa: D105

    def __setitem__(self, index: slice, data: Any) -> None: ...  # noqa: D105


RegionBuffer = bytearray | PlacementTarget


class RegionError(ValueError):
    """A region registration that cannot be honoured."""


class PlacementError(OSError):
    """A placement target could not take a write (its memory is unmapped, read-only, or its
    process is gone): nothing, or not everything, was written."""


class MemoryRegion:
    """``length`` bytes at virtual address ``addr``, remotely writable with ``rkey`` by the QPs
    of its protection ``domain`` (0 unless a driver gives regions and QPs domains)."""

    __slots__ = ("addr", "length", "rkey", "buffer", "view", "end", "domain")

    def __init__(
        self, addr: int, length: int, rkey: int, buffer: RegionBuffer, domain: int = 0
    ) -> None:
        self.addr = addr
        self.length = length
        self.rkey = rkey
        self.buffer = buffer
        self.view: Any = memoryview(buffer) if isinstance(buffer, bytearray) else buffer
        self.end = addr + length
        self.domain = domain

    def contains(self, va: int, length: int) -> bool:
        """True when ``[va, va + length)`` lies inside the region."""
        return self.addr <= va and va + length <= self.end and length >= 0

    def place(self, va: int, data: bytes | memoryview) -> bool:
        """Copy ``data`` to ``va``; False (and nothing written) when it would leave the region."""
        n = len(data)
        if not (self.addr <= va and va + n <= self.end):
            return False
        start = va - self.addr
        self.view[start : start + n] = data
        return True

    def read(self, va: int, length: int) -> bytes:
        """The bytes at ``[va, va + length)`` (must lie inside the region)."""
        if not self.contains(va, length):
            raise RegionError(
                f"read of {length} bytes at {va:#x}: outside region "
                f"[{self.addr:#x}, {self.end:#x}) (rkey {self.rkey:#x})"
            )
        start = va - self.addr
        return bytes(self.buffer[start : start + length])


class RegionTable:
    """The regions of one context, by rkey.

    An rkey is a secret (the operating system's random source): nobody can guess another
    region's rkey, a restarted host does not hand out the rkeys it handed out before, and no
    rkey is handed out twice in a table's lifetime (a packet still naming a withdrawn region's
    rkey never reaches a new region)."""

    def __init__(self) -> None:
        self._by_rkey: dict[int, MemoryRegion] = {}
        self._issued: set[int] = set()
        self.by_rkey = self._by_rkey  #: read-only view for the receiver's hot path

    def register(
        self, addr: int, length: int, buffer: RegionBuffer | None = None, domain: int = 0
    ) -> MemoryRegion:
        """Register ``length`` bytes at ``addr`` (backed by ``buffer`` or a new zeroed one),
        reachable by the QPs of protection ``domain``."""
        if not 0 <= addr < 1 << 64:
            raise RegionError(f"region address {addr:#x}: expected a 64-bit unsigned value")
        if not 0 < length <= 1 << 40 or addr + length > 1 << 64:
            raise RegionError(f"region length {length}: expected 1..2^40 bytes within 64-bit space")
        if buffer is None:
            buffer = bytearray(length)
        elif len(buffer) != length:
            raise RegionError(
                f"buffer of {len(buffer)} bytes for a region of {length}: expected equal"
            )
        while True:
            rkey = secrets.randbits(32)
            if rkey and rkey not in self._issued:
                break
        self._issued.add(rkey)
        region = MemoryRegion(addr, length, rkey, buffer, domain)
        self._by_rkey[rkey] = region
        return region

    def deregister(self, rkey: int) -> None:
        """Forget a region; later packets naming its rkey are refused."""
        if self._by_rkey.pop(rkey, None) is None:
            raise RegionError(f"rkey {rkey:#x}: no such region")

    def get(self, rkey: int) -> MemoryRegion | None:
        """The region of ``rkey``, or None."""
        return self._by_rkey.get(rkey)
