"""How fast the sim is: packets simulated per CPU-second, and a 1,024-host permutation's wall time.

Runs a permutation (every host sends ``--size`` bytes to one other host; by default the
reference's ``perm_1024n_1024c_0u_2000000b.cm``: 1,024 hosts, 2 MB per flow) on a two-tier
leaf-spine of ``--planes`` planes (racks of 32 hosts, ``--spines`` spines per plane) at
``--rate`` Gb/s per link, and prints:

- the set-up time (the fabric; contexts, regions and QPs) and the run's wall and CPU time;
- events, data packets sent and link transmissions (a packet crossing one link), each per
  CPU-second of the run;
- the flows' completion times (first, tail, tail over ideal), NACKs and retransmissions;
- beside it, ``htsim_uec`` on the same matrix and topology file (one plane: the reference
  build aborts with ``-planes`` above 1, so a multi-plane sim run is set beside the one-plane
  fabric of the same host bandwidth, each link ``planes`` times faster) and its wall time.

    python benchmarks/sim_speed.py                          # 1,024 hosts, 1 plane, 100 Gb/s
    python benchmarks/sim_speed.py --planes 8 --spines 32   # MRC's shape: 256 paths per pair
    python benchmarks/sim_speed.py --hosts 128 --profile    # where the time goes
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import random
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from host.transport.config import StackConfig  # noqa: E402
from sim import parity  # noqa: E402
from sim.fabric import leaf_spine  # noqa: E402
from sim.htsim import HTSIM_COMMIT, Matrix, read_matrix, shared_dir  # noqa: E402
from sim.workload import Connection, run_flows  # noqa: E402

PERM_1024 = "connection_matrices/perm_1024n_1024c_0u_2000000b.cm"


def permutation(hosts: int, size: int, seed: int) -> Matrix:
    """The reference's 1,024-host matrix when it fits, else a seeded permutation."""
    shared = shared_dir()
    if shared is not None and hosts == 1024 and size == 2_000_000:
        return read_matrix(shared / PERM_1024)
    rng = random.Random(seed)
    dst = list(range(hosts))
    while True:
        rng.shuffle(dst)
        if all(d != s for s, d in enumerate(dst)):
            break
    return Matrix(hosts, tuple(Connection(s, d, size) for s, d in enumerate(dst)))


