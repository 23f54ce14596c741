"""A memory-mapped ``PACKET_RX_RING`` (TPACKET_V2): frames read with no system call each.

Used by the switchmodel's ports and the host agents' plane NICs. The kernel writes each frame
into the next free slot (a ``tpacket2_hdr`` then the frame at ``tp_mac``) and sets
``TP_STATUS_USER``; the reader takes it and hands the slot back by writing ``TP_STATUS_KERNEL``
(:data:`RELEASE`) into its status. Slots are read in order, so one index (:attr:`RxRing.slot`) follows
the kernel. A full ring drops frames (counted in ``PACKET_STATISTICS``), like a full socket
buffer. ``epoll`` reports the socket readable while a slot waits for the reader, so a loop that
empties the ring needs no read that ends in ``EAGAIN`` to know it is empty.

Set the ring up before ``bind()`` (the kernel sizes it then).
"""

from __future__ import annotations

import mmap
import socket
import struct

SOL_PACKET = 263
PACKET_VERSION = 10
PACKET_RX_RING = 5
TPACKET_V2 = 1
TP_STATUS_USER = 1
RING_BLOCK = 1 << 17
TP2_LEN_MAC = struct.Struct("=IIH")  # tp_len, tp_snaplen, tp_mac (after the 4-byte tp_status)
RELEASE = b"\x00\x00\x00\x00"  # TP_STATUS_KERNEL


class RxRing:
    """A ``PACKET_RX_RING`` of about ``ring_bytes`` mapped into the process, with slots that hold
    a frame of ``max_frame`` bytes (larger frames arrive truncated: ``tp_snaplen < tp_len``)."""

    def __init__(self, sock: socket.socket, max_frame: int, ring_bytes: int) -> None:
        frame_size = 1 << (max_frame + 128 - 1).bit_length()  # header + frame, power of two
        block = max(RING_BLOCK, frame_size)
        blocks = max(ring_bytes // block, 1)
        self.frame_size = frame_size
        self.count = blocks * (block // frame_size)
        self.slot = 0
        sock.setsockopt(SOL_PACKET, PACKET_VERSION, TPACKET_V2)
        sock.setsockopt(
            SOL_PACKET, PACKET_RX_RING, struct.pack("IIII", block, blocks, frame_size, self.count)
        )
        self.mem = mmap.mmap(
            sock.fileno(), block * blocks, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE
        )

    def ready(self) -> bool:
        """True when the next slot holds a frame."""
        return bool(self.mem[self.slot * self.frame_size] & TP_STATUS_USER)

    def close(self) -> None:
        """Unmap the ring."""
        self.mem.close()
