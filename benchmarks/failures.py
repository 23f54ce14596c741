"""Failures as MRC sees them: failover and recovery by spraying mode, plane loss, the incident.

Runs three measurements through the experiment runner, each a shipped scenario adjusted to
measure (faults left in place where a recovery is timed, a finer sampling interval), and
reports them side by side with every time also in base RTTs and in real-fabric time:

1. **spraying** (``experiments/scenarios/spraying.yaml``) -- the small fabric's permutation
   with one leaf-spine link failed mid-transfer and not repaired, under SRv6 spraying (every
   EV names its path; a loss retires the path), under STEV spraying (EV bits in the flow
   label and UDP source port, hashed by the switches' ECMP groups; the host knows no path),
   and under SRv6 with an SRH (the same paths, the spine performing End: ``mrc-srh``).
   EV failover (fault to the first EV through the failed link marked ASSUMED_BAD, median over
   the QPs that used it) and goodput recovery (back to 90% of what survives). Target: both
   <= 10 base RTTs; STEV's cost over SRv6 shown.
2. **plane loss** (``plane.yaml``) -- every spine of plane 1 killed at once mid-transfer and
   left down: goodput back to (P-1)/P of the full capacity (90% of what survives) within 10
   base RTTs, and no RTO.
3. **the incident** (``incident.yaml``) -- the default fabric, four spine reboots (two at
   once) and two links flapping six times a minute during long transfers; MRC beside kernel
   MPTCP. Target: every transfer intact (each message checked byte for byte at its receiver),
   0 RTOs, MRC goodput >= 0.85 of the capacity the faults leave.

    sudo .venv/bin/python benchmarks/failures.py [--rate 10] [--incident-rate 5]
        [--target model|bmv2] [--only spraying,plane,incident] [--out DIR]

The default fabric runs 20 processes (16 switches, 4 agents): at 10 Mb/s they need most of
two cores, so the incident runs at ``--incident-rate`` (5 Mb/s) with its 128 MiB flows and a
duration long enough for MPTCP to finish; the shipped scenario's fault times are kept. Every
run is strict: one whose machine fell behind (not faithful, see ``experiments/fidelity.py``)
stops the benchmark with exit status 3 rather than report the emulator's figure as MRC's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.runner import UNFAITHFUL_EXIT, UnfaithfulRun, run_scenario  # noqa: E402
from experiments.scenario import Scenario, load_scenario, shipped_scenario  # noqa: E402
from targets.interrupt import handle_termination  # noqa: E402

MEASUREMENTS = ("spraying", "plane", "incident")
TARGET_RTTS = 10.0


def shipped(name: str, rate: float, **changes: Any) -> Scenario:
    """A shipped scenario at link rate ``rate`` without added link delay, sampled every 50 ms,
    with some more fields changed."""
    scenario = load_scenario(shipped_scenario(name))
    return scenario.with_(
        **{"link_rate_mbps": rate, "link_delay_us": 0, "sample_interval_s": 0.05, **changes}
    )


def kept(scenario: Scenario, kind: str) -> list[dict[str, Any]]:
    """The faults of ``scenario`` of one kind, as the scenario file writes them."""
    return [f.as_dict() for f in scenario.faults if f.kind == kind]


def spraying(rate: float) -> Scenario:
    """SRv6 and STEV spraying through one link failure, the link left down."""
    base = load_scenario(shipped_scenario("spraying"))
    # the same source routes with the reduced SRH (the spine performs End): as SRv6
    srh = {"name": "mrc-srh", "transport": "mrc", "ev_format": "srv6+srh"}
    return shipped(
        "spraying",
        rate,
        faults=kept(base, "link_down"),
        transports=[*base.raw["transports"], srh],
    )


def plane(rate: float) -> Scenario:
    """Plane 1's spines killed mid-transfer and left down."""
    base = load_scenario(shipped_scenario("plane"))
    workload = {**base.raw["workloads"][0], "total_bytes": "12MiB"}
    return shipped(
        "plane", rate, faults=kept(base, "plane_down"), workloads=[workload], duration_s=20
    )


