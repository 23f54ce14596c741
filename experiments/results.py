"""The results folder of an experiment: what a run records, and reading it back.

A run writes its raw records; :func:`render` (the end of ``mrc-testbed run`` and all of
``mrc-testbed report DIR``) derives metrics, plots and the summary from them::

    scenario.yaml        the scenario as run (with its topology overrides)
    topology.yaml        the effective topology
    run.json             transports, their flows, duration, sampling interval, base RTTs, the
                         switches' operating point and what applied the links' latency
                         (controller.qos.operating_point, with latency_by)
    progress.csv         transport, time_s, flow, delivered_bytes   (cumulative, per flow)
    completions.csv      transport, flow, message, size, start_s, end_s
    faults.csv           transport, time_s, action, target
    ev_states.csv        transport, time_s, GOOD, ASSUMED_BAD, UNKNOWN, DENIED
    ev_transitions.csv   transport, t, host, qpn, ev, path, old, new, reason, profile, plane
                         (agent EV changes; profile: the EV profile, shared by its QPs)
    switches.csv         transport, switch, trimmed, ecn_marked, drops
    ports.csv            transport, switch, port, rx_bytes, tx_bytes (per-port byte counters)
    hosts/TRANSPORT.json per-host agent statistics (counts over the transport's run, states
                         such as a QP's window as they stood at its end)
    fidelity.csv         transport, time_s, kind, name, cpu, thread_cpu, lag_s, gap_s (per
                         sampling interval, every switch, agent and the machine:
                         experiments.fidelity.FidelitySample)
    steps.jsonl          a job's steps, one JSON line each (experiments.metrics.StepRecord, with
                         its transport; written when the scenario has a job)
    --- derived ---
    goodput.csv          transport, time_s, goodput_mbps, capacity_mbps
    metrics.json         per-transport figures (experiments.metrics.TransportMetrics, with
                         its fidelity verdict), and a job's figures under "jobs"
                         (experiments.jobs.steps.JobSummary)
    summary.md           the summary table, a warning per unfaithful transport (and the steps
                         table of a job)
    goodput.png, completion_cdf.png, ev_states.png, switches.png, fabric.png, steps.png
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from controller.qos import describe_operating_point
from experiments.fidelity import FIDELITY_COLUMNS, FidelitySample
from experiments.jobs.steps import (
    JOB_COLUMNS,
    JobSummary,
    annotate,
    job_rows,
    markdown_table,
    summarise_jobs,
)
from experiments.metrics import (
    SUMMARY_COLUMNS,
    Completion,
    FaultMark,
    Progress,
    StepRecord,
    TransportMetrics,
    TransportResult,
    capacity_series,
    goodput_series,
    summarise,
    summary_rows,
)
from topologies import Fabric, parse_topology

EV_STATES = ("GOOD", "ASSUMED_BAD", "UNKNOWN", "DENIED")
TRANSITION_FIELDS = ("t", "host", "qpn", "ev", "path", "old", "new", "reason", "profile", "plane")
SWITCH_COUNTERS = ("trimmed", "ecn_marked", "drops")


class ResultsError(ValueError):
    """A results folder that cannot be read; names the folder and the file."""


def _write_csv(path: Path, header: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)


def _ports(r: TransportResult) -> list[list[object]]:
    rows: list[list[object]] = []
    for sw, counts in sorted(r.ports.items()):
        numbers = sorted({int(k.split("/", 1)[1]) for k in counts})
        rows += [[sw, p, counts.get(f"rx/{p}", 0), counts.get(f"tx/{p}", 0)] for p in numbers]
    return rows


def _when(t: float | None) -> str:
    return "" if t is None else f"{t:.4f}"


#: the CSV files of a results folder: name, columns after ``transport``, rows of one transport
_RAW_TABLES: list[tuple[str, list[str], Callable[[TransportResult], Iterable[list[object]]]]] = [
    (
        "progress.csv",
        ["time_s", "flow", "delivered_bytes"],
        lambda r: ([_when(p.t), p.flow, p.delivered] for p in r.progress),
    ),
    (
        "completions.csv",
        ["flow", "message", "size", "start_s", "end_s"],
        lambda r: (
            [c.flow, c.message, c.size, _when(c.start), _when(c.end)] for c in r.completions
        ),
    ),
    (
        "faults.csv",
        ["time_s", "action", "target"],
        lambda r: ([_when(m.t), m.action, m.target] for m in r.faults),
    ),
    (
        "ev_states.csv",
        ["time_s", *EV_STATES],
        lambda r: (
            [_when(s.get("t", 0.0)), *(int(s.get(k, 0)) for k in EV_STATES)] for s in r.ev_states
        ),
    ),
    (
        "switches.csv",
        ["switch", *SWITCH_COUNTERS],
        lambda r: (
            [sw, *(c.get(k, 0) for k in SWITCH_COUNTERS)] for sw, c in sorted(r.switches.items())
        ),
    ),
    ("ports.csv", ["switch", "port", "rx_bytes", "tx_bytes"], _ports),
    (
        "ev_transitions.csv",
        list(TRANSITION_FIELDS),
        lambda r: ([tr.get(k, "") for k in TRANSITION_FIELDS] for tr in r.ev_transitions),
    ),
    ("fidelity.csv", list(FIDELITY_COLUMNS), lambda r: (s.row() for s in r.fidelity)),
]


def write_raw(
    out: Path,
    scenario_raw: dict[str, Any],
    topology: dict[str, Any],
    interval: float,
    results: Sequence[TransportResult],
    *,
    operating_point: Mapping[str, Any] | None = None,
) -> None:
    """Write what was recorded (everything :func:`render` needs); ``operating_point``: the
    switches' queue, thresholds and latency and what applied it (``Testbed.operating_point``)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "scenario.yaml").write_text(yaml.safe_dump(scenario_raw, sort_keys=False))
    (out / "topology.yaml").write_text(yaml.safe_dump(topology, sort_keys=False))
    run = {
        "interval_s": interval,
        "transports": [
            {
                "name": r.name,
                "kind": r.kind,
                "duration_s": r.duration,
                "flows": [list(f) for f in r.flows],
                "planes_bytes": r.planes,
                "base_rtt_s": r.base_rtt_s,
                "checked_messages": r.checked,
                "corrupt_messages": r.corrupt,
            }
            for r in results
        ],
    }
    if operating_point is not None:
        run["operating_point"] = dict(operating_point)
    (out / "run.json").write_text(json.dumps(run, indent=2) + "\n")
    for name, header, rows in _RAW_TABLES:
        _write_csv(
            out / name, ["transport", *header], [[r.name, *row] for r in results for row in rows(r)]
        )
    steps = []
    for r in results:
        annotate(r.steps, r.faults, r.ev_transitions)
        steps += [json.dumps({"transport": r.name, **s.as_json()}) for s in r.steps]
    if steps:
        (out / "steps.jsonl").write_text("\n".join(steps) + "\n")
    hosts = out / "hosts"
    hosts.mkdir(exist_ok=True)
    for r in results:
        (hosts / f"{r.name}.json").write_text(json.dumps(r.hosts, indent=2, sort_keys=True) + "\n")


