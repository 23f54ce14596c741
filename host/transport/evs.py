"""EV profiles and the EV table of a QP: which entropy values exist, their paths and states.

An EV (entropy value) names one way through the fabric. Here every EV is bound to a
``topologies.Path`` (the agent passes the paths in; nothing here computes an address), and the
sender picks a different GOOD EV for every packet (round robin from a random start).

Profiles, as in the OCP MRC API:

- :class:`GeneratedEvProfile` -- ``count`` EVs spread evenly over the paths; the value is
  ``plane << 28 | (spine + 1) << 20 | n`` (``n`` = 1, 2, ... unique in the QP);
- :class:`ExplicitEvProfile` -- given 32-bit EVs, each mapped to a path index;
- :class:`Srv6EvProfile` -- one EV per path, the EV *is* the path's 128-bit uSID carrier (its
  32-bit wire form is the CRC-32 of the carrier).

States: GOOD (in use), ASSUMED_BAD (lost a packet: not used, probed), DENIED (operator: not used,
not probed), UNKNOWN (not used, probed; GOOD on a probe reply).
"""

from __future__ import annotations

import enum
import random
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from topologies import Path


class EvState(str, enum.Enum):
    """The state of one EV."""

    GOOD = "good"
    ASSUMED_BAD = "assumed_bad"
    DENIED = "denied"
    UNKNOWN = "unknown"


class EvProfileError(ValueError):
    """An EV profile that cannot be applied to the given paths."""


@dataclass(frozen=True)
class GeneratedEvProfile:
    """``count`` EVs spread evenly over the paths (None: the context's ``ev_count``)."""

    count: int | None = None


@dataclass(frozen=True)
class ExplicitEvProfile:
    """Exactly these EVs: ``(ev, path_index)`` pairs, EVs unique 32-bit values."""

    evs: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class Srv6EvProfile:
    """One EV per path, whose value is the path's uSID carrier."""


EvProfile = GeneratedEvProfile | ExplicitEvProfile | Srv6EvProfile


class PathLoad:
    """Congestion seen on one path, shared by all its EVs (congestion-steered spraying).

    ``weight`` is the path's share of the spraying cycle relative to an unloaded path (1.0):
    a pick of one of its EVs is taken when the path's ``credit`` (increased by ``weight`` at each
    pick) reaches one, else the pick moves on to the next EV of the cycle.
    """

    __slots__ = ("marked_until", "weight", "credit", "hold_until", "srtt", "rttvar", "evs", "rr",
                 "acked_tsn")  # fmt: skip

    def __init__(self) -> None:
        self.marked_until = 0.0  #: "halve" steering: an ACK echoed a CE mark; lighten until then
        self.weight = 1.0  #: "weights" steering: relative share, in [path_weight_min, 1]
        self.credit = 0.0  #: accumulated share of skipped picks
        self.hold_until = 0.0  #: no further decrease before this time (one per RTT)
        self.srtt = 0.0  #: smoothed RTT of the ACKs echoing this path's EVs (0: no sample yet)
        self.rttvar = 0.0  #: its mean deviation (RFC 6298)
        self.evs: list[EvSlot] = []  #: the path's EVs
        self.rr = 0  #: position in ``evs`` (recycled spraying takes them in turn)
        #: send order (QP send sequence number) of the latest packet acknowledged on this path
        self.acked_tsn = -1

    def next_ev(self) -> EvSlot | None:
        """The path's next GOOD EV in turn (None when none is GOOD)."""
        evs = self.evs
        n = len(evs)
        for _ in range(n):
            self.rr += 1
            slot = evs[self.rr % n]
            if slot.state is EvState.GOOD:
                return slot
        return None

    def sample(self, rtt: float) -> None:
        """Fold an RTT sample of this path into ``srtt`` and ``rttvar``."""
        if not self.srtt:
            self.srtt = rtt
            self.rttvar = rtt / 2
        else:
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - rtt)
            self.srtt = 0.875 * self.srtt + 0.125 * rtt


class EvSlot:
    """One EV of a QP and what the sender needs to use it."""

    __slots__ = ("index", "ev", "wire", "path_index", "path", "state", "since", "prefix",
                 "head", "mid", "plane", "spine_hint", "load")  # fmt: skip

    def __init__(
        self, index: int, ev: int, wire: int, path_index: int, path: Path, load: PathLoad
    ) -> None:
        self.index = index
        self.ev = ev  #: the EV value (up to 128 bits for the SRv6 profile)
        self.wire = wire  #: the 32-bit form carried in packets
        self.path_index = path_index
        self.path = path
        self.state = EvState.GOOD
        self.since = 0.0
        self.prefix = b""  #: the data frame prefix (filled by the QP)
        self.head = b""  #: the prefix up to the IPv6 payload length
        self.mid = b""  #: the prefix after the IPv6 payload length
        self.plane = path.plane
        self.spine_hint = 0xFF if path.spine is None else path.spine
        self.load = load


@dataclass(frozen=True)
class EvInfo:
    """What the host controller sees of one EV."""

    ev: int
    wire: int
    path: str
    plane: int
    state: EvState
    since: float


def _generated(paths: Sequence[Path], count: int) -> list[tuple[int, int, int]]:
    out = []
    for n in range(count):
        index = n % len(paths)
        path = paths[index]
        spine = 0 if path.spine is None else path.spine + 1
        ev = (path.plane << 28) | (spine << 20) | (n + 1)
        out.append((ev, ev, index))
    return out