def incident(rate: float) -> Scenario:
    """The incident at ``rate``; long enough for the slower transport to finish, goodput
    sampled every 0.1 s (the shipped scenario's 0.5 s would be the recovery's resolution)."""
    return shipped("incident", rate, duration_s=150, sample_interval_s=0.1)


def run(name: str, scenario: Scenario, target: str, out: Path) -> dict[str, Any]:
    print(f"== {name}: {scenario.topology.name} fabric at {scenario.topology.link_rate_mbps:g} "
          f"Mb/s, dilation {scenario.topology.dilation:g}", flush=True)  # fmt: skip
    metrics = run_scenario(scenario, out / name, target, state_path=out / "state.json", strict=True)
    return {k: v.as_json() for k, v in metrics.items()}


def first_recovery(m: dict[str, Any]) -> dict[str, Any]:
    """The figures of the first fault (a link or a switch going down)."""
    return m["recovery"][0] if m.get("recovery") else {}


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:.0f} ms"


def _real(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e6:.2f} us"


def _rtts(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def failover_rows(metrics: dict[str, Any]) -> list[dict[str, Any]]:
    """Per transport: EV failover, goodput recovery, RTOs, goodput."""
    rows = []
    for name, m in metrics.items():
        r = first_recovery(m)
        rows.append(
            {
                "transport": name,
                "ev_failover_s": r.get("ev_failover_p50_s"),
                "ev_failover_rtts": r.get("ev_failover_p50_rtts"),
                "ev_failover_real_s": r.get("ev_failover_p50_real_s"),
                "recovery_s": r.get("recovery_s"),
                "recovery_rtts": r.get("recovery_rtts"),
                "recovery_real_s": r.get("recovery_real_s"),
                "goodput_fraction": m["goodput_fraction"],
                "rtos": m["rtos"],
                "ev_retirements": m.get("ev_retirements", 0),
                "complete": m["complete"],
                "messages_checked": m.get("messages_checked"),
                "messages_corrupt": m.get("messages_corrupt"),
                "trims": m["switch_totals"].get("trimmed", 0),
                "base_rtt_s": m["base_rtt_s"],
                **over_faults(m),
            }
        )
    return rows


def over_faults(m: dict[str, Any]) -> dict[str, Any]:
    """Median and worst of the recovery and EV failover (base RTTs) over every fault of a run."""
    out: dict[str, Any] = {"faults": len(m.get("recovery", []))}
    for key in ("recovery_rtts", "ev_failover_p50_rtts"):
        values = sorted(r[key] for r in m.get("recovery", []) if r.get(key) is not None)
        name = key.replace("_p50", "")
        out[f"{name}_median"] = statistics.median(values) if values else None
        out[f"{name}_max"] = values[-1] if values else None
    return out


def print_rows(title: str, rows: list[dict[str, Any]]) -> None:
    print(f"\n{title}")
    print(
        f"{'transport':<10} {'EV failover':>26} {'goodput recovery':>28} {'goodput':>8} "
        f"{'RTOs':>5} {'retired':>8} {'intact':>7}"
    )
    for r in rows:
        failover = (
            f"{_ms(r['ev_failover_s'])} = {_real(r['ev_failover_real_s'])} "
            f"({_rtts(r['ev_failover_rtts'])} RTT)"
            if r["ev_failover_s"] is not None
            else "-"
        )
        recovery = (
            f"{_ms(r['recovery_s'])} = {_real(r['recovery_real_s'])} "
            f"({_rtts(r['recovery_rtts'])} RTT)"
            if r["recovery_s"] is not None
            else "-"
        )
        checked = r["messages_checked"]
        intact = "-" if checked is None else ("yes" if not r["messages_corrupt"] else "NO")
        print(
            f"{r['transport']:<10} {failover:>26} {recovery:>28} {r['goodput_fraction']:>8.2f} "
            f"{r['rtos']:>5.0f} {r['ev_retirements']:>8} {intact:>7}"
        )
        if r["faults"] > 1:
            print(
                f"{'':<10} over {r['faults']} faults, in base RTTs: EV failover median "
                f"{_rtts(r['ev_failover_rtts_median'])} (worst {_rtts(r['ev_failover_rtts_max'])}), "
                f"goodput recovery median {_rtts(r['recovery_rtts_median'])} "
                f"(worst {_rtts(r['recovery_rtts_max'])})"
            )


def verdicts(figures: dict[str, Any]) -> list[str]:
    """Each target, met or not."""
    out = []
    rows = {r["transport"]: r for r in figures.get("spraying", [])}
    for name, r in rows.items():
        for key in ("ev_failover_rtts", "recovery_rtts"):
            v = r[key]
            ok = v is not None and v <= TARGET_RTTS
            out.append(f"spraying {name} {key.split('_')[0]} <= {TARGET_RTTS:g} RTT: "
                       f"{'met' if ok else 'NOT met'} ({_rtts(v)})")  # fmt: skip
    if "mrc-srv6" in rows and "mrc-stev" in rows:
        a, b = rows["mrc-srv6"]["recovery_s"], rows["mrc-stev"]["recovery_s"]
        if a is not None and b is not None:
            out.append(f"STEV's cost over SRv6 (goodput recovery): {(b - a) * 1e3:+.0f} ms")
    for r in figures.get("plane", []):
        v = r["recovery_rtts"]
        ok = v is not None and v <= TARGET_RTTS and r["rtos"] == 0
        out.append(f"plane loss {r['transport']}: back to (P-1)/P within {TARGET_RTTS:g} RTT and "
                   f"no RTO: {'met' if ok else 'NOT met'} ({_rtts(v)} RTT, {r['rtos']:.0f} RTOs)")  # fmt: skip
    for r in figures.get("incident", []):
        if r["transport"] != "mrc":
            continue
        ok = (
            r["complete"]
            and r["messages_checked"]
            and not r["messages_corrupt"]
            and r["rtos"] == 0
            and r["goodput_fraction"] >= 0.85
        )
        out.append(f"incident mrc: intact, 0 RTOs, >= 0.85 of surviving capacity: "
                   f"{'met' if ok else 'NOT met'} ({r['goodput_fraction']:.2f}, "
                   f"{r['rtos']:.0f} RTOs)")  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    handle_termination()  # SIGTERM cleans up as Ctrl-C does: nothing is left running
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=10.0, help="small-fabric link rate, Mb/s")
    parser.add_argument("--incident-rate", type=float, default=5.0, help="default-fabric rate")
    parser.add_argument("--target", choices=("model", "bmv2", "auto"), default="model")
    parser.add_argument("--only", default=",".join(MEASUREMENTS), help="comma-separated")
    parser.add_argument("--out", type=Path, help="folder for the results (default: a temp dir)")
    args = parser.parse_args(argv)
    only = [m.strip() for m in args.only.split(",") if m.strip()]
    unknown = sorted(set(only) - set(MEASUREMENTS))
    if unknown:
        parser.error(f"--only {args.only}: unknown {unknown}; expected some of {MEASUREMENTS}")
    if os.geteuid() != 0:
        parser.error("needs root (Mininet, namespaces): run it with sudo")
    out = args.out or Path(tempfile.mkdtemp(prefix="mrc-failures-bench-"))
    out.mkdir(parents=True, exist_ok=True)
    figures: dict[str, Any] = {"target": args.target, "rate_mbps": args.rate,
                               "incident_rate_mbps": args.incident_rate}  # fmt: skip
    makers = {"spraying": (spraying, args.rate), "plane": (plane, args.rate),
              "incident": (incident, args.incident_rate)}  # fmt: skip
    for name in only:
        make, rate = makers[name]
        try:
            figures[name] = failover_rows(run(name, make(rate), args.target, out))
        except UnfaithfulRun as exc:
            print(f"benchmarks/failures.py: {exc}", file=sys.stderr)
            return UNFAITHFUL_EXIT
    titles = {
        "spraying": "one leaf-spine link failed (small fabric), SRv6 vs STEV/ECMP spraying",
        "plane": "plane 1 lost (every spine killed), small fabric",
        "incident": "the incident (default fabric): 4 spine reboots, 2 links flapping 6/min",
    }
    for name in only:
        print_rows(titles[name], figures[name])
    figures["verdicts"] = verdicts(figures)
    print()
    for line in figures["verdicts"]:
        print(line)
    (out / "failures.json").write_text(json.dumps(figures, indent=2) + "\n")
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