def _read_csv(out: Path, name: str) -> list[dict[str, str]]:
    path = out / name
    if not path.exists():
        return []
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def load_raw(out: Path) -> tuple[Fabric, float, list[TransportResult]]:
    """Read a results folder back into the fabric, the interval and each transport's records."""
    if not out.is_dir():
        raise ResultsError(f"{out}: not a results folder (no such directory)")
    try:
        run = json.loads((out / "run.json").read_text())
        topology = parse_topology(
            yaml.safe_load((out / "topology.yaml").read_text()), str(out / "topology.yaml")
        )
    except FileNotFoundError as exc:
        raise ResultsError(
            f"{out}: not a results folder (missing {Path(str(exc.filename)).name};"
            " expected the folder an 'mrc-testbed run' wrote)"
        ) from None
    except (ValueError, KeyError) as exc:
        raise ResultsError(f"{out}: run.json or topology.yaml unreadable ({exc})") from None
    results: dict[str, TransportResult] = {}
    for t in run.get("transports", []):
        results[t["name"]] = TransportResult(
            name=t["name"],
            kind=t.get("kind", t["name"]),
            duration=float(t["duration_s"]),
            flows=[(a, b) for a, b in t["flows"]],
            planes=dict(t.get("planes_bytes", {})),
            base_rtt_s=t.get("base_rtt_s"),
            checked=t.get("checked_messages"),
            corrupt=int(t.get("corrupt_messages", 0)),
        )
    try:
        for row in _read_csv(out, "progress.csv"):
            results[row["transport"]].progress.append(
                Progress(float(row["time_s"]), row["flow"], int(row["delivered_bytes"]))
            )
        for row in _read_csv(out, "completions.csv"):
            results[row["transport"]].completions.append(
                Completion(
                    row["flow"],
                    int(row["message"]),
                    int(row["size"]),
                    float(row["start_s"]),
                    float(row["end_s"]) if row["end_s"] else None,
                )
            )
        for row in _read_csv(out, "faults.csv"):
            results[row["transport"]].faults.append(
                FaultMark(float(row["time_s"]), row["action"], row["target"])
            )
        for row in _read_csv(out, "ev_states.csv"):
            results[row["transport"]].ev_states.append(
                {"t": float(row["time_s"]), **{k: float(row[k]) for k in EV_STATES}}
            )
        for row in _read_csv(out, "ev_transitions.csv"):
            transition: dict[str, object] = {k: row.get(k, "") for k in TRANSITION_FIELDS}
            transition["t"] = float(row["t"])
            results[row["transport"]].ev_transitions.append(transition)
        for row in _read_csv(out, "switches.csv"):
            results[row["transport"]].switches[row["switch"]] = {
                k: int(row[k]) for k in SWITCH_COUNTERS
            }
        for row in _read_csv(out, "ports.csv"):
            counts = results[row["transport"]].ports.setdefault(row["switch"], {})
            counts[f"rx/{row['port']}"] = int(row["rx_bytes"])
            counts[f"tx/{row['port']}"] = int(row["tx_bytes"])
        for row in _read_csv(out, "fidelity.csv"):
            results[row["transport"]].fidelity.append(FidelitySample.from_row(row))
        path = out / "steps.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        for line in filter(None, lines):
            step = json.loads(line)
            results[step["transport"]].steps.append(StepRecord.from_json(step))
    except (KeyError, ValueError, TypeError) as exc:
        raise ResultsError(f"{out}: a CSV or JSON-lines file has a bad row ({exc})") from None
    for name, r in results.items():
        path = out / "hosts" / f"{name}.json"
        if path.exists():
            r.hosts = json.loads(path.read_text())
    return Fabric(topology), float(run.get("interval_s", 0.25)), list(results.values())


