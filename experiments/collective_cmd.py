"""``mrc-testbed collective KIND --sizes MIN:MAX``: a collective's size sweep, as nccl-tests.

The sweep (:mod:`experiments.jobs.sweep`) runs on the in-memory network by default
(``--target sim``: virtual time, no root, seconds of CPU), or through the MRC agents of a
fresh testbed on the switch model or BMv2 (``--target model|bmv2|auto``, as root: a scenario
with the sweep's job is run as ``mrc-testbed run`` runs one, and its results folder is kept).
It prints the nccl-tests table and writes ``sweep.csv`` and ``sweep.json`` into ``--out``.

Times are the emulation's (dilated: the links run ``dilation`` times slower than the fabric
they stand for); the table's header says the dilation, by which a real-fabric time is the
measured one divided and a real-fabric bandwidth the measured one multiplied.
"""

from __future__ import annotations

import argparse
import csv
import json
from dataclasses import astuple
from datetime import datetime, timezone
from pathlib import Path

from experiments.jobs.collectives import KINDS, parse_kind
from experiments.jobs.sweep import (
    CSV_COLUMNS,
    as_json,
    format_table,
    parse_sizes,
    sweep_rows,
)
from experiments.metrics import StepRecord
from experiments.scenario import Scenario, parse_scenario, parse_size


def sweep_scenario(
    kind: str,
    sizes: list[int],
    topology: str,
    ranks: list[str] | None,
    iters: int,
    transport: str,
    duration_s: float,
) -> Scenario:
    """The scenario of a sweep (validated as a scenario file: ranks, topology, transport)."""
    job: dict[str, object] = {
        "steps": iters,
        "collectives": [{"kind": kind, "size": s} for s in sizes],
    }
    if ranks:
        job["ranks"] = ranks
    return parse_scenario(
        {
            "name": f"collective-{kind}",
            "topology": topology,
            "duration_s": duration_s,
            "sample_interval_s": 1.0,
            "transports": [transport],
            "job": job,
        },
        "<collective sweep>",
        Path.cwd(),
    )


def run_sweep(scenario: Scenario, target: str, out: Path, seed: int) -> list[StepRecord]:
    """The sweep's step records: on the in-memory network, or through a testbed's agents."""
    assert scenario.job is not None
    if target == "sim":
        from experiments.jobs.sim import run_job

        kind = scenario.transports[0].kind
        return run_job(scenario.job, scenario.fabric, seed=seed, policy=kind).steps
    from experiments.results import load_raw
    from experiments.runner import run_scenario
    from experiments.testbed import require_root

    require_root("mrc-testbed collective --target " + target)
    run_scenario(scenario, out, target, progress=False)
    _, _, results = load_raw(out)
    return results[0].steps


def cmd_collective(args: argparse.Namespace) -> int:
    """Run the sweep, print the table, write sweep.csv and sweep.json."""
    kind = parse_kind(args.kind)
    sizes = parse_sizes(args.sizes, parse_size)
    ranks = [r for r in args.ranks.split(",") if r] if args.ranks else None
    scenario = sweep_scenario(
        kind, sizes, args.topo, ranks, args.iters, args.transport, args.duration
    )
    assert scenario.job is not None
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    out = Path(args.out) if args.out else Path("results") / f"collective-{kind}-{stamp}"
    out.mkdir(parents=True, exist_ok=True)
    steps = run_sweep(scenario, args.target, out, args.seed)
    rows = sweep_rows(scenario.job, steps)
    dilation = scenario.topology.dilation
    where = "the in-memory network" if args.target == "sim" else f"the {args.target} target"
    note = (
        f"{args.transport} on {where}, {scenario.fabric.summary().split(',')[0]}; "
        f"{args.iters} iterations; dilation {dilation:g} (real-fabric time = time / {dilation:g})"
    )
    table = format_table(kind, len(scenario.job.ranks), rows, note)
    print(table, end="")
    (out / "sweep.txt").write_text(table)
    with (out / "sweep.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(CSV_COLUMNS)
        writer.writerows(astuple(r) for r in rows)
    document = {**as_json(kind, scenario.job.ranks, rows), "dilation": dilation}
    (out / "sweep.json").write_text(json.dumps(document, indent=2) + "\n")
    print(f"# results: {out}/sweep.csv, sweep.json")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``collective`` to the ``mrc-testbed`` command line."""
    parser = subparsers.add_parser(
        "collective",
        help="a collective's size sweep, printed as nccl-tests prints it",
        description="Sweep a collective over sizes on the in-memory network (default) or "
        "through the MRC agents of a fresh testbed; print nccl-tests' table, write CSV and JSON.",
    )
    parser.add_argument(
        "kind",
        help=f"{', '.join(KINDS)} (or allreduce, allgather, reducescatter, alltoall)",
    )
    parser.add_argument(
        "--sizes", default="1MiB:64MiB", help="MIN:MAX[:FACTOR] or A,B,C (default 1MiB:64MiB)"
    )
    parser.add_argument("--ranks", help="hosts, comma-separated (default every host)")
    parser.add_argument("--iters", type=int, default=5, help="iterations per size (default 5)")
    parser.add_argument("--topo", default="small", help="shipped topology or file (small)")
    parser.add_argument(
        "--target",
        default="sim",
        choices=["sim", "auto", "model", "bmv2"],
        help="sim: the in-memory network (default); else a fresh testbed on that target (root)",
    )
    parser.add_argument("--transport", default="mrc", help="an MRC transport (mrc, single-path..)")
    parser.add_argument(
        "--duration", type=float, default=600.0, help="testbed targets: time limit, s (600)"
    )
    parser.add_argument("--seed", type=int, default=1, help="sim: the network's seed (1)")
    parser.add_argument("--out", help="results folder (default results/collective-KIND-TIME)")
    parser.set_defaults(func=cmd_collective)


__all__ = ["cmd_collective", "register", "run_sweep", "sweep_scenario"]
