"""UET's load balancers: which entropy value (EV) a UET sender gives its next packet.

MRC sprays over SRv6 paths with its own cycle, weights and recycling (:mod:`host.transport.sender`,
docs/host-stack.md). UET's senders instead pick among ``n`` entropy values that the fabric's
switches hash, and learn from the feedback each ACK and NACK gives the one EV it echoes. These
are UET's balancers as the Ultra Ethernet reference simulator runs them (uet-htsim
``uec_mp.cpp``, ``buffer_reps.cpp``; its ``-load_balancing_algo``), so that the sim can run an
experiment with the balancer the reference runs and hold everything else side by side
(``sim/parity.py``); the transport policies ``uet-*`` (:mod:`host.transport.policy`) use them.

- :class:`Oblivious`: every EV once per round, in an order drawn anew each round (an XOR of the
  round's index with a random value); feedback is ignored.
- :class:`Bitmap`: the oblivious order, skipping EVs with a penalty (ECN 1, NACK 4, timeout 15,
  at most 15); each pick that has to skip takes one off the first EV it skips.
- :class:`Reps`: Recycled Entropy Packet Spraying: EVs acknowledged without a mark are kept in
  a circular buffer of 8 and reused oldest first, else a random EV. A timeout freezes the
  buffer (its EVs reused in turn, whatever their age) for 10 ms, then 16 random EVs explore.
- :class:`RepsLegacy`: every EV in turn for the first window, then EVs acknowledged without a
  mark, in order, else a random EV.
- :class:`Mixed` (the reference's default): the legacy REPS list when it has an EV, else the
  bitmap.

The objects are sans-IO: the QP calls :meth:`Balancer.next` for every packet it sends (new
packets and retransmissions) and :meth:`Balancer.feedback` for every ACK, NACK and timeout; an
EV is its index in the QP's EV table, and time comes in as ``now`` (seconds).
"""

from __future__ import annotations

import collections
import enum
import random

#: the REPS buffer's size (uet-htsim ``repsBufferSize``)
REPS_BUFFER = 8
#: how long a timeout freezes the REPS buffer, seconds (``exit_freeze_after``, 10 ms)
REPS_FREEZE = 10e-3
#: random EVs sent after the buffer thaws (``explore_counter``)
REPS_EXPLORE = 16
#: the bitmap's penalties and their cap (``UecMpBitmap``)
BITMAP_ECN, BITMAP_NACK, BITMAP_MAX = 1, 4, 15


class Feedback(enum.Enum):
    """What an ACK, a NACK or a timeout says of the EV it names (uet-htsim ``PathFeedback``)."""

    GOOD = "good"  #: acknowledged without a CE mark (or trimmed at the receiver's own leaf)
    ECN = "ecn"  #: acknowledged with a CE mark
    NACK = "nack"  #: trimmed in the fabric
    TIMEOUT = "timeout"  #: not acknowledged before the ACK timeout


class Balancer:
    """The EV choice of a UET sender over ``n`` EVs (indices ``0..n-1``)."""

    name = ""

    def __init__(self, n: int, rng: random.Random) -> None:
        if n < 1:
            raise ValueError(f"{self.name} load balancer over {n} EVs: expected at least 1")
        self.n = n
        self._rng = rng

    def next(self, sent: int, cwnd_packets: int, now: float) -> int:
        """The EV of the next packet; ``sent`` new packets went before it, the window holds
        ``cwnd_packets``."""
        raise NotImplementedError

    def feedback(self, ev: int, kind: Feedback, now: float) -> None:
        """An ACK, NACK or timeout naming EV ``ev``."""


class _Rounds(Balancer):
    """Every EV once per round, in an order drawn anew each round: EV ``i ^ x`` at the round's
    ``i``-th pick, ``x`` random (``n`` a power of two, so that this is a permutation)."""

    def __init__(self, n: int, rng: random.Random) -> None:
        super().__init__(n, rng)
        if n & (n - 1):
            raise ValueError(f"{self.name} load balancer over {n} EVs: expected a power of two")
        self._mask = n - 1
        self._index = 0
        self._xor = rng.randrange(n)

    def _advance(self) -> None:
        self._index += 1
        if self._index == self.n:
            self._index = 0
            self._xor = self._rng.randrange(self.n)

    def _current(self) -> int:
        return (self._index ^ self._xor) & self._mask


class Oblivious(_Rounds):
    """Every EV once per round; feedback ignored."""

    name = "oblivious"

    def next(self, sent: int, cwnd_packets: int, now: float) -> int:
        ev = self._current()
        self._advance()
        return ev


class Bitmap(_Rounds):
    """The oblivious order, skipping penalised EVs."""

    name = "bitmap"

    def __init__(self, n: int, rng: random.Random) -> None:
        super().__init__(n, rng)
        self.penalty = [0] * n

    def feedback(self, ev: int, kind: Feedback, now: float) -> None:
        if kind is Feedback.GOOD:
            return
        add = (
            BITMAP_ECN
            if kind is Feedback.ECN
            else BITMAP_NACK
            if kind is Feedback.NACK
            else BITMAP_MAX
        )
        ev &= self._mask
        self.penalty[ev] = min(BITMAP_MAX, self.penalty[ev] + add)

    def next(self, sent: int, cwnd_packets: int, now: float) -> int:
        penalty = self.penalty
        ev = self._current()
        if penalty[ev]:
            # the first EV skipped pays one point of its penalty; after a whole round of
            # penalised EVs the pick takes the one it stands on
            penalty[ev] -= 1
            for _ in range(self.n):
                self._advance()
                ev = self._current()
                if not penalty[ev]:
                    break
        self._advance()
        return ev


