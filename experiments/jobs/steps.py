"""A job's step records and their summary: step times, slowdown against a baseline, faults.

Drivers record one :class:`experiments.metrics.StepRecord` per step (its times, its collectives
with nccl-tests' bandwidths, the agents' counters over the step); :func:`annotate` adds what
the run's other records say about the step (EVs retired, faults that overlapped it) before
``steps.jsonl`` is written, and :func:`summarise_job` gives a transport's :class:`JobSummary`:

- step time mean / p50 / p99 / max (steps that never finished are counted apart);
- against the baseline (the same job and seed, run without faults when the scenario says
  ``baseline: true``): the mean step slowdown (``mean / baseline mean - 1``) and p99 over the
  baseline's p99;
- per fault target (a link or a switch), the steps it overlapped, and the steps after its last
  overlap until a step is back within :data:`RECOVERED_WITHIN` of the baseline's median step
  (0: the next step already was).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from experiments.jobs.collectives import Collective, bus_factor
from experiments.metrics import CollectiveRecord, FaultMark, StepRecord, percentile

RECOVERED_WITHIN = 0.01  # a step within 1 % of the baseline's median step time is "back"
OPENS = {"down": "up", "kill": "start"}  # a fault action and the action that ends it


def collective_record(
    collective: Collective, ranks: int, start: float, end: float | None
) -> CollectiveRecord:
    """A collective's record with its algbw and busbw (GB/s) when it finished."""
    if end is None or end <= start:
        return CollectiveRecord(collective.kind, collective.size, ranks, start, end)
    algbw = collective.size / (end - start) / 1e9
    busbw = algbw * bus_factor(collective.kind, ranks)
    return CollectiveRecord(collective.kind, collective.size, ranks, start, end, algbw, busbw)


def transport_counters(core: Mapping[str, Any]) -> dict[str, float]:
    """The step record's counters from a host context's statistics (``Context.stats()``, the
    agent's ``stats["core"]``): retransmissions, trims, NACKs and RTOs."""
    retransmits = core.get("retransmits", {})
    return {
        "retransmissions": float(sum(retransmits.values()) if isinstance(retransmits, dict) else 0),
        "trims": float(core.get("trims_seen", 0)),
        "nacks": float(core.get("nacks_received", 0)),
        "rtos": float(core.get("rtos", 0)),
    }


def add_counters(step: StepRecord, before: Mapping[str, float], after: Mapping[str, float]) -> None:
    """Add what the counters moved between ``before`` and ``after`` to the step."""
    for key in ("retransmissions", "trims", "nacks", "rtos"):
        moved = after.get(key, 0.0) - before.get(key, 0.0)
        setattr(step, key, getattr(step, key) + moved)


def fault_intervals(marks: Iterable[FaultMark], end: float) -> list[tuple[str, float, float]]:
    """(target, from, to) of every fault: a link down until up, a switch killed until started
    (until ``end`` when it never came back)."""
    open_at: dict[str, float] = {}
    out: list[tuple[str, float, float]] = []
    for mark in sorted(marks, key=lambda m: m.t):
        if mark.action in OPENS:
            open_at.setdefault(mark.target, mark.t)
        elif mark.target in open_at:
            out.append((mark.target, open_at.pop(mark.target), mark.t))
    out += [(target, t, end) for target, t in open_at.items()]
    return sorted(out, key=lambda f: f[1])


def annotate(
    steps: Sequence[StepRecord],
    marks: Iterable[FaultMark],
    transitions: Iterable[Mapping[str, object]],
) -> None:
    """Fill each step's EVs retired (agents' transitions to ASSUMED_BAD during it) and the
    faults that overlapped it."""
    if not steps:
        return
    last = max((s.end if s.end is not None else s.start) for s in steps)
    intervals = fault_intervals(marks, last)
    retired = [
        float(str(tr["t"])) for tr in transitions if tr.get("new") == "assumed_bad" and "t" in tr
    ]
    for step in steps:
        end = step.end if step.end is not None else last
        step.evs_retired = sum(1 for t in retired if step.start <= t < end)
        step.faults = sorted({target for target, a, b in intervals if a < end and b > step.start})


@dataclass(frozen=True)
class JobSummary:
    """One transport's job figures (``metrics.json``'s ``jobs`` entry, a row of the steps table)."""

    steps: int
    finished: int  # steps that ended (the others ran out of time)
    step_mean_s: float | None
    step_p50_s: float | None
    step_p99_s: float | None
    step_max_s: float | None
    busbw_mean: float | None  # GB/s, over every collective that finished
    baseline_mean_s: float | None
    baseline_p99_s: float | None
    slowdown: float | None  # mean / baseline mean - 1
    p99_over_baseline: float | None
    fault_steps: dict[str, list[int]]  # fault target -> steps it overlapped
    recovery_steps: dict[str, int | None]  # fault target -> steps until back within 1 %

    def as_json(self) -> dict[str, Any]:
        """The ``metrics.json`` entry."""
        return asdict(self)


