"""A link's latency as a delay line: what is put in leaves, in order, ``latency`` seconds later.

Where the kernel has no ``netem``, the testbed's own processes apply the fabric's latency: the
switchmodel's ports (a delay line between the queue and the wire, one link's latency each) and,
with BMv2, which cannot delay, the host agents' NICs (the whole path's latency). Both use
:class:`DelayLine`. Time is passed in (seconds, any monotonic origin); nothing here reads a
clock or sleeps.

A line also adds each frame's serialisation (``per_byte``: seconds per byte, every link it
stands for together). An emulated port lets a frame go the moment it may start (a shaped
queue's turn, or at once when idle), and the veth delivers it whole at once; a real link
delivers its last bit one serialisation later, and a store-and-forward switch waits for it. So
without it every hop would lack a frame time, and a round trip between racks would be four
data frame times shorter than the real fabric's unloaded RTT (``topologies.operating``): the
queueing delay congestion control derives from it would read low.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sized
from typing import Generic, TypeVar

T = TypeVar("T", bound=Sized)


class DelayLine(Generic[T]):
    """A fixed latency before the wire: items leave in order, each ``latency`` seconds after
    it was put in plus ``per_byte`` seconds for each of its bytes (its serialisation: see the
    module docstring), a FIFO, as a cable is."""

    def __init__(self, latency: float, per_byte: float = 0.0) -> None:
        if latency < 0:
            raise ValueError(f"latency {latency} s: expected >= 0")
        if per_byte < 0:
            raise ValueError(f"serialisation {per_byte} s per byte: expected >= 0")
        self.latency = latency
        self.per_byte = per_byte
        self._line: deque[tuple[float, T]] = deque()

    def __len__(self) -> int:
        return len(self._line)

    def put(self, item: T, now: float) -> None:
        """``item`` left the queue at ``now``: it may go on the wire from ``now + latency``
        plus its serialisation."""
        self._line.append((now + self.latency + len(item) * self.per_byte, item))

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