def build_slots(paths: Sequence[Path], profile: EvProfile, default_count: int) -> list[EvSlot]:
    """The EV slots of a profile applied to ``paths`` (ordered: planes interleaved)."""
    if not paths:
        raise EvProfileError("no paths given: a QP needs at least one path to its peer")
    triples: list[tuple[int, int, int]]
    if isinstance(profile, GeneratedEvProfile):
        count = default_count if profile.count is None else profile.count
        if not 1 <= count < 1 << 20:
            raise EvProfileError(f"generated EV count {count}: expected 1..1048575")
        triples = _generated(paths, count)
    elif isinstance(profile, ExplicitEvProfile):
        if not profile.evs:
            raise EvProfileError("explicit EV profile with no EVs: expected (ev, path_index) pairs")
        triples = []
        for ev, index in profile.evs:
            if not 0 <= ev < 1 << 32:
                raise EvProfileError(f"EV {ev:#x}: expected a 32-bit value")
            if not 0 <= index < len(paths):
                raise EvProfileError(f"EV {ev:#x} on path {index}: expected 0..{len(paths) - 1}")
            triples.append((ev, ev, index))
    elif isinstance(profile, Srv6EvProfile):
        triples = []
        for index, path in enumerate(paths):
            ev = int(path.carrier)
            triples.append((ev, zlib.crc32(path.carrier.packed), index))
    else:
        raise EvProfileError(f"EV profile {profile!r}: expected Generated, Explicit or Srv6")
    wires = [w for _, w, _ in triples]
    if len(set(wires)) != len(wires):
        raise EvProfileError("EV profile gives two EVs the same 32-bit value: expected unique EVs")
    loads = [PathLoad() for _ in paths]
    slots = [
        EvSlot(i, ev, w, idx, paths[idx], loads[idx]) for i, (ev, w, idx) in enumerate(triples)
    ]
    for slot in slots:
        slot.load.evs.append(slot)
    return slots


class EvTable:
    """The EVs of one QP: states and the spraying order."""

    def __init__(self, slots: list[EvSlot], rng: random.Random) -> None:
        self.slots = slots
        self.by_wire = {s.wire: s for s in slots}
        self._by_ev = {s.ev: s for s in slots}
        self._rng = rng
        self._good: list[EvSlot] = []
        self._good_loads: list[PathLoad] = []  #: paths with a GOOD EV
        self.order: list[EvSlot] = []  #: the spraying cycle over GOOD EVs
        self.rr = rng.randrange(1 << 30)  #: position in the cycle (random start)
        self._fixed: EvSlot | None = None
        #: the per-path congestion state, one object per path (shared by the path's EVs)
        self.loads: list[PathLoad] = list({id(s.load): s.load for s in slots}.values())
        self._refresh()

    def _refresh(self) -> None:
        self._good = [s for s in self.slots if s.state is EvState.GOOD]
        self._good_loads = list({id(s.load): s.load for s in self._good}.values())
        planes: dict[int, list[EvSlot]] = {}
        for s in self._good:
            planes.setdefault(s.plane, []).append(s)
        lists = [planes[p] for p in sorted(planes)]
        # one spraying cycle: planes in turn, each plane's GOOD EVs in turn, so every plane
        # (every NIC) carries the same share however many of its EVs are GOOD
        longest = max((len(x) for x in lists), default=0)
        self.order = [x[i % len(x)] for i in range(longest) for x in lists]

    def fastest_rtt(self) -> float:
        """The smallest smoothed RTT of the paths in use (0.0 when none has a sample)."""
        best = 0.0
        for load in self._good_loads:
            rtt = load.srtt
            if rtt and (not best or rtt < best):
                best = rtt
        return best

    def normalise_weights(self) -> None:
        """Scale the weights of the paths in use so that the largest is 1 (they are relative)."""
        top = max((load.weight for load in self._good_loads), default=1.0)
        if 0.0 < top < 1.0:
            for load in self.loads:
                load.weight = min(1.0, load.weight / top)

    def pin(self, slot: EvSlot) -> None:
        """Use only ``slot`` from now on, whatever its state (single-path and ECMP policies)."""
        self._fixed = slot

    @property
    def pinned(self) -> EvSlot | None:
        """The one EV used, when pinned."""
        return self._fixed

    def good_count(self) -> int:
        """Number of GOOD EVs."""
        return len(self._good)

    def next(self) -> EvSlot | None:
        """The EV for the next packet (None if none is GOOD): the next one of the cycle."""
        if self._fixed is not None:
            return self._fixed
        order = self.order
        if not order:
            return None
        self.rr = rr = self.rr + 1
        return order[rr % len(order)]

    def next_other(self, avoid: EvSlot) -> EvSlot | None:
        """Like :meth:`next` but not ``avoid`` when another GOOD EV exists (retransmissions)."""
        slot = self.next()
        if slot is avoid and self._fixed is None and len(self._good) > 1:
            slot = self.next()
        return slot

    def slot(self, ev: int) -> EvSlot:
        """The slot of EV value ``ev``."""
        try:
            return self._by_ev[ev]
        except KeyError:
            raise KeyError(f"EV {ev:#x} is not in this QP's EV set") from None

    def state(self, ev: int) -> EvState:
        """The state of EV ``ev``."""
        return self.slot(ev).state

    def set_state(self, slot: EvSlot, new: EvState, now: float) -> EvState | None:
        """Change a slot's state; returns the old state (None when unchanged)."""
        old = slot.state
        if old is new:
            return None
        slot.state = new
        slot.since = now
        self._refresh()
        return old

    def evs(self) -> list[EvInfo]:
        """Every EV with its path and state."""
        return [EvInfo(s.ev, s.wire, s.path.label, s.plane, s.state, s.since) for s in self.slots]

    def counts(self) -> dict[str, int]:
        """Number of EVs in each state."""
        out = {state.value: 0 for state in EvState}
        for s in self.slots:
            out[s.state.value] += 1
        return out
