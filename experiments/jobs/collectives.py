"""Collectives and jobs, and the sans-IO state machine of one rank in one collective.

A :class:`Collective` is a kind and a size in nccl-tests' sense (``size`` bytes per rank: the
buffer all-reduced, the gathered output, the scattered input, or the all-to-all send buffer);
it runs over ``n`` ranks, each a host. A :class:`Job` is ``steps`` steps over a set of ranks,
each step a compute time followed by the collectives in order; a step ends when every rank has
finished every collective of the step.

How the kinds move their bytes, each message a WRITE_IMM whose immediate names the collective
and the step (:func:`imm_of`):

- ``all-reduce``: a ring, ``2(n-1)`` chained steps, reduce-scatter then all-gather; at step
  ``s`` rank ``r`` writes chunk ``(r - s) mod n`` (``size / n`` bytes) to rank ``r + 1``, and
  it sends step ``s + 1`` only when the immediate of step ``s`` from rank ``r - 1`` arrived
  (for the reduce-scatter half that is the chunk it must add its own to before passing it on);
- ``reduce-scatter`` and ``all-gather``: the same ring, ``n - 1`` steps;
- ``all-to-all``: every rank writes ``size / n`` bytes to every other rank at once.

Each step of a ring lands in its own slot of the receiver's region (``step x chunk``), so a
message in flight never overwrites one not yet consumed; :meth:`RankMachine.region_bytes` is
the region a rank registers.

:class:`RankMachine` does no I/O: :meth:`~RankMachine.start` and the ``on_*`` methods return
the :class:`Send` requests to post, and :attr:`~RankMachine.finished` says when the rank is
done (every message it expects arrived, every message it sent completed). A driver feeds it
completions: :mod:`experiments.jobs.sim` from the in-memory network's completion queues,
:class:`experiments.flows.collective.CollectiveFlows` from the agents' control sockets.

Bandwidths are nccl-tests': ``algbw = size / time`` and ``busbw = algbw x`` :func:`bus_factor`
(``2(n-1)/n`` for all-reduce, ``(n-1)/n`` for the others).
"""

from __future__ import annotations

from dataclasses import dataclass

KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")
#: command-line spellings (nccl-tests' binaries) of the kinds
ALIASES = {
    "allreduce": "all-reduce",
    "allgather": "all-gather",
    "reducescatter": "reduce-scatter",
    "alltoall": "all-to-all",
}
IMM_TAG_BITS = 16  # the immediate: collective tag (high 16 bits), step or source rank (low 16)


def bus_factor(kind: str, n: int) -> float:
    """nccl-tests' bus bandwidth factor of a collective over ``n`` ranks."""
    if kind not in KINDS:
        raise ValueError(f"collective {kind!r}: expected one of {', '.join(KINDS)}")
    if n < 2:
        return 0.0
    return 2 * (n - 1) / n if kind == "all-reduce" else (n - 1) / n


def imm_of(tag: int, index: int) -> int:
    """The immediate of message ``index`` (a ring step or the source rank) of collective ``tag``."""
    return ((tag & 0xFFFF) << IMM_TAG_BITS) | (index & 0xFFFF)


def split_imm(imm: int) -> tuple[int, int]:
    """(tag, index) of an immediate made by :func:`imm_of`."""
    return imm >> IMM_TAG_BITS, imm & 0xFFFF


