"""The emulation held against the sim: the same small scenarios on ``sim``, ``model`` and ``bmv2``.

Three scenarios, each run by the experiment runner on every target asked for (MRC alone, one
phase each):

1. **link failure** -- the shipped demo's permutation on the small fabric with its leaf-spine
   link failed at 2 s and repaired at 5 s;
2. **3 -> 1 incast** -- three senders to h0 on the small fabric;
3. **8 -> 1 incast** -- eight senders to h0 on the medium fabric.

The incasts run at the topology profile's operating point (no shallow-buffer overrides), so
every target runs the switches the controller configures by default. Printed per scenario, one
column per target, and the targets against the sim's column:

- goodput / capacity (``metrics.json``'s ``goodput_fraction``): within 0.05;
- EV failover (fault to a QP's first EV of a failed path ASSUMED_BAD, median) and goodput
  recovery (back to 90 % of what survives, at the sampling resolution): within 2 base RTTs;
- NACKs the senders received: within a factor of 1.5;

with each run's fidelity verdict and the machine's load average beside them: an emulated run
that was not faithful measured the machine.

A run of these short scenarios is one draw: which flows a burst of trims hits first, and so
which windows a quick adapt cuts, moves goodput by several hundredths from one run to the next
(the sim's incast-8 reads 0.79 to 0.86 over seeds 1 to 8). ``--runs N`` runs every target N
times (the sim with seeds 1 to N, the emulation N times over) and holds the means against each
other; each cell shows the mean and, after it, the range of the runs.

Every target starts a scenario's flows a quarter of a frame time apart (``--stagger 0.25``; 0
starts them together, as the scenario files say). Started together, the sim's flows stay in
lockstep over links of one rate, a phase no emulated run has: it fixes which flow meets a full
queue first, and with it incast-3's goodput and the failure's trims (docs/validation.md).

Emulated runs boot a Mininet fabric (root); the sim's runs come first, then every emulated
one, under an exclusive lock on ``--lock FILE`` when given (a shared machine's fabric lock:
some five minutes on a loaded 2-core machine). ``--out F.json`` keeps the figures; ``--table
F.json`` prints the table of a file written before.

    .venv/bin/python benchmarks/emulation_vs_sim.py [--targets sim,model,bmv2] [--lock FILE]
        [--only failure,incast-3,incast-8] [--rate 10] [--runs 1] [--stagger 0.25] [--out F.json]
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import statistics
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from experiments.metrics import TransportMetrics  # noqa: E402
from experiments.runner import run_scenario  # noqa: E402
from experiments.scenario import Scenario, load_scenario, parse_scenario, shipped_scenario  # noqa: E402
from targets.factory import SIM_TARGET  # noqa: E402

GOODPUT_TOLERANCE = 0.05  # goodput / capacity, absolute
RTT_TOLERANCE = 2.0  # EV failover and recovery, in base RTTs
NACK_FACTOR = 1.5
SAMPLE_INTERVAL = 0.1  # seconds: the recovery's resolution (about one base RTT at 10 Mb/s)
SCENARIOS = ("failure", "incast-3", "incast-8")
#: the flows' starts apart, in frame times (:func:`staggered`)
STAGGER = 0.25
TARGETS = ("sim", "model", "bmv2")


def scaled(mib: float, rate: float) -> int:
    """``mib`` MiB at 10 Mb/s, scaled to ``rate``: a run takes the same time at every rate."""
    return int(mib * (1 << 20) * rate / 10.0)


def failure_scenario(rate: float) -> Scenario:
    """The demo's permutation and link failure, MRC alone."""
    demo = load_scenario(shipped_scenario("demo"))
    workload = {**demo.raw["workloads"][0], "total_bytes": scaled(14, rate)}
    return demo.with_(
        name="failure", transports=["mrc"], link_rate_mbps=rate, workloads=[workload],
        sample_interval_s=SAMPLE_INTERVAL,
    )  # fmt: skip