def main(argv: list[str] | None = None) -> int:
    """Run the permutation; print and optionally write the figures."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--hosts", type=int, default=1024)
    ap.add_argument("--planes", type=int, default=1)
    ap.add_argument(
        "--spines", type=int, default=None, help="spines per plane (default: rack size)"
    )
    ap.add_argument("--rate", type=float, default=100.0, help="Gb/s per link")
    ap.add_argument("--size", type=int, default=2_000_000, help="bytes per flow")
    ap.add_argument("--paths", type=int, default=parity.REFERENCE_PATHS, help="EVs per QP")
    ap.add_argument("--end-us", type=float, default=3000.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-htsim", action="store_true", help="the sim alone")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)

    fabric = leaf_spine(args.hosts, planes=args.planes, hosts_per_rack=min(32, args.hosts),
                        spines_per_plane=args.spines, rate_gbps=args.rate)  # fmt: skip
    matrix = permutation(args.hosts, args.size, args.seed)
    exp = parity.Experiment("permutation", fabric, matrix, end_us=args.end_us, paths=args.paths)
    print(
        f"fabric: {fabric.hosts} hosts, {fabric.planes} plane(s) x {fabric.racks} leaves x "
        f"{fabric.spines_per_plane} spines, {fabric.rate_gbps:g} Gb/s, "
        f"{fabric.planes * fabric.spines_per_plane} paths between racks; queue "
        f"{fabric.port_queue().packets} packets; {len(matrix.connections)} flows of "
        f"{args.size} B; {args.paths} EVs per QP"
    )
    wall, cpu = time.monotonic(), time.process_time()
    net = parity.build_sim(exp, seed=args.seed)
    build = time.process_time() - cpu
    profiler = cProfile.Profile() if args.profile else None
    if profiler:
        profiler.enable()
    config = StackConfig(mtu=fabric.mtu, ev_count=args.paths)
    result = run_flows(net, matrix.connections, cc=fabric.nscc_profile(), config=config,
                       until=args.end_us * 1e-6, seed=args.seed)  # fmt: skip
    if profiler:
        profiler.disable()
    wall = time.monotonic() - wall
    cpu_run = result.cpu_seconds
    hops = sum(c["tx"] for c in net.port_counters.values())
    fcts = [f.fct * 1e6 for f in result.flows if f.fct is not None]
    ideal = exp.ideal_us()
    figures: dict[str, Any] = {
        "fabric": fabric.describe(),
        "setup_cpu_s": build,
        "contexts_qps_cpu_s": result.setup_cpu_seconds,
        "wall_s": wall,
        "run_cpu_s": cpu_run,
        "events": result.events,
        "data_packets": result.packets,
        "link_transmissions": hops,
        "events_per_cpu_s": result.events / cpu_run,
        "packets_per_cpu_s": result.packets / cpu_run,
        "link_transmissions_per_cpu_s": hops / cpu_run,
        "finished": len(fcts),
        "flows": len(result.flows),
        "first_fct_us": min(fcts, default=None),
        "tail_fct_us": max(fcts, default=None),
        "tail_over_ideal": max(fcts) / ideal if fcts else None,
        "nacks": result.nacks,
        "retransmits": result.retransmits,
        "ev_retirements": sum(
            1
            for ctx in net._hosts.values()
            for t in ctx.stats()["ev_transitions"]
            if t.get("new") == "assumed_bad"
        ),  # fmt: skip
    }
    print(
        f"sim: wall {wall:.1f} s (fabric CPU {build:.1f} s, contexts, QPs and run CPU "
        f"{cpu_run:.1f} s, of which contexts and QPs {result.setup_cpu_seconds:.1f} s); "
        f"{result.events} events, {result.packets} data packets, {hops} link transmissions; "
        f"per CPU-second: {figures['packets_per_cpu_s']:.0f} data packets, "
        f"{figures['link_transmissions_per_cpu_s']:.0f} link transmissions, "
        f"{figures['events_per_cpu_s']:.0f} events"
    )
    _print_flows("sim", figures)
    if not args.no_htsim and shared_dir() is not None:
        reference = exp
        if fabric.planes > 1:
            one = fabric.with_(planes=1, rate_gbps=fabric.rate_gbps * fabric.planes)
            reference = parity.Experiment(exp.name, one, matrix, end_us=exp.end_us, paths=exp.paths)
            print(f"htsim: one plane at {one.rate_gbps:g} Gb/s (it aborts with -planes > 1)")
        start = time.monotonic()
        ref = parity.run_reference(reference)
        ref_wall = time.monotonic() - start
        figures["htsim"] = {
            "commit": HTSIM_COMMIT,
            "wall_s": ref_wall,
            "finished": ref.finished,
            "first_fct_us": ref.first_fct_us,
            "tail_fct_us": ref.tail_fct_us,
            "tail_over_ideal": ref.tail_over_ideal,
            "nacks": ref.nacks,
            "retransmits": ref.retransmits,
            "new_packets": ref.new_packets,
        }
        print(f"htsim {HTSIM_COMMIT}: wall {ref_wall:.1f} s")
        _print_flows("htsim", figures["htsim"])
    if profiler:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(20)
    if args.out:
        args.out.write_text(json.dumps(figures, indent=1))
    return 0


def _print_flows(label: str, f: dict[str, Any]) -> None:
    tail = f.get("tail_over_ideal")
    print(
        f"  {label}: {f['finished']} flows finished; FCT first {f['first_fct_us'] or 0:.1f} us, "
        f"tail {f['tail_fct_us'] or 0:.1f} us ({tail or 0:.3f} x ideal); "
        f"NACKs {f['nacks']}, retransmissions {f['retransmits']}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