@dataclass(frozen=True)
class Collective:
    """One collective: ``kind`` (:data:`KINDS`) of ``size`` bytes per rank (nccl-tests' size)."""

    kind: str
    size: int

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"collective {self.kind!r}: expected one of {', '.join(KINDS)}")
        if self.size < 1:
            raise ValueError(f"collective size {self.size}: expected at least 1 byte")

    def chunk(self, n: int) -> int:
        """Bytes of one message over ``n`` ranks (``size / n``, at least 1)."""
        return max(1, self.size // n)

    def messages(self, n: int) -> int:
        """Messages each rank sends (and receives): ring steps, or ``n - 1`` peers."""
        return 2 * (n - 1) if self.kind == "all-reduce" else n - 1

    def as_dict(self) -> dict[str, object]:
        """The scenario file's form."""
        return {"kind": self.kind, "size": self.size}


@dataclass(frozen=True)
class Job:
    """``steps`` steps over ``ranks`` (hosts), each ``compute_s`` of compute then the
    collectives in order, the first starting at ``start_s``."""

    ranks: tuple[str, ...]
    collectives: tuple[Collective, ...]
    steps: int = 10
    compute_s: float = 0.0
    start_s: float = 0.0

    def as_dict(self) -> dict[str, object]:
        """The scenario file's form."""
        return {
            "ranks": list(self.ranks),
            "steps": self.steps,
            "compute_s": self.compute_s,
            "start_s": self.start_s,
            "collectives": [c.as_dict() for c in self.collectives],
        }


@dataclass(frozen=True)
class Send:
    """A WRITE_IMM to post: ``size`` bytes to rank ``dst`` at ``offset`` of its region."""

    dst: int
    offset: int
    size: int
    imm: int


class RankMachine:
    """Rank ``rank`` of ``n`` in one collective (``tag`` goes in every immediate)."""

    def __init__(self, collective: Collective, rank: int, n: int, tag: int = 0) -> None:
        if not 0 <= rank < n or n < 2:
            raise ValueError(f"rank {rank} of {n}: expected 0 <= rank < n and n >= 2")
        self.collective = collective
        self.rank = rank
        self.n = n
        self.tag = tag & 0xFFFF
        self.chunk = collective.chunk(n)
        self.count = collective.messages(n)
        self.ring = collective.kind != "all-to-all"
        self.received: set[int] = set()  # ring steps, or source ranks, whose immediate arrived
        self.sent_done = 0  # our messages that completed
        self.next_step = 0  # ring: the next step to send

    @property
    def right(self) -> int:
        """The ring neighbour this rank writes to."""
        return (self.rank + 1) % self.n

    @property
    def left(self) -> int:
        """The ring neighbour this rank receives from."""
        return (self.rank - 1) % self.n

    def region_bytes(self) -> int:
        """Bytes of the region this rank receives into (one slot per message)."""
        return self.chunk * (self.count if self.ring else self.n)

    def start(self) -> list[Send]:
        """The messages to post when the collective starts."""
        if self.ring:
            return self._ring_sends()
        imm = imm_of(self.tag, self.rank)
        others = [(self.rank + k) % self.n for k in range(1, self.n)]
        return [Send(dst, self.rank * self.chunk, self.chunk, imm) for dst in others]

    def _ring_sends(self) -> list[Send]:
        out: list[Send] = []
        # step 0 goes at once; step s + 1 once step s arrived from the left
        while self.next_step < self.count and (
            self.next_step == 0 or self.next_step - 1 in self.received
        ):
            s = self.next_step
            out.append(Send(self.right, s * self.chunk, self.chunk, imm_of(self.tag, s)))
            self.next_step += 1
        return out

    def on_received(self, src: int, imm: int) -> list[Send]:
        """A WRITE_IMM from rank ``src`` arrived with immediate ``imm``; what to post next."""
        tag, index = split_imm(imm)
        expected = self.left if self.ring else index
        if tag != self.tag or src != expected or index >= (self.count if self.ring else self.n):
            raise ValueError(
                f"rank {self.rank}: unexpected immediate {imm:#x} from rank {src} "
                f"(collective tag {self.tag})"
            )
        self.received.add(index)
        return self._ring_sends() if self.ring else []

    def on_sent(self, imm: int) -> list[Send]:
        """Our WRITE_IMM with immediate ``imm`` completed (every byte acknowledged)."""
        if split_imm(imm)[0] != self.tag or self.sent_done >= self.count:
            raise ValueError(f"rank {self.rank}: unexpected completion of immediate {imm:#x}")
        self.sent_done += 1
        return []

    @property
    def finished(self) -> bool:
        """Every expected message arrived and every message sent completed."""
        return len(self.received) == self.count and self.sent_done == self.count


def machines(collective: Collective, n: int, tag: int = 0) -> list[RankMachine]:
    """One machine per rank of a collective over ``n`` ranks."""
    return [RankMachine(collective, r, n, tag) for r in range(n)]


def parse_kind(text: str) -> str:
    """A collective kind from its name or nccl-tests' spelling (``allreduce``)."""
    kind = ALIASES.get(text.replace("_", "").lower(), text)
    if kind not in KINDS:
        raise ValueError(
            f"collective {text!r}: expected one of {', '.join(KINDS)} (or {', '.join(ALIASES)})"
        )
    return kind


__all__ = [
    "ALIASES",
    "KINDS",
    "Collective",
    "Job",
    "RankMachine",
    "Send",
    "bus_factor",
    "imm_of",
    "machines",
    "parse_kind",
    "split_imm",
]
