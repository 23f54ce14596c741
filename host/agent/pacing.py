"""The wire of a plane NIC: frames leave one after another at the link rate (sans-IO).

A NIC serialises what it sends: a window's burst from the transport leaves at the link rate,
not all at once. The testbed's links are veth pairs with no shaping on the host side (the
switches shape their own ports), so without this a host's burst would reach its leaf in an
instant, as if the host link were infinitely fast, and an incast would fill the leaf's queue
(and the queue of trimmed headers behind it) far faster than any real NIC could. :class:`NicWire`
keeps the time the wire is busy until; the agent sends data frames when it is free and holds the
rest, in order, until then. Control frames (ACKs, NACKs, probes: the DSCP of the high-priority
class, as the switches classify them) go first, ahead of waiting data, and take their own time
on the wire. Time is passed in; nothing here reads a clock.

:class:`LagMeter` counts how late something ran against its time: the wire's frames against
their pacing time (a frame that waited leaves when its turn comes; later than that is *pacing
lag*), and the agent's loop against the time it asked to wake up at (a *scheduling gap*). A
machine that keeps up shows lags of a timer's slack; one that does not shows lags of frames.
"""

from __future__ import annotations

from collections import deque

from host.transport import wire

ETH_HEADER = 14
PREAMBLE_AND_GAP = 20  # bytes of preamble, start delimiter and inter-frame gap on the wire
#: a frame may leave this much before the wire is free (fraction of a full frame's time):
#: an event loop wakes up late anyway, and the switch's port queue absorbs the difference
EARLY = 0.5
#: wire time an agent that woke up late may catch up on (full frames): frames that waited for
#: the wire and should have left while the agent was busy leave back to back, as far as this,
#: instead of being lost (and so do the frames the transport hands over in the same turn, which
#: would have waited had the loop been on time). A wire that was idle has nothing to catch up
#: on: a frame given to it then starts when it is given, as on a NIC
CATCH_UP = 8.0


def is_control(frame: bytes | bytearray) -> bool:
    """True for a frame of the high-priority class (IPv6 DSCP 48: ACK, NACK, probe)."""
    if len(frame) < ETH_HEADER + 2:
        return False
    traffic_class = ((frame[ETH_HEADER] & 0x0F) << 4) | (frame[ETH_HEADER + 1] >> 4)
    return traffic_class >> 2 == wire.DSCP_CONTROL


class LagMeter:
    """How late events ran against their due time: the total, the count of late ones, the
    largest since start and the largest since the last :meth:`take` (a sampler's window)."""

    def __init__(self) -> None:
        self.total = 0.0  #: seconds of lag summed over every event
        self.late = 0  #: events that ran after their due time
        self.max = 0.0  #: the largest lag since start
        self.window_max = 0.0  #: the largest lag since the last take()

    def add(self, lag: float) -> None:
        """One event that ran ``lag`` seconds after its due time (ignored when not late)."""
        if lag <= 0.0:
            return
        self.total += lag
        self.late += 1
        if lag > self.window_max:
            self.window_max = lag
            if lag > self.max:
                self.max = lag

    def take(self) -> float:
        """The largest lag since the previous call (and start a new window)."""
        value, self.window_max = self.window_max, 0.0
        return value

    def as_dict(self) -> dict[str, float]:
        """The figures since start (JSON-ready)."""
        return {"lag_total_s": self.total, "late": self.late, "lag_max_s": self.max}


class NicWire:
    """One NIC's transmit side: data frames wait for the wire, control frames jump the line."""

    def __init__(self, rate_bps: float, full_frame: int) -> None:
        if rate_bps <= 0:
            raise ValueError(f"NIC rate {rate_bps} b/s: expected > 0")
        self.byte_time = 8.0 / rate_bps
        frame_time = (full_frame + PREAMBLE_AND_GAP) * self.byte_time
        self.frame_time = frame_time
        self.early = EARLY * frame_time
        self.catch_up = CATCH_UP * frame_time
        #: when release() last left the wire behind its time with nothing waiting (a late loop
        #: that emptied a backlog): frames offered within a frame time of it catch up too
        self.behind_at: float | None = None
        self.free_at = 0.0  #: when the wire has sent everything given to it so far
        self.waiting: deque[bytes | bytearray] = deque()  #: data frames not yet on the wire
        self.held = 0  #: data frames that had to wait (statistics)
        self.lag = LagMeter()  #: waiting frames put on the wire later than their turn

    def offer(self, frame: bytes | bytearray, now: float) -> bool:
        """A frame to send at ``now``: True if it may go on the wire now (its time is taken),
        False if it waits (then :meth:`release` gives it back when its turn comes)."""
        if is_control(frame) or (not self.waiting and self.free_at <= now + self.early):
            behind = self.behind_at is not None and now - self.behind_at <= self.frame_time
            self._take(len(frame), max(self.free_at, now - self.catch_up if behind else now))
            if self.free_at >= now:
                self.behind_at = None
            return True
        self.waiting.append(frame)
        self.held += 1
        return False

    def release(self, now: float) -> list[bytes | bytearray]:
        """The waiting data frames whose turn has come by ``now``, in order."""
        out: list[bytes | bytearray] = []
        waiting = self.waiting
        while waiting and self.free_at <= now + self.early:
            self.lag.add(now - (self.free_at - self.early))  # its turn came at free_at - early
            frame = waiting.popleft()
            # a frame that waited for a late loop resumes where it should have been, up to
            # catch_up behind
            self._take(len(frame), max(self.free_at, now - self.catch_up))
            out.append(frame)
        self.behind_at = now if out and not waiting and self.free_at < now else None
        return out

    def next_release(self) -> float | None:
        """When :meth:`release` will have a frame to give (None: nothing waits)."""
        return self.free_at - self.early if self.waiting else None

    def _take(self, nbytes: int, start: float) -> None:
        """The wire sends ``nbytes`` from ``start`` on."""
        self.free_at = start + (nbytes + PREAMBLE_AND_GAP) * self.byte_time