def _times(steps: Sequence[StepRecord]) -> list[float]:
    return [t for t in (s.time for s in steps) if t is not None]


def summarise_job(
    steps: Sequence[StepRecord], baseline: Sequence[StepRecord] | None = None
) -> JobSummary:
    """The figures of one transport's steps, against its baseline's steps when given."""
    times = _times(steps)
    base = _times(baseline or [])
    mean = sum(times) / len(times) if times else None
    p99 = percentile(times, 0.99)
    base_mean = sum(base) / len(base) if base else None
    base_p99 = percentile(base, 0.99)
    base_p50 = percentile(base, 0.5)
    bw = [c.busbw for s in steps for c in s.collectives if c.busbw is not None]
    touched: dict[str, list[int]] = {}
    for step in steps:
        for target in step.faults:
            touched.setdefault(target, []).append(step.step)
    recovery: dict[str, int | None] = {}
    for target, hit in touched.items():
        after = [s for s in steps if s.step > max(hit)]
        recovery[target] = None
        if base_p50 is None:
            continue
        for k, step in enumerate(after):
            if step.time is not None and step.time <= base_p50 * (1 + RECOVERED_WITHIN):
                recovery[target] = k
                break
    return JobSummary(
        steps=len(steps),
        finished=len(times),
        step_mean_s=mean,
        step_p50_s=percentile(times, 0.5),
        step_p99_s=p99,
        step_max_s=max(times) if times else None,
        busbw_mean=sum(bw) / len(bw) if bw else None,
        baseline_mean_s=base_mean,
        baseline_p99_s=base_p99,
        slowdown=mean / base_mean - 1 if mean is not None and base_mean else None,
        p99_over_baseline=p99 / base_p99 if p99 is not None and base_p99 else None,
        fault_steps=touched,
        recovery_steps=recovery,
    )


BASELINE_SUFFIX = "-baseline"  # the baseline run of transport T is named T-baseline

JOB_COLUMNS = [
    "transport",
    "steps done",
    "step mean",
    "p50",
    "p99",
    "max",
    "baseline mean",
    "mean slowdown",
    "p99 / baseline p99",
    "busbw (GB/s)",
    "steps hit by faults",
    "steps to recover (max)",
]


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f} ms"


def _recovered(steps: Mapping[str, int | None]) -> str:
    """The slowest recovery over the faults: ``3``, ``never`` (within the run), ``-`` (none)."""
    if not steps:
        return "-"
    if any(n is None for n in steps.values()):
        return "never"
    return str(max(n for n in steps.values() if n is not None))


def job_rows(summaries: Mapping[str, JobSummary]) -> list[list[str]]:
    """Rows of the steps table, one per transport (baselines included)."""
    rows = []
    for name, s in summaries.items():
        hit = sorted({n for steps in s.fault_steps.values() for n in steps})
        rows.append(
            [
                name,
                f"{s.finished}/{s.steps}",
                _ms(s.step_mean_s),
                _ms(s.step_p50_s),
                _ms(s.step_p99_s),
                _ms(s.step_max_s),
                _ms(s.baseline_mean_s),
                "-" if s.slowdown is None else f"{s.slowdown * 100:+.1f} %",
                "-" if s.p99_over_baseline is None else f"{s.p99_over_baseline:.2f}",
                "-" if s.busbw_mean is None else f"{s.busbw_mean:.4f}",
                str(len(hit)),
                _recovered(s.recovery_steps),
            ]
        )
    return rows


def summarise_jobs(steps: Mapping[str, Sequence[StepRecord]]) -> dict[str, JobSummary]:
    """Every transport's summary; ``T`` is compared with ``T-baseline`` when that ran."""
    return {
        name: summarise_job(records, steps.get(name + BASELINE_SUFFIX))
        for name, records in steps.items()
        if records
    }


def markdown_table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A markdown table's lines."""
    return [
        "| " + " | ".join(columns) + " |",
        "|" + "|".join("---" for _ in columns) + "|",
        *("| " + " | ".join(row) + " |" for row in rows),
    ]


__all__ = [
    "BASELINE_SUFFIX",
    "JOB_COLUMNS",
    "RECOVERED_WITHIN",
    "JobSummary",
    "add_counters",
    "annotate",
    "collective_record",
    "fault_intervals",
    "job_rows",
    "markdown_table",
    "summarise_job",
    "summarise_jobs",
    "transport_counters",
]
