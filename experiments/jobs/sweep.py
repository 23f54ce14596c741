"""A collective's size sweep and its table in nccl-tests' format.

A sweep is a job whose step holds the collective once per size (``--sizes 1MiB:64MiB``: each
size twice the one before, as nccl-tests' ``-b 1M -e 64M -f 2``), run ``iters`` steps with no
compute; a size's time is the mean over the steps of its collective's time. The table has
nccl-tests' columns (size in bytes, count in float elements, type, redop, root, time in us,
algbw and busbw in GB/s) and its average bus bandwidth line; :func:`sweep_rows` gives the rows
for the CSV and JSON files too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from experiments.jobs.collectives import Job, bus_factor
from experiments.metrics import StepRecord

ELEMENT = 4  # bytes of a float, nccl-tests' default type
REDUCING = ("all-reduce", "reduce-scatter")


def parse_sizes(text: str, parse_size: Any) -> list[int]:
    """``MIN:MAX[:FACTOR]`` (FACTOR default 2) or ``A,B,C``; ``parse_size`` reads one size."""
    if ":" in text:
        parts = text.split(":")
        if len(parts) not in (2, 3):
            raise ValueError(f"sizes {text!r}: expected MIN:MAX[:FACTOR] or a comma list")
        low, high = parse_size(parts[0]), parse_size(parts[1])
        factor = int(parts[2]) if len(parts) == 3 else 2
        if low < 1 or high < low or factor < 2:
            raise ValueError(f"sizes {text!r}: expected 1 <= MIN <= MAX and FACTOR >= 2")
        sizes = [low]
        while sizes[-1] * factor <= high:
            sizes.append(sizes[-1] * factor)
        return sizes
    return [parse_size(part) for part in text.split(",") if part.strip()]


@dataclass(frozen=True)
class SweepRow:
    """One size of a sweep (a line of the table, CSV and JSON)."""

    size: int
    count: int
    type: str
    redop: str
    root: int
    time_us: float | None
    algbw: float | None  # GB/s
    busbw: float | None  # GB/s
    iters: int  # the iterations that finished


def sweep_rows(job: Job, steps: Sequence[StepRecord]) -> list[SweepRow]:
    """Per size: the mean time over the steps and nccl-tests' bandwidths."""
    n = len(job.ranks)
    rows = []
    for i, c in enumerate(job.collectives):
        times = [
            rec.end - rec.start
            for s in steps
            if i < len(s.collectives)
            for rec in [s.collectives[i]]
            if rec.end is not None
        ]
        mean = sum(times) / len(times) if times else None
        algbw = c.size / mean / 1e9 if mean else None
        per_rank = c.kind != "all-reduce"  # nccl-tests counts a rank's share for the others
        rows.append(
            SweepRow(
                size=c.size,
                count=c.size // ELEMENT // (n if per_rank else 1),
                type="float",
                redop="sum" if c.kind in REDUCING else "none",
                root=-1,
                time_us=mean * 1e6 if mean is not None else None,
                algbw=algbw,
                busbw=algbw * bus_factor(c.kind, n) if algbw is not None else None,
                iters=len(times),
            )
        )
    return rows


def _num(value: float | None, width: int, digits: int) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.{digits}f}"


def format_table(kind: str, ranks: int, rows: Sequence[SweepRow], note: str = "") -> str:
    """The sweep as nccl-tests prints it (``note``: extra comment lines after the header)."""
    lines = [
        f"# {kind}: {ranks} ranks, one per host" + (f"\n# {note}" if note else ""),
        "#",
        f"# {'':>66}out-of-place",
        f"# {'size':>10} {'count':>12} {'type':>6} {'redop':>6} {'root':>6} "
        f"{'time':>10} {'algbw':>8} {'busbw':>8}",
        f"# {'(B)':>10} {'(elements)':>12} {'':>6} {'':>6} {'':>6} "
        f"{'(us)':>10} {'(GB/s)':>8} {'(GB/s)':>8}",
    ]
    for r in rows:
        lines.append(
            f"  {r.size:>10} {r.count:>12} {r.type:>6} {r.redop:>6} {r.root:>6} "
            f"{_num(r.time_us, 10, 1)} {_num(r.algbw, 8, 4)} {_num(r.busbw, 8, 4)}"
        )
    bus = [r.busbw for r in rows if r.busbw is not None]
    lines.append(f"# Avg bus bandwidth    : {sum(bus) / len(bus) if bus else 0.0:.4f} ")
    return "\n".join(lines) + "\n"


def as_json(kind: str, ranks: Sequence[str], rows: Sequence[SweepRow]) -> dict[str, Any]:
    """The sweep's JSON document."""
    return {"collective": kind, "ranks": list(ranks), "rows": [asdict(r) for r in rows]}


CSV_COLUMNS = [f.name for f in fields(SweepRow)]


__all__ = [
    "CSV_COLUMNS",
    "SweepRow",
    "as_json",
    "format_table",
    "parse_sizes",
    "sweep_rows",
]
