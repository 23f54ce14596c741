"""The host agent's clock for what it reads: a frame arrives when it is read, not when the
read loop began.

The agent reads its planes in turns of a few frames; a loop over many frames takes
milliseconds of Python, which at a dilation of 1,000 are microseconds of protocol time, more
than a whole round trip of the emulated fabric. An ACK read late in the loop but timed at its
start gave an RTT sample below the path's serialisation and latency, and NSCC, which keeps the
smallest sample as its base RTT, shrank its window to a few packets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from host.agent.agent import IPV6_DST, Agent

READ_TIME = 1e-3  # seconds of the agent's clock one read of a plane takes here
ADDRESS = bytes(range(16))


def frame(n: int) -> bytearray:
    out = bytearray(64)
    out[IPV6_DST] = ADDRESS
    out[-1] = n
    return out


@dataclass
class Clock:
    now: float = 0.0


@dataclass
class Sock:
    """A plane socket holding ``frames``; every read advances the clock."""

    clock: Clock
    frames: list[bytearray]
    read_at: dict[int, float]  #: frame number -> when it was read

    def receive_batch(self, count: int) -> tuple[list[bytearray], int]:
        self.clock.now += READ_TIME
        got, self.frames = self.frames[:count], self.frames[count:]
        for f in got:
            self.read_at[f[-1]] = self.clock.now
        return got, 0


@dataclass
class Nic:
    plane: int


@dataclass
class Plane:
    sock: Sock
    nic: Nic
    address: bytes = ADDRESS


@dataclass
class Core:
    """A transport core that records when each frame was received and when it sent."""

    clock: Clock
    received: list[tuple[int, float]] = field(default_factory=list)
    sent_at: list[float] = field(default_factory=list)

    def receive_frame(self, plane: int, frame: bytearray, now: float) -> None:
        self.received.append((frame[-1], now))

    def frames_to_send(self, now: float, budget: Any) -> list[tuple[int, bytes]]:
        self.sent_at.append(now)
        return []


class ReadLoop:
    """The parts of an :class:`Agent` its read loop uses."""

    def __init__(self, frames_per_plane: int) -> None:
        self.clock = Clock()
        self.context = Core(self.clock)
        self.pcap = None
        self.core_errors = 0
        self.read_at: dict[int, float] = {}
        self.planes = [
            Plane(Sock(self.clock, [frame(p * 100 + n) for n in range(frames_per_plane)],
                       self.read_at), Nic(p))
            for p in range(2)
        ]  # fmt: skip

    def now(self) -> float:
        return self.clock.now

    def _send(self, frames: list[tuple[int, bytes]]) -> None:
        pass

    def _budget(self) -> None:
        return None

    def after_core(self, now: float) -> None:
        pass


def test_frames_are_timed_when_they_are_read() -> None:
    loop = ReadLoop(frames_per_plane=40)
    Agent._receive(loop)  # type: ignore[arg-type]
    read_at = loop.read_at
    assert len(loop.context.received) == len(read_at) == 80
    # every frame is timed no earlier than its read (the loop ran for ten reads and more)
    assert loop.clock.now >= 10 * READ_TIME
    for n, now in loop.context.received:
        assert now >= read_at[n], f"frame {n} read at {read_at[n]:g} s, timed {now:g} s"
    # what the core sends after a round is stamped at the end of the round, not its start
    assert loop.context.sent_at[-1] >= max(read_at.values())
