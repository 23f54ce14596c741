"""Fidelity of an emulated run: did every switch and agent keep up, interval by interval?

Time dilation lets a slow machine stand in for a fast fabric only while the machine keeps up.
Once a switch or an agent falls behind, a run measures the emulator instead of MRC. So every
phase of a run records, per sampling interval (:class:`FidelitySample`, ``fidelity.csv``):

- the CPU of every switch and agent process (``/proc/PID/stat``, in cores) and of its busiest
  thread (``/proc/PID/task/*/stat``: BMv2 and the switch model forward on one thread each),
  and how busy the whole machine was (``/proc/stat``, a fraction of all its cores);
- the agents' *pacing lag* (a frame that waited for the wire left later than its turn) and
  *loop scheduling gap* (the event loop woke later than it asked to), from their ``fidelity``
  control command;
- the switch model's *service lag* (a shaped queue that was due was served later) and
  scheduling gap (its stats writer woke later than asked), from the file each
  ``mrc-switch --stats-file`` rewrites. BMv2 writes no such file: its CPU figures stand alone.

:func:`judge` turns the samples of one phase into a :class:`Verdict`: "faithful", or
"CPU-bound from t=1.2 s (switch t1-p0-s0 at 98 % of a core)". An interval is *behind* when a
figure crosses its :class:`Thresholds` (lags in frame times at the emulated link rate); a phase
is unfaithful from the first run of :attr:`Thresholds.min_intervals` behind intervals. The
thresholds and how they were calibrated are in ``docs/experiments.md``.

:class:`FidelitySampler` is the run's :class:`experiments.runner.PhaseObserver` that takes the
samples. Everything else here is a pure function of recorded data (``mrc-testbed report``
judges again what the run recorded).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import threading

    from experiments.testbed import Testbed

FAITHFUL = "faithful"
FIDELITY_COLUMNS = ("time_s", "kind", "name", "cpu", "thread_cpu", "lag_s", "gap_s")
AGENT_TIMEOUT = 1.0  # seconds an agent may take to answer the fidelity request


@dataclass(frozen=True)
class FidelitySample:
    """What one process (or the machine) did over the sampling interval that ended at ``t``.

    ``kind`` is ``switch``, ``agent`` or ``machine``. ``cpu`` is in cores (1.0: one core busy
    all the interval); ``thread_cpu`` is the busiest thread's share of a core. For the machine
    both are the fraction of all its cores that were busy. ``lag_s`` is a switch's service lag
    or an agent's pacing lag, ``gap_s`` an agent's loop scheduling gap: the largest of the
    interval, in seconds (0: none, or not measured).
    """

    t: float
    kind: str
    name: str
    cpu: float
    thread_cpu: float
    lag_s: float = 0.0
    gap_s: float = 0.0

    def row(self) -> list[object]:
        """The ``fidelity.csv`` columns after ``transport``."""
        return [
            f"{self.t:.4f}", self.kind, self.name, f"{self.cpu:.3f}", f"{self.thread_cpu:.3f}",
            f"{self.lag_s:.6f}", f"{self.gap_s:.6f}",
        ]  # fmt: skip

    @classmethod
    def from_row(cls, row: Mapping[str, str]) -> FidelitySample:
        """Read a ``fidelity.csv`` row back."""
        return cls(
            float(row["time_s"]), row["kind"], row["name"], float(row["cpu"]),
            float(row["thread_cpu"]), float(row["lag_s"]), float(row["gap_s"]),
        )  # fmt: skip


@dataclass(frozen=True)
class Thresholds:
    """Where a sampling interval counts as behind (calibrated: ``docs/experiments.md``)."""

    #: a process whose busiest thread used this share of a core
    thread_cpu: float = 0.9
    #: the machine's cores this busy (every process waits for a core)
    machine_cpu: float = 0.95
    #: pacing or service lag, in full-frame times at the emulated link rate
    lag_frames: float = 4.0
    #: a loop scheduling gap, in full-frame times at the emulated link rate
    gap_frames: float = 8.0
    #: behind intervals in a row that make a phase unfaithful
    min_intervals: int = 2


THRESHOLDS = Thresholds()


@dataclass(frozen=True)
class Verdict:
    """The fidelity of one phase: its verdict, when it went wrong, the behind intervals
    (start, end in seconds from the phase start) and the peak figures of the whole phase."""

    faithful: bool
    text: str
    since_s: float | None = None
    intervals: tuple[tuple[float, float], ...] = ()
    peaks: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        """The ``fidelity`` entry of a transport in ``metrics.json``."""
        return {
            "verdict": self.text,
            "faithful": self.faithful,
            "since_s": self.since_s,
            "intervals": [list(i) for i in self.intervals],
            **self.peaks,
        }


def _percent(value: float) -> str:
    return f"{value * 100:.0f} %"


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def behind(sample: FidelitySample, frame_time: float, limits: Thresholds) -> str | None:
    """Why ``sample`` shows its process (or the machine) behind, or None when it kept up."""
    who = sample.name if sample.kind == "machine" else f"{sample.kind} {sample.name}"
    if sample.kind == "machine":
        if sample.cpu >= limits.machine_cpu:
            return f"the machine at {_percent(sample.cpu)} of all its cores"
        return None
    if sample.thread_cpu >= limits.thread_cpu:
        return f"{who} at {_percent(sample.thread_cpu)} of a core"
    if sample.lag_s >= limits.lag_frames * frame_time:
        what = "served its queues" if sample.kind == "switch" else "paced frames"
        return f"{who} {what} {_ms(sample.lag_s)} late"
    if sample.gap_s >= limits.gap_frames * frame_time:
        return f"{who} woke {_ms(sample.gap_s)} late"
    return None


def judge(
    samples: Sequence[FidelitySample], frame_time: float, limits: Thresholds = THRESHOLDS
) -> Verdict:
    """The verdict on one phase from its samples (``frame_time``: a full frame's time at the
    emulated link rate, the unit of the lag thresholds)."""
    if not samples:
        return Verdict(True, "not measured")
    times = sorted({s.t for s in samples})
    reasons: dict[float, list[tuple[float, str]]] = {}
    for s in samples:
        why = behind(s, frame_time, limits)
        if why is not None:
            # the worst offender first: by its CPU, then by its lag in frames
            weight = max(s.thread_cpu, s.cpu if s.kind == "machine" else 0.0)
            weight += (s.lag_s + s.gap_s) / frame_time if frame_time else 0.0
            reasons.setdefault(s.t, []).append((weight, why))
    spans: list[list[float]] = []  # runs of behind intervals: start, end, count
    previous = 0.0
    for t in times:
        if t in reasons:
            if spans and spans[-1][1] == previous:
                spans[-1][1] = t
                spans[-1][2] += 1
            else:
                spans.append([previous, t, 1])
        previous = t
    peaks = _peaks(samples)
    long_spans = [s for s in spans if s[2] >= limits.min_intervals]
    if not long_spans:
        return Verdict(True, FAITHFUL, peaks=peaks)
    start, end, _ = long_spans[0]
    first = next(t for t in times if t > start)
    why = max(reasons[first])[1]
    return Verdict(
        False,
        f"CPU-bound from t={start:.2f} s ({why})",
        since_s=start,
        intervals=tuple((s[0], s[1]) for s in long_spans),
        peaks=peaks,
    )


def _peaks(samples: Iterable[FidelitySample]) -> dict[str, Any]:
    """Whole-phase figures: per process its mean and peak CPU (cores), the peak of its busiest
    thread; the largest pacing, service lag and loop gap; the machine's peak."""
    cpu: dict[str, list[float]] = {}
    thread: dict[str, float] = {}
    lags = {"pacing_lag_max_s": 0.0, "service_lag_max_s": 0.0, "loop_gap_max_s": 0.0}
    machine = 0.0
    for s in samples:
        if s.kind == "machine":
            machine = max(machine, s.cpu)
            continue
        key = f"{s.kind} {s.name}"
        cpu.setdefault(key, []).append(s.cpu)
        thread[key] = max(thread.get(key, 0.0), s.thread_cpu)
        lag_key = "service_lag_max_s" if s.kind == "switch" else "pacing_lag_max_s"
        lags[lag_key] = max(lags[lag_key], s.lag_s)
        lags["loop_gap_max_s"] = max(lags["loop_gap_max_s"], s.gap_s)
    return {
        "machine_cpu_max": round(machine, 3),
        **{k: round(v, 6) for k, v in lags.items()},
        "cpu_mean": {k: round(sum(v) / len(v), 3) for k, v in sorted(cpu.items())},
        "cpu_max": {k: round(max(v), 3) for k, v in sorted(cpu.items())},
        "thread_cpu_max": {k: round(v, 3) for k, v in sorted(thread.items())},
    }


