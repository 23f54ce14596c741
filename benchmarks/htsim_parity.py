"""The sim beside uet-htsim, experiment by experiment, on the same two-tier fabric.

For every experiment of the reference's sender-CC plan (``validation/validate_uec_sender.txt``)
and of its load-balancing runs with failed links (``validate_load_balancing_failed_snd.txt``),
one description (:mod:`sim.parity`: fabric, traffic matrix, options) runs in ``htsim_uec`` with
``-topo`` of the sim's two-tier leaf-spine and in the sim. Printed per experiment: both
columns and their ratio for tail FCT / ideal, FCT spread (first / last), NACKs and
retransmissions per packet and each cause's share of NSCC's window changes, with the
published three-tier figure (``validation/*.out``) as a third column, then whether the targets
hold (tail FCT within 10 %, NACKs per packet within 1.5x, shares within 0.1). A sim run
that lasts says where it is every half minute (simulated time, flows finished, CPU time).

    python benchmarks/htsim_parity.py                      # every experiment
    python benchmarks/htsim_parity.py --max-hosts 128      # the ones of 128 hosts or fewer
    python benchmarks/htsim_parity.py --only "Single Connection" --out parity.json
    python benchmarks/htsim_parity.py --min-hosts 1024 --draws 10   # fewer single-path draws
    python benchmarks/htsim_parity.py --only "Large permutation (1024 nodes)" --runs 5
    python benchmarks/htsim_parity.py --only "1024 node incast" --end 20000 --trim-bytes 64
    python benchmarks/htsim_parity.py --max-hosts 16 --spraying mrc   # MRC's own spraying

By default the sim sprays with the load balancer the reference runs (``-load_balancing_algo``,
mixed when the plan names none: the ``uet-*`` policies over STEV EVs the switches hash), so
that like is held against like; ``--spraying mrc`` runs MRC's own spraying over SRv6 paths
instead, MRC's departure from UET, measured beside it (docs/validation.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from sim import parity  # noqa: E402
from sim.htsim import HTSIM_COMMIT, parse_published, read_plan, shared_dir  # noqa: E402
from sim.workload import Progress  # noqa: E402

PLANS = ("validate_uec_sender", "validate_load_balancing_failed_snd")
PROGRESS_WALL = 30.0  #: wall seconds between two progress lines of a sim run


def progress_lines(
    print_line: Callable[[str], None], every: float = PROGRESS_WALL
) -> Callable[[Progress], None]:
    """A ``progress`` for :func:`sim.parity.run_sim` that prints where the run is, at most once
    per ``every`` wall seconds."""
    last = time.monotonic()

    def report(p: Progress) -> None:
        nonlocal last
        now = time.monotonic()
        if now - last < every:
            return
        last = now
        run = f" (run {p.run} of {p.runs})" if p.runs > 1 else ""
        print_line(
            f"  sim{run}: {p.now * 1e6:,.0f} of {p.until * 1e6:,.0f} us simulated, {p.finished}"
            f" of {p.flows} flows finished, {p.cpu_seconds:.0f} CPU s"
        )

    return report


def _us(t: float | None) -> str:
    return "never" if t is None else f"{t:.1f} us"


def main(argv: list[str] | None = None) -> int:
    """Run the comparison; returns 0 when every experiment run met its targets."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--max-hosts", type=int, default=1 << 20, help="skip larger experiments")
    ap.add_argument("--min-hosts", type=int, default=0, help="skip smaller experiments")
    ap.add_argument("--plan", action="append", choices=PLANS, help="one plan (repeatable)")
    ap.add_argument("--only", action="append", default=[], help="experiment name (repeatable)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--draws",
        type=int,
        default=parity.ECMP_DRAWS,
        help="runs a side of an experiment whose flows take one hashed path each (-paths 1)",
    )
    ap.add_argument(
        "--runs",
        type=int,
        default=1,
        help="runs a side of every other experiment (sim seeds, htsim -seed 1..N), pooled:"
        " for counts of a few dozen (the 1,024-host permutation's NACKs) one run is one draw",
    )
    ap.add_argument(
        "--end",
        type=float,
        metavar="US",
        help="end every run at US microseconds (both sides) instead of the plan's -end: on the"
        " two-tier fabric the 1,024 -> 1 incast's flows finish after the plan's 15 ms",
    )
    ap.add_argument(
        "--trim-bytes",
        type=int,
        metavar="N",
        help="the sim counts a trimmed header as N bytes on the wire and in the high-priority"
        " queue (htsim's are 64; by default MRC's own, 114)",
    )
    ap.add_argument(
        "--spraying",
        choices=parity.SPRAYING,
        default="uet",
        help="the sim sprays with the reference's load balancer (uet: like with like, the"
        " default) or with MRC's own spraying over SRv6 paths (mrc: MRC's departure)",
    )
    ap.add_argument("--out", type=Path, help="write the figures as JSON")
    args = ap.parse_args(argv)
    if args.end is not None and args.end <= 0:
        ap.error(f"--end {args.end:g}: expected a time in microseconds > 0")
    if args.trim_bytes is not None and args.trim_bytes <= 0:
        ap.error(f"--trim-bytes {args.trim_bytes}: expected a byte count > 0")
    shared = shared_dir()
    if shared is None:
        print("htsim_parity: ../shared/uet-htsim is absent (set MRC_HTSIM_DIR)")
        return 2
    print(
        f"uet-htsim commit {HTSIM_COMMIT}; sim seed {args.seed}; sim spraying: "
        + (
            "the reference's load balancer (uet-* policies, STEV EVs hashed by the switches)"
            if args.spraying == "uet"
            else "MRC's (SRv6 paths, its cycle, weights and recycling)"
        )
    )
    report: list[dict[str, Any]] = []
    misses = 0
    # experiments that differ only in what the sim does not model (with MRC's spraying, the
    # reference's load balancer) run once in the sim
    sim_runs: dict[tuple[object, ...], tuple[parity.Figures, float]] = {}
    for plan_name in args.plan or PLANS:
        plan = read_plan(shared / "validation" / f"{plan_name}.txt")
        published = parse_published((shared / "validation" / f"{plan_name}.out").read_text())
        for entry in plan:
            if args.only and entry.name not in args.only:
                continue
            exp = parity.from_plan(entry, shared, spraying=args.spraying)
            if exp.draws > 1 and args.draws != exp.draws:
                exp = dataclasses.replace(exp, draws=max(1, args.draws))
            elif exp.draws == 1 and args.runs > 1:
                exp = dataclasses.replace(exp, draws=args.runs)
            if not args.min_hosts <= exp.fabric.hosts <= args.max_hosts:
                continue
            if args.end is not None:
                exp = dataclasses.replace(exp, end_us=args.end)
            if args.trim_bytes is not None:
                queues = exp.fabric.queues.with_(trim_bytes=args.trim_bytes)
                exp = dataclasses.replace(exp, fabric=exp.fabric.with_(queues=queues))
            print(f"\n== {entry.name} ({plan_name}) ==")
            f = exp.fabric
            print(
                f"fabric: {f.hosts} hosts, 2 tiers ({f.racks} leaves x {f.hosts_per_rack} hosts, "
                f"{f.spines_per_plane} spines), {f.rate_gbps:g} Gb/s, {f.hop_latency_us:g} us "
                f"hops, queue {f.port_queue().packets} packets; traffic: {entry.matrix}; "
                f"{len(exp.matrix.connections)} flows; options {' '.join(exp.htsim_args())}"
            )
            for note in exp.notes:
                print(f"  note: {note}")
            if args.end is not None:
                print(f"  note: both sides end at {args.end:g} us (--end), not the plan's")
            if args.trim_bytes is not None:
                print(f"  note: the sim counts a trimmed header as {args.trim_bytes} bytes")
            if exp.draws > 1 and exp.paths == 1:
                print(
                    f"  {exp.draws} runs a side (sim seeds {args.seed}..{args.seed + exp.draws - 1},"
                    f" htsim -seed 1..{exp.draws}): each draws which flows share a path; the"
                    " figures are their mean tail and first FCT and their pooled counts"
                )
            elif exp.draws > 1:
                print(
                    f"  {exp.draws} runs a side (sim seeds {args.seed}..{args.seed + exp.draws - 1},"
                    f" htsim -seed 1..{exp.draws}), pooled: mean tail and first FCT, summed counts"
                )
            wall = time.monotonic()
            ref = parity.run_reference(exp)
            ref_wall = time.monotonic() - wall
            key = (
                exp.fabric,
                entry.matrix,
                exp.end_us,
                exp.paths,
                exp.failed,
                exp.ack_every,
                exp.draws,
                exp.policy,
            )
            if key not in sim_runs:
                wall = time.monotonic()
                tell = progress_lines(lambda line: print(line, flush=True))
                figures = parity.run_sim(exp, seed=args.seed, progress=tell)
                sim_runs[key] = (figures, time.monotonic() - wall)
            else:
                print("  sim: the same run as an experiment above (only the reference differs)")
            sim, sim_wall = sim_runs[key]
            pub = parity.published_figures(exp, published.get(entry.name))
            rows = parity.table_rows(sim, ref, pub)
            print(f"  {'figure':28} {'sim':>9} {'htsim':>9} {'ratio':>7} {'3-tier':>9}")
            for label, a, b, r, c in rows:
                print(f"  {label:28} {a:>9} {b:>9} {r:>7} {c:>9}")
            if sim.draws:
                for side, figures in (("sim", sim), ("htsim", ref)):
                    tails = ", ".join(
                        "-" if d.tail_over_ideal is None else f"{d.tail_over_ideal:.2f}"
                        for d in figures.draws
                    )
                    print(f"  {side} tail FCT / ideal per run: {tails}")
            verdict = parity.compare(sim, ref)
            print(
                f"  flows finished: sim {sim.finished}/{sim.flows}"
                + (f" ({sim.failed} failed)" if sim.failed else "")
                + f", htsim {ref.finished}; "
                f"wall: sim {sim_wall:.1f} s (CPU {sim.cpu_seconds or 0:.1f} s), "
                f"htsim {ref_wall:.1f} s"
            )
            cases = sim.case_shares()
            if cases:
                first = sim.first_us
                steer, nack = first.get("ecn_below_target"), first.get("nack")
                print(
                    "  NSCC cases (sim, share of acknowledged bytes): "
                    + " / ".join(f"{c} {v:.2f}" for c, v in cases.items())
                    + f"; first ECN below target at {_us(steer)}, first NACK at {_us(nack)}"
                )
            print("  targets: " + ("met" if verdict.ok else "MISSED: " + "; ".join(verdict.misses)))
            misses += not verdict.ok
            report.append(
                {
                    "plan": plan_name,
                    "experiment": entry.name,
                    "fabric": exp.fabric.describe(),
                    "end_us": exp.end_us,
                    "sim_policy": exp.policy,
                    "sim_trim_bytes": args.trim_bytes,
                    "rows": rows,
                    "tail_ratio": verdict.tail_ratio,
                    "nack_factor": verdict.nack_factor,
                    "share_gap": verdict.share_gap,
                    "misses": list(verdict.misses),
                    "sim_nscc_cases": cases,
                    "sim_first_us": sim.first_us,
                    "draws": exp.draws,
                    "sim_tails_per_draw": [d.tail_over_ideal for d in sim.draws],
                    "htsim_tails_per_draw": [d.tail_over_ideal for d in ref.draws],
                    "flows": sim.flows,
                    "sim_finished": sim.finished,
                    "sim_failed": sim.failed,
                    "htsim_finished": ref.finished,
                    "sim_wall_s": sim_wall,
                    "htsim_wall_s": ref_wall,
                }
            )
    if args.out:
        args.out.write_text(
            json.dumps({"htsim_commit": HTSIM_COMMIT, "experiments": report}, indent=1)
        )
    print(f"\n{len(report) - misses} of {len(report)} experiments met every target")
    return 1 if misses else 0


if __name__ == "__main__":
    raise SystemExit(main())