def incast_scenario(senders: int, rate: float) -> Scenario:
    """``senders`` hosts to h0 (small fabric for 3, medium for 8), at the default operating
    point; each sends enough to keep the receiver's NICs busy for about 3 s."""
    return parse_scenario(
        {
            "name": f"incast-{senders}",
            "topology": "small" if senders <= 3 else "medium",
            "link_rate_mbps": rate,
            "duration_s": 15,
            "sample_interval_s": SAMPLE_INTERVAL,
            "transports": ["mrc"],
            "workloads": [
                {
                    "kind": "incast",
                    "receiver": "h0",
                    "senders": [f"h{i}" for i in range(1, senders + 1)],
                    "message_bytes": "256KiB",
                    "total_bytes": scaled(2 if senders <= 3 else 1, rate),
                    "start_s": 0.2,
                }
            ],
        }
    )


def staggered(scenario: Scenario, frames: float) -> Scenario:
    """``scenario`` with its flows' starts ``frames`` full-size frame times apart: the k-th
    flow of a workload (k from 0, in the workload's order) starts k x ``frames`` frame times
    after the workload. Each flow becomes an incast of one sender. The sim starts every flow
    of a workload at the same instant over links of one rate, which fixes for the whole run
    which flow meets a full queue first (docs/validation.md); the emulated hosts never start
    in lockstep. 0: the scenario as it is."""
    if frames < 0:
        raise ValueError(f"stagger {frames} frame times: expected >= 0")
    if not frames:
        return scenario
    step = frames * scenario.topology.frame_time
    workloads = []
    for workload in scenario.workloads:
        for k, (src, dst) in enumerate(workload.pairs):
            workloads.append(
                {
                    "kind": "incast",
                    "message_bytes": workload.message_bytes,
                    "total_bytes": workload.total_bytes,
                    "receiver": dst,
                    "senders": [src],
                    "start_s": workload.start_s + k * step,
                }
            )
    return scenario.with_(workloads=workloads)


def scenarios(rate: float, stagger: float = STAGGER) -> dict[str, Scenario]:
    """The benchmark's scenarios by name (``stagger``: :func:`staggered`'s frame times)."""
    return {
        name: staggered(scenario, stagger)
        for name, scenario in (
            ("failure", failure_scenario(rate)),
            ("incast-3", incast_scenario(3, rate)),
            ("incast-8", incast_scenario(8, rate)),
        )
    }


def figures(m: TransportMetrics) -> dict[str, Any]:
    """What the table compares, from one transport's metrics."""
    first = m.recovery[0] if m.recovery else None
    return {
        "goodput_fraction": m.goodput_fraction,
        "complete": m.complete,
        "ev_failover_s": first.ev_failover_p50_s if first else None,
        "recovery_s": first.recovery_s if first else None,
        "nacks": m.nacks,
        "trims": m.switch_totals.get("trimmed", 0),
        "ev_retirements": m.ev_retirements,
        "rtos": m.rtos,
        "base_rtt_s": m.base_rtt_s,
        "fidelity": m.fidelity.get("verdict", "-"),
    }


def load_average() -> str:
    """The machine's load averages (1, 5, 15 minutes)."""
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


@contextlib.contextmanager
def held(lock: Path | None) -> Iterator[None]:
    """An exclusive lock on ``lock`` for the duration (nothing when None)."""
    if lock is None:
        yield
        return
    with lock.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def run_one(scenario: Scenario, target: str, out: Path, seed: int = 1) -> dict[str, Any]:
    """One scenario on one target: its figures, with the load average after the run (``seed``:
    the sim's)."""
    lines: list[str] = []
    metrics = run_scenario(scenario, out, target, show=lines.append, progress=False, seed=seed)
    return {**figures(metrics["mrc"]), "load": load_average(), "results": str(out)}


#: figures pooled as the mean of the runs that have them (None when none has)
MEAN_FIGURES = ("goodput_fraction", "ev_failover_s", "recovery_s", "nacks", "trims",
                "ev_retirements", "rtos")  # fmt: skip