class Reps(Balancer):
    """Recycled Entropy Packet Spraying with its circular buffer and freezing."""

    name = "reps"

    def __init__(self, n: int, rng: random.Random) -> None:
        super().__init__(n, rng)
        #: the buffer: EVs acknowledged without a mark as written (the oldest overwritten when
        #: full), each still fresh (not reused) or not; the fresh ones are the newest written
        #: until a frozen turn reuses one out of order
        self._evs = [0] * REPS_BUFFER
        self._unused = [False] * REPS_BUFFER
        self._head = 0  #: the slot written next
        self._count = 0  #: slots written
        self._fresh = 0  #: fresh slots
        self._frozen_turn = 0  #: the slot a frozen pick takes next
        self.frozen_until: float | None = None
        self.explore = 0

    @property
    def fresh(self) -> list[int]:
        """The fresh EVs, the oldest first."""
        slots = ((self._head - k) % REPS_BUFFER for k in range(self._fresh, 0, -1))
        return [self._evs[i] for i in slots if self._unused[i]]

    def feedback(self, ev: int, kind: Feedback, now: float) -> None:
        if kind is Feedback.TIMEOUT and self.frozen_until is None and not self.explore:
            self.frozen_until = now + REPS_FREEZE
        if self.frozen_until is not None and now > self.frozen_until:
            self.frozen_until = None
            self._unused = [False] * REPS_BUFFER
            self._head = self._count = self._fresh = self._frozen_turn = 0
            self.explore = REPS_EXPLORE
        if kind is Feedback.GOOD:
            head = self._head
            if not self._unused[head]:
                self._fresh = min(self._fresh + 1, REPS_BUFFER)
            self._evs[head] = ev
            self._unused[head] = True
            self._head = (head + 1) % REPS_BUFFER
            self._count = min(self._count + 1, REPS_BUFFER)

    def next(self, sent: int, cwnd_packets: int, now: float) -> int:
        if self.explore:
            self.explore -= 1
            return self._rng.randrange(self.n)
        if self.frozen_until is not None:
            # frozen: the buffer's EVs in turn, fresh or not
            if not self._count:
                return self._rng.randrange(self.n)
            slot = self._frozen_turn
            self._frozen_turn = (slot + 1) % self._count
        elif self._fresh:
            slot = (self._head - self._fresh) % REPS_BUFFER  # the oldest fresh EV
        else:
            return self._rng.randrange(self.n)
        if self._unused[slot]:
            self._unused[slot] = False
            self._fresh -= 1
        return self._evs[slot]


class RepsLegacy(Balancer):
    """REPS as first published: every EV in turn for the first window, then the EVs
    acknowledged without a mark, in order, else a random EV."""

    name = "reps_legacy"

    def __init__(self, n: int, rng: random.Random) -> None:
        super().__init__(n, rng)
        self.good: collections.deque[int] = collections.deque()
        self._turn = 0

    def feedback(self, ev: int, kind: Feedback, now: float) -> None:
        if kind is Feedback.GOOD:
            self.good.append(ev)

    def recycled(self) -> int | None:
        """The oldest EV acknowledged without a mark and not reused yet (None: none)."""
        return self.good.popleft() if self.good else None

    def next(self, sent: int, cwnd_packets: int, now: float) -> int:
        if sent < min(cwnd_packets, self.n):
            self._turn = (self._turn + 1) % self.n
            return self._turn
        ev = self.recycled()
        return self._rng.randrange(self.n) if ev is None else ev


class Mixed(Balancer):
    """The legacy REPS list when it has an EV, else the bitmap (the reference's default)."""

    name = "mixed"

    def __init__(self, n: int, rng: random.Random) -> None:
        super().__init__(n, rng)
        self.bitmap = Bitmap(n, rng)
        self.reps = RepsLegacy(n, rng)

    def feedback(self, ev: int, kind: Feedback, now: float) -> None:
        self.bitmap.feedback(ev, kind, now)
        self.reps.feedback(ev, kind, now)

    def next(self, sent: int, cwnd_packets: int, now: float) -> int:
        ev = self.reps.recycled()
        return self.bitmap.next(sent, cwnd_packets, now) if ev is None else ev


#: the balancers by the names the reference's ``-load_balancing_algo`` gives them
BALANCERS: dict[str, type[Balancer]] = {
    cls.name: cls for cls in (Oblivious, Bitmap, Reps, RepsLegacy, Mixed)
}


def make_balancer(name: str, n: int, rng: random.Random) -> Balancer:
    """The balancer called ``name`` over ``n`` EVs."""
    try:
        cls = BALANCERS[name]
    except KeyError:
        raise ValueError(
            f"load balancer {name!r}: expected one of {', '.join(BALANCERS)}"
        ) from None
    return cls(n, rng)
