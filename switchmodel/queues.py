"""The traffic manager of one egress port, sans-IO: strict-priority FIFOs and a token bucket.

:class:`PortQueue` behaves like BMv2's priority queueing with a rate limit, except that the
rate is in bits per second instead of packets per second:

- ``priorities`` FIFOs, the highest priority number served first (priority 1 = high with two);
- each FIFO holds at most ``depth`` packets (BMv2 sets the capacity per priority queue);
  :meth:`~PortQueue.enqueue` of a packet into a full FIFO is refused, the caller counts
  QUEUE_FULL;
- the depth a packet observes at enqueue (``enq_qdepth``) is the number of packets queued on
  the port over all its FIFOs, as BMv2 reports it;
- a token bucket in bits shapes the port to ``rate_bps``: a packet may leave when the bucket is
  not negative, and takes its size out of it (the bucket may go negative: a link serialising
  one packet after another). The bucket fills up to ``burst_bits`` while the port is idle, which
  lets an event loop with millisecond timers keep the configured rate.

Time is passed in (seconds, any monotonic origin); nothing here reads a clock or sleeps.
"""

from __future__ import annotations

from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")

MIN_BURST_BITS = 1514 * 8  # one full-size Ethernet frame
TIMER_SLACK = 0.002  # seconds of line rate the bucket holds so a late timer loses nothing


def default_burst_bits(rate_bps: float) -> float:
    """A bucket size that keeps ``rate_bps`` with timers up to a few milliseconds late."""
    return max(MIN_BURST_BITS, rate_bps * TIMER_SLACK)


class PortQueue(Generic[T]):
    """Strict-priority, packet-bounded, rate-shaped queues of one egress port."""

    def __init__(
        self,
        priorities: int = 2,
        depth: int = 64,
        rate_bps: float = 0.0,
        burst_bits: float | None = None,
        now: float = 0.0,
        control_depth: int | None = None,
    ) -> None:
        if priorities < 1:
            raise ValueError(f"priorities {priorities}: expected at least 1")
        if depth < 1:
            raise ValueError(f"queue depth {depth}: expected at least 1 packet")
        if control_depth is not None and control_depth < 1:
            raise ValueError(f"control queue depth {control_depth}: expected at least 1 packet")
        if rate_bps < 0:
            raise ValueError(f"rate {rate_bps} bit/s: expected >= 0 (0 = not shaped)")
        self.priorities = priorities
        self.depth = depth
        #: packets each queue above priority 0 holds (headers, ACKs, NACKs: small ones)
        self.control_depth = depth if control_depth is None else control_depth
        self._depths = [depth] + [self.control_depth] * (priorities - 1)
        self.rate_bps = float(rate_bps)
        self.burst_bits = default_burst_bits(rate_bps) if burst_bits is None else burst_bits
        self._fifos: list[deque[tuple[int, T]]] = [deque() for _ in range(priorities)]
        self._order = list(range(priorities - 1, -1, -1))  # highest priority first
        self._tokens = self.burst_bits
        self._last = now
        self.length = 0  # packets queued over all priorities

    def enqueue(self, item: T, size: int, priority: int) -> int | None:
        """Queue ``item`` of ``size`` bytes; the depth it observed, or None when full.

        A priority beyond the port's queues is served by the highest one (BMv2 would drop it;
        here the pipeline only asks for 0 or 1 and ``--priority-queues 1`` folds them).
        """
        if priority >= self.priorities:
            priority = self.priorities - 1
        elif priority < 0:
            priority = 0
        fifo = self._fifos[priority]
        if len(fifo) >= self._depths[priority]:
            return None
        observed = self.length
        fifo.append((size, item))
        self.length = observed + 1
        return observed

    def admit(self, size: int, now: float) -> bool:
        """Cut-through: True when an empty port may send a ``size``-byte packet at ``now``.

        The packet then leaves without being queued (it would be the next one dequeued
        anyway); its bits are taken from the bucket. False: enqueue it instead.
        """
        if self.length:
            return False
        if not self.rate_bps:
            return True
        self._refill(now)
        if self._tokens < 0:
            return False
        self._tokens -= size * 8
        return True

    def _refill(self, now: float) -> None:
        elapsed = now - self._last
        if elapsed > 0:
            tokens = self._tokens + elapsed * self.rate_bps
            self._tokens = tokens if tokens < self.burst_bits else self.burst_bits
        self._last = now

    def dequeue(self, now: float) -> T | None:
        """The next packet allowed to leave at ``now`` (highest priority first), or None."""
        if not self.length:
            return None
        if self.rate_bps:
            self._refill(now)
            if self._tokens < 0:
                return None
        for prio in self._order:
            fifo = self._fifos[prio]
            if fifo:
                size, item = fifo.popleft()
                self.length -= 1
                if self.rate_bps:
                    self._tokens -= size * 8
                return item
        return None  # pragma: no cover - length and fifos agree

    def push_front(self, item: T, size: int, priority: int) -> None:
        """Put back a packet :meth:`dequeue` gave out but that could not be sent."""
        priority = min(max(priority, 0), self.priorities - 1)
        self._fifos[priority].appendleft((size, item))
        self.length += 1
        if self.rate_bps:
            self._tokens += size * 8

    def next_ready(self, now: float) -> float | None:
        """When :meth:`dequeue` will next give a packet: ``now``, a later time, or None (empty)."""
        if not self.length:
            return None
        if not self.rate_bps:
            return now
        self._refill(now)
        if self._tokens >= 0:
            return now
        return now + (-self._tokens) / self.rate_bps

    def depth_of(self, priority: int) -> int:
        """Packets queued at ``priority``."""
        return len(self._fifos[priority])