def pooled(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Several runs of one scenario on one target as one column: each figure's mean, the run
    complete when every run was, the fidelity verdicts counted, and the runs kept (``runs``)."""
    if len(runs) == 1:
        return {**runs[0], "runs": runs}
    out: dict[str, Any] = {}
    for key in MEAN_FIGURES:
        values = [r[key] for r in runs if r.get(key) is not None]
        out[key] = statistics.fmean(values) if values else None
    verdicts = Counter(str(r["fidelity"]) for r in runs)
    out["fidelity"] = ", ".join(
        v if n == len(runs) else f"{v} x{n}" for v, n in sorted(verdicts.items())
    )
    out["complete"] = all(r["complete"] for r in runs)
    out["base_rtt_s"] = runs[0]["base_rtt_s"]
    out["load"] = runs[-1].get("load", "-")
    out["runs"] = runs
    return out


def _range(f: dict[str, Any], key: str) -> tuple[float, float] | None:
    """The lowest and highest ``key`` of a column's runs (None: one value, or none)."""
    values = [r[key] for r in f.get("runs", ()) if r.get(key) is not None]
    if len(values) > 1 and min(values) != max(values):
        return min(values), max(values)
    return None


def _spread(f: dict[str, Any], key: str, show: Callable[[float], str]) -> str:
    """``f[key]`` shown, with the range of its runs after it when they differ."""
    if f.get(key) is None:
        return "-"
    span = _range(f, key)
    return show(f[key]) + (f" ({show(span[0])} to {show(span[1])})" if span else "")


# -- the comparison ------------------------------------------------------------------------


def _seconds(value: float | None, rtt: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.0f} ms" + (f" ({value / rtt:.1f} RTT)" if rtt else "")


def verdicts(sim: dict[str, Any], other: dict[str, Any]) -> dict[str, bool | None]:
    """Each target of ``other`` against ``sim`` (None: not applicable, a figure missing)."""
    rtt = sim["base_rtt_s"]
    out: dict[str, bool | None] = {
        "goodput": abs(sim["goodput_fraction"] - other["goodput_fraction"]) <= GOODPUT_TOLERANCE
    }
    for key in ("ev_failover_s", "recovery_s"):
        a, b = sim[key], other[key]
        out[key] = None if a is None and b is None else (
            a is not None and b is not None and abs(a - b) <= RTT_TOLERANCE * rtt
        )  # fmt: skip
    a, b = sim["nacks"], other["nacks"]
    out["nacks"] = (a == b == 0) or (min(a, b) > 0 and max(a, b) / min(a, b) <= NACK_FACTOR)
    return out


def _rtts(f: dict[str, Any], key: str) -> str:
    """A time in ms and base RTTs, the runs' range (when they differ) in base RTTs."""
    if f.get(key) is None:
        return "-"
    rtt = f["base_rtt_s"]
    span = _range(f, key)
    if not rtt or span is None:
        return _seconds(f[key], rtt)
    return _seconds(f[key], rtt) + f" ({span[0] / rtt:.1f} to {span[1] / rtt:.1f} RTT)"


def _count(f: dict[str, Any], key: str) -> str:
    return _spread(f, key, lambda v: f"{v:.0f}")


ROWS = (
    ("goodput / capacity", lambda f: _spread(f, "goodput_fraction", "{:.2f}".format), "goodput"),
    ("EV failover p50", lambda f: _rtts(f, "ev_failover_s"), "ev_failover_s"),
    ("goodput recovery", lambda f: _rtts(f, "recovery_s"), "recovery_s"),
    ("NACKs", lambda f: _count(f, "nacks"), "nacks"),
    ("trims", lambda f: _count(f, "trims"), None),
    ("EVs retired", lambda f: _count(f, "ev_retirements"), None),
    ("RTOs", lambda f: _count(f, "rtos"), None),
    ("runs", lambda f: str(len(f.get("runs", ())) or 1), None),
    ("complete", lambda f: "yes" if f["complete"] else "no", None),
    ("fidelity", lambda f: str(f["fidelity"]), None),
    ("load average", lambda f: str(f.get("load", "-")), None),
)


def table(report: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    """Markdown tables, one per scenario: a row per figure, a column per target, a mark
    after each emulated figure that misses its target (x) or meets it."""
    lines: list[str] = []
    for name, by_target in report.items():
        targets = [t for t in TARGETS if t in by_target]
        sim = by_target.get(SIM_TARGET)
        checks = {t: verdicts(sim, by_target[t]) for t in targets if sim and t != SIM_TARGET}
        lines += [f"### {name}", "", "| | " + " | ".join(targets) + " |"]
        lines.append("|---" * (len(targets) + 1) + "|")
        for label, show, key in ROWS:
            cells = []
            for t in targets:
                cell = show(by_target[t])
                verdict = checks.get(t, {}).get(key) if key else None
                cells.append(cell + ("" if verdict is None else (" ok" if verdict else " MISS")))
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def misses(report: dict[str, dict[str, dict[str, Any]]]) -> int:
    """Figures of the emulated targets outside their target."""
    count = 0
    for by_target in report.values():
        sim = by_target.get(SIM_TARGET)
        if sim is None:
            continue
        for t, f in by_target.items():
            if t != SIM_TARGET:
                count += sum(1 for ok in verdicts(sim, f).values() if ok is False)
    return count


def main(argv: list[str] | None = None) -> int:
    """Run the comparison; 0 when every emulated figure met its target."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--targets", default=",".join(TARGETS), help="comma-separated targets")
    ap.add_argument("--only", default=",".join(SCENARIOS), help="comma-separated scenarios")
    ap.add_argument(
        "--rate", type=float, default=10.0, help="link rate, Mb/s (10; flows scaled alike)"
    )
    ap.add_argument(
        "--runs", type=int, default=1, help="runs per target (the sim's seeds 1..N), pooled"
    )
    ap.add_argument(
        "--stagger", type=float, default=STAGGER,
        help=f"start each scenario's flows this many frame times apart ({STAGGER}; 0: together)",
    )  # fmt: skip
    ap.add_argument("--lock", type=Path, help="hold this file's lock for every emulated run")
    ap.add_argument("--out", type=Path, help="write the figures as JSON")
    ap.add_argument("--results", type=Path, help="keep the results folders here")
    ap.add_argument("--table", type=Path, help="print the table of a JSON file written before")
    args = ap.parse_args(argv)
    if args.table is not None:
        saved = json.loads(args.table.read_text())
        print("\n".join(table(saved)))
        return 0 if not misses(saved) else 1
    targets = [t for t in args.targets.split(",") if t]
    unknown = sorted(set(targets) - set(TARGETS)) + sorted(
        set(args.only.split(",")) - set(SCENARIOS)
    )
    if unknown:
        ap.error(f"unknown target or scenario {unknown[0]!r}: targets {TARGETS}, {SCENARIOS}")
    if args.runs < 1:
        ap.error(f"--runs {args.runs}: expected at least 1")
    if not args.stagger >= 0:
        ap.error(f"--stagger {args.stagger}: expected a number of frame times >= 0")
    if any(t != SIM_TARGET for t in targets) and os.geteuid() != 0:
        ap.error("the emulated targets boot a Mininet fabric: run as root (or --targets sim)")
    base = args.results or Path(tempfile.mkdtemp(prefix="emulation-vs-sim-"))
    chosen = {
        k: v for k, v in scenarios(args.rate, args.stagger).items() if k in args.only.split(",")
    }
    report: dict[str, dict[str, dict[str, Any]]] = {name: {} for name in chosen}

    def run_all(on: list[str]) -> None:
        for target in on:
            for name, scenario in chosen.items():
                runs = []
                for k in range(1, args.runs + 1):
                    of = f" (run {k} of {args.runs})" if args.runs > 1 else ""
                    print(f"{name} on {target}{of} ...", flush=True)
                    out = base / name / target / (f"run-{k}" if args.runs > 1 else "")
                    runs.append(run_one(scenario, target, out, seed=k))
                    report[name][target] = pooled(runs)
                if args.out is not None:
                    args.out.write_text(json.dumps(report, indent=2) + "\n")

    run_all([t for t in targets if t == SIM_TARGET])
    emulated = [t for t in targets if t != SIM_TARGET]
    if emulated:
        with held(args.lock):
            run_all(emulated)
    print(f"results folders under {base}; load average now {load_average()}")
    print("\n".join(table(report)))
    return 0 if not misses(report) else 1


if __name__ == "__main__":
    sys.exit(main())