def render(out: Path, plots: bool = True) -> dict[str, TransportMetrics]:
    """Derive goodput.csv, metrics.json, summary.md and the plots from a results folder."""
    fabric, interval, results = load_raw(out)
    metrics: dict[str, TransportMetrics] = {}
    rows = []
    for r in results:
        metrics[r.name] = summarise(fabric, r, interval)
        series = goodput_series(r.progress, r.duration, interval)
        capacity = capacity_series(fabric, r.flows, r.faults, r.duration, interval)
        rows += [
            [r.name, f"{t:.3f}", f"{g / 1e6:.3f}", f"{c / 1e6:.3f}"]
            for (t, g), (_, c) in zip(series, capacity, strict=False)
        ]
    _write_csv(out / "goodput.csv", ["transport", "time_s", "goodput_mbps", "capacity_mbps"], rows)
    jobs = summarise_jobs({r.name: r.steps for r in results})
    point = json.loads((out / "run.json").read_text()).get("operating_point")
    document: dict[str, Any] = {
        "fabric": fabric.summary(),
        "interval_s": interval,
        "transports": {name: m.as_json() for name, m in metrics.items()},
    }
    if point is not None:
        document["operating_point"] = point
    if jobs:
        document["jobs"] = {name: j.as_json() for name, j in jobs.items()}
    (out / "metrics.json").write_text(json.dumps(document, indent=2) + "\n")
    lines = markdown_table(SUMMARY_COLUMNS, summary_rows(metrics)) + fidelity_warnings(metrics)
    if jobs:
        lines += ["", "Steps of the job:", "", *markdown_table(JOB_COLUMNS, job_rows(jobs))]
    head = fabric.summary() + (f"\n\n{describe_operating_point(point)}" if point else "")
    (out / "summary.md").write_text(f"# {out.name}\n\n{head}\n\n" + "\n".join(lines) + "\n")
    if plots:
        from experiments.plots import plot_all

        plot_all(out, fabric, interval, results)
    return metrics


def fidelity_warnings(metrics: Mapping[str, TransportMetrics]) -> list[str]:
    """A paragraph per transport whose run was not faithful (none when all were)."""
    return [
        f"\n**{name} was not faithful**: {m.fidelity['verdict']}. While the machine was behind,"
        " its figures measure the emulator, not MRC (see fidelity.csv)."
        for name, m in metrics.items()
        if not m.faithful
    ]


def load_jobs(out: Path) -> dict[str, JobSummary]:
    """The job figures :func:`render` wrote to ``metrics.json`` (empty: no job)."""
    path = out / "metrics.json"
    if not path.exists():
        return {}
    jobs = json.loads(path.read_text()).get("jobs", {})
    return {name: JobSummary(**figures) for name, figures in jobs.items()}


__all__ = [
    "EV_STATES",
    "ResultsError",
    "fidelity_warnings",
    "load_jobs",
    "load_raw",
    "render",
    "write_raw",
]
