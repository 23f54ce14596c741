"""Latency as delay lines: what is put in leaves ``latency`` seconds (and its serialisation) later.

Where the kernel has no ``netem``, the testbed's own processes apply the fabric's latency: the
switchmodel's ports (:class:`DelayLine` between the queue and the wire, one link's latency
each: every frame takes the same links, a FIFO) and, with BMv2, which cannot delay, the host
agents' NICs (:class:`PathLine`: the latency of each frame's whole path, its links' count
times one link's, for frames to every host, which share only the NIC's own link). Time is
passed in (seconds, any monotonic origin); nothing here reads a clock or sleeps.

A line also adds each frame's serialisation (``per_byte``: seconds per byte, every link it
stands for together). An emulated port lets a frame go the moment it may start (a shaped
queue's turn, or at once when idle), and the veth delivers it whole at once; a real link
delivers its last bit one serialisation later, and a store-and-forward switch waits for it. So
without it every hop would lack a frame time, and a round trip between racks would be four
data frame times shorter than the real fabric's unloaded RTT (``topologies.operating``): the
queueing delay congestion control derives from it would read low.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Sized
from typing import Generic, TypeVar

T = TypeVar("T", bound=Sized)


class _Timing:
    """What a line adds to an item: ``latency`` seconds, and ``per_byte`` seconds for each of
    its bytes (its serialisation: see the module docstring)."""

    def __init__(self, latency: float, per_byte: float) -> None:
        if latency < 0:
            raise ValueError(f"latency {latency} s: expected >= 0")
        if per_byte < 0:
            raise ValueError(f"serialisation {per_byte} s per byte: expected >= 0")
        self.latency = latency
        self.per_byte = per_byte

    def due(self, item: Sized, now: float, links: int = 1) -> float:
        """When ``item``, put in at ``now``, may leave after ``links`` times the line's latency
        and serialisation."""
        return now + links * (self.latency + len(item) * self.per_byte)


class DelayLine(_Timing, Generic[T]):
    """A fixed latency before the wire: items leave in order, each ``latency`` seconds after
    it was put in plus ``per_byte`` seconds for each of its bytes (its serialisation: see the
    module docstring), a FIFO, as a cable is."""

    def __init__(self, latency: float, per_byte: float = 0.0) -> None:
        super().__init__(latency, per_byte)
        self._line: deque[tuple[float, T]] = deque()

    def __len__(self) -> int:
        return len(self._line)

    def put(self, item: T, now: float) -> None:
        """``item`` left the queue at ``now``: it may go on the wire from ``now + latency``
        plus its serialisation."""
        self._line.append((self.due(item, now), item))

    def pop(self, now: float) -> T | None:
        """The oldest item if its time has come at ``now``, else None."""
        line = self._line
        if line and line[0][0] <= now:
            return line.popleft()[1]
        return None

    def put_back(self, item: T, now: float) -> None:
        """Return an item :meth:`pop` gave out but that could not be sent (it stays first)."""
        self._line.appendleft((now, item))

    def next_due(self) -> float | None:
        """When the oldest item may leave, or None (empty)."""
        return self._line[0][0] if self._line else None


class PathLine(_Timing, Generic[T]):
    """The latency of whole paths from one NIC (a host agent's, standing in for the fabric's
    links where the switches cannot delay): an item put in for a path of ``links`` links
    leaves ``links`` times ``latency`` seconds (one link's) after it was put in, plus
    ``links`` times ``per_byte`` seconds for each of its bytes, by its own time, not in the
    order of putting. Within a rack a path has two links, between racks four
    (:meth:`topologies.fabric.Fabric.links_to`).

    A NIC's frames share only its own link; beyond the first switch a data frame to one host
    and an ACK to another go their own ways. In a FIFO an ACK put in just after a data frame
    would wait for the data frame's serialisation on every link of the path, three frame times
    on links it never shares with that frame: every RTT the peer measures would grow by them
    (at 1.4 Mb/s 72 ms, 1 us of the real fabric's 9.4). The NIC's own link is the pacing's
    (:class:`host.agent.pacing.NicWire`: data frames wait their turn, control frames jump the
    line). Items of one size on paths of one length (a flow's data frames) keep their order; a
    tie keeps the order of putting.
    """

    def __init__(self, latency: float, per_byte: float = 0.0) -> None:
        super().__init__(latency, per_byte)
        self._heap: list[tuple[float, int, T]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def put(self, item: T, now: float, links: int) -> None:
        """``item`` left the NIC at ``now`` for a path of ``links`` links: it arrives their
        latency plus its serialisation on each later."""
        if links < 1:
            raise ValueError(f"a path of {links} links: expected at least 1")
        heapq.heappush(self._heap, (self.due(item, now, links), next(self._seq), item))

    def pop(self, now: float) -> T | None:
        """The item due first if its time has come at ``now``, else None."""
        heap = self._heap
        if heap and heap[0][0] <= now:
            return heapq.heappop(heap)[2]
        return None

    def next_due(self) -> float | None:
        """When the item due first may leave, or None (empty)."""
        return self._heap[0][0] if self._heap else None