# -- reading the processes -----------------------------------------------------------------------

TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _ticks(stat_path: str) -> int | None:
    """utime + stime of a ``/proc/.../stat`` file in clock ticks (None: gone). Plain ``os``
    calls: a run reads this for every thread of every process at every sample (a thousand
    files a second on the eight-plane fabric), where pathlib's cost showed in its profile."""
    try:
        fd = os.open(stat_path, os.O_RDONLY)
    except OSError:
        return None
    try:
        text = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    fields = text.rsplit(b")", 1)[-1].split()
    return int(fields[11]) + int(fields[12])  # fields 14 and 15 of proc(5)


def process_ticks(pid: int) -> tuple[int, dict[int, int]] | None:
    """The process's CPU ticks and each of its threads' (None: the process is gone)."""
    total = _ticks(f"/proc/{pid}/stat")
    if total is None:
        return None
    threads: dict[int, int] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        tids = []
    for tid in tids:
        ticks = _ticks(f"/proc/{pid}/task/{tid}/stat")
        if ticks is not None:
            threads[int(tid)] = ticks
    return total, threads


def machine_ticks(stat: Path = Path("/proc/stat")) -> tuple[int, int]:
    """Busy and total ticks of all cores since boot (``/proc/stat``'s ``cpu`` line).

    Busy is work at normal priority or above: time spent in processes with a positive nice
    value (``nice``, ``guest_nice``) counts as idle, since such work yields the core whenever
    a switch or an agent (nice 0) wants it; the processes' own lags and scheduling gaps still
    show whether they got it."""
    values = [int(v) for v in stat.read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    idle += values[1] + (values[9] if len(values) > 9 else 0)  # nice + guest_nice
    return sum(values) - idle, sum(values)


def switch_lag(path: Path | None, since: float, until: float) -> tuple[float, float]:
    """The largest service lag and scheduling gap a switch's stats file reports for intervals
    ending in (``since``, ``until``] (monotonic clock; zeros when it has no file)."""
    if path is None:
        return 0.0, 0.0
    try:
        windows = json.loads(path.read_text()).get("windows", [])
    except (OSError, ValueError):
        return 0.0, 0.0
    mine = [(float(lag), float(gap)) for end, lag, gap in windows if since < end <= until]
    return max((w[0] for w in mine), default=0.0), max((w[1] for w in mine), default=0.0)


class _Records(Protocol):
    @property
    def fidelity(self) -> list[FidelitySample]: ...


class SampledPhase(Protocol):
    """What the sampler sees of a phase (:class:`experiments.runner.Phase`)."""

    @property
    def testbed(self) -> Testbed: ...
    @property
    def lock(self) -> threading.Lock: ...
    @property
    def result(self) -> _Records: ...
    def now(self) -> float: ...


@dataclass
class _Seen:
    pid: int
    ticks: int
    threads: dict[int, int]


class FidelitySampler:
    """Takes a :class:`FidelitySample` of every switch, agent and the machine at each sample of
    a phase (:meth:`sampled`) into ``phase.result.fidelity``; a run's
    :class:`experiments.runner.PhaseObserver`."""

    def __init__(self) -> None:
        self.seen: dict[str, _Seen] = {}
        self.machine: tuple[int, int] | None = None
        self.last: float | None = None  # monotonic time of the previous sample

    def started(self, phase: SampledPhase) -> None:
        """A new phase: samples start afresh at its first sample."""
        self.seen.clear()
        self.machine = None
        self.last = None

    def finished(self, phase: SampledPhase) -> None:
        """Nothing to do at the end of a phase."""

    def sampled(self, phase: SampledPhase) -> None:
        """One sample of every process over the interval since the previous one."""
        now = time.monotonic()
        t = phase.now()
        agents = self._agents(phase)
        machine = machine_ticks()
        last, before = self.last, self.machine
        self.last, self.machine = now, machine
        wall = (now - last) * TICK if last is not None else 0.0
        out: list[FidelitySample] = []
        if before is not None and machine[1] > before[1]:
            busy = (machine[0] - before[0]) / (machine[1] - before[1])
            out.append(FidelitySample(t, "machine", "machine", busy, busy))
        switches = {s.name: s.process.stats_path for s in phase.testbed.switches()}
        for proc in phase.testbed.processes():
            if proc.kind not in ("switch", "agent"):
                continue
            ticks = process_ticks(proc.pid)
            seen = self.seen.get(proc.name)
            if ticks is None:
                self.seen.pop(proc.name, None)
                continue
            self.seen[proc.name] = _Seen(proc.pid, *ticks)
            if seen is None or seen.pid != proc.pid or wall <= 0:
                continue  # new (or restarted) process: measured from the next interval
            cpu = (ticks[0] - seen.ticks) / wall
            busiest = max((n - seen.threads.get(tid, 0) for tid, n in ticks[1].items()), default=0)
            thread_cpu = busiest / wall
            if proc.kind == "switch":
                lag, gap = switch_lag(switches.get(proc.name), last or now, now)
                out.append(FidelitySample(t, "switch", proc.name, cpu, thread_cpu, lag, gap))
            else:
                lag, gap = agents.get(proc.name, (0.0, 0.0))
                out.append(FidelitySample(t, "agent", proc.name, cpu, thread_cpu, lag, gap))
        if last is not None:
            with phase.lock:
                phase.result.fidelity.extend(out)

    def _agents(self, phase: SampledPhase) -> dict[str, tuple[float, float]]:
        """Each agent's largest pacing lag and loop gap since its previous answer."""
        from host.agent.control_client import ControlClient, ControlError

        out: dict[str, tuple[float, float]] = {}
        for name in phase.testbed.agents:
            asked = time.monotonic()
            try:
                with ControlClient(phase.testbed.control_path(name), timeout=AGENT_TIMEOUT) as c:
                    reply = c.request("fidelity")
            except (OSError, ControlError):
                took = time.monotonic() - asked
                if took >= AGENT_TIMEOUT:  # its loop did not get to the request in time
                    out[name] = (0.0, took)
                continue  # else stopped (a kernel transport's phase)
            out[name] = (float(reply["pacing_lag_max_s"]), float(reply["loop_gap_max_s"]))
        return out


__all__ = [
    "FAITHFUL",
    "FIDELITY_COLUMNS",
    "THRESHOLDS",
    "FidelitySample",
    "FidelitySampler",
    "Thresholds",
    "Verdict",
    "behind",
    "judge",
]
