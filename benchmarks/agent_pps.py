"""Agent packet rate: two mrc-host agents back to back over veths, long transfers.

Two hosts of one rack (h0 -> h1 of topologies/small.yaml, reduced to ``--planes`` planes) run
as real ``mrc-host --direct`` processes in namespaces ``agb<pid>-h0`` / ``agb<pid>-h1`` joined by
one veth pair per plane. h0 writes ``--size`` bytes of pattern data to a region of h1 at the
topology's 4096-byte payload, ``--runs`` times; the receiver verifies the data after each run.
Reported per run and as the median: data packets/s (h0 -> h1), control packets/s (ACKs,
h1 -> h0), goodput, retransmissions, each agent's CPU (share of one core and microseconds per
data packet), the RTT the sender measured, and each agent's CPU while idle.

    sudo .venv/bin/python benchmarks/agent_pps.py [--size 256M] [--runs 3] [--planes 1]
         [--cc fixed --cc-param window=1024] [--no-rx-ring] [--rate MBPS] [--out result.json]

With ``--rate`` the agents pace their NICs at that link rate as they do on a fabric
(host/agent/pacing.py): the CPU per data packet then includes the wake-ups pacing costs.

Target: 50,000 packets/s at 4096-byte payload. The default congestion control is a fixed
window of 1024 packets, so that the figure is the adapter's and the core's packet rate, not a
congestion controller's reaction to the scheduling delays of a shared machine (``--cc nscc``
measures that instead). The load average is printed: other processes on the machine delay the
agents' wake-ups, which shows up as RTT and lowers a window-limited rate.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.hostnets import BackToBack, netns_available  # noqa: E402
from host.agent.control_client import ControlClient  # noqa: E402
from targets.interrupt import handle_termination  # noqa: E402
from topologies import Fabric, load_topology  # noqa: E402
from topologies.config import shipped_topology  # noqa: E402

TARGET_PPS = 50_000


def parse_size(text: str) -> int:
    """``256M``, ``1G``, ``4096`` -> bytes."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper()
    try:
        if text and text[-1] in units:
            return int(float(text[:-1]) * units[text[-1]])
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"size {text!r}: expected bytes such as 4096, 64M, 1G"
        ) from None


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_run(
    args: argparse.Namespace,
    h0: ControlClient,
    h1: ControlClient,
    region: dict[str, Any],
    pids: dict[str, int],
    mtu: int,
    seed: int,
) -> dict[str, Any]:
    """One transfer h0 -> h1 and its figures."""
    s0, s1 = h0.stats()["stats"], h1.stats()["stats"]
    t = h0.transfer(
        "h1", region["addr"], region["rkey"], args.size, seed=seed,
        message_size=args.message_size, policy=args.policy,
    )  # fmt: skip
    # the pattern data is made before the reply: CPU is measured from here
    cpu0 = {h: cpu_seconds(pid) for h, pid in pids.items()}
    started = time.monotonic()
    while True:
        reply = h0.wait([t["transfer"]], timeout=1.0)
        done = reply["transfers"][str(t["transfer"])]
        if not args.quiet:
            pct = 100 * done["bytes_completed"] / args.size
            print(f"  {pct:5.1f}%  {time.monotonic() - started:6.1f} s", file=sys.stderr)
        if reply["complete"]:
            break
    wall = time.monotonic() - started
    cpu1 = {h: cpu_seconds(pid) for h, pid in pids.items()}
    e0, e1 = h0.stats()["stats"], h1.stats()["stats"]
    verified = bool(h1.verify("bench", seed=seed)["match"])
    elapsed = max(float(done["elapsed"]), 1e-9)

    def delta(a: dict[str, Any], b: dict[str, Any], key: str) -> int:
        return int(b["core"][key]) - int(a["core"][key])

    data_pkts = delta(s0, e0, "data_packets_sent")
    ctrl_pkts = delta(s1, e1, "packets_sent")
    used = {h: cpu1[h] - cpu0[h] for h in pids}
    return {
        "state": done["state"],
        "verified": verified,
        "elapsed_s": elapsed,
        "data_packets": data_pkts,
        "data_pps": data_pkts / elapsed,
        "control_packets": ctrl_pkts,
        "control_pps": ctrl_pkts / elapsed,
        "goodput_mbps": args.size * 8 / elapsed / 1e6,
        "retransmits": sum(e0["core"]["retransmits"].values())
        - sum(s0["core"]["retransmits"].values()),
        "retransmits_by_cause": {
            cause: n - s0["core"]["retransmits"].get(cause, 0)
            for cause, n in e0["core"]["retransmits"].items()
        },
        "cpu_h0_sender": used["h0"] / wall,
        "cpu_h1_receiver": used["h1"] / wall,
        "cpu_us_per_data_packet_sender": used["h0"] / max(data_pkts, 1) * 1e6,
        "cpu_us_per_data_packet_receiver": used["h1"] / max(data_pkts, 1) * 1e6,
        "rtt_p50_ms": e0["core"]["rtt"].get("p50", 0.0) * 1e3,
        "rtt_p99_ms": e0["core"]["rtt"].get("p99", 0.0) * 1e3,
        "kernel_drops_receiver": sum(p["kernel_drops"] for p in e1["planes"].values())
        - sum(p["kernel_drops"] for p in s1["planes"].values()),
        "load_average": os.getloadavg()[0],
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Set up the namespaces and agents, measure, tear down; returns the figures."""
    topo = load_topology(shipped_topology("small")).with_(planes=args.planes)
    if args.rate:
        topo = topo.with_(link={**topo.as_dict()["link"], "rate_mbps": args.rate})
    work = Path(tempfile.mkdtemp(prefix="agb-"))
    topo_file = work / "bench.yaml"
    data = topo.as_dict()
    data["name"] = "agentbench"
    topo_file.write_text(yaml.safe_dump(data))
    fabric = Fabric(load_topology(topo_file))
    mtu = fabric.topology.mtu
    extra = ["--log-level", "warning", "--window", str(args.window), "--cc", args.cc]
    for param in args.cc_param:
        extra += ["--cc-param", param]
    if not args.rx_ring:
        extra.append("--no-rx-ring")
    if not args.rate:
        extra.append("--no-pace")
    runs = []
    with BackToBack(fabric, topo_file, ("h0", "h1"), prefix="agb", workdir=work) as net:
        net.start_agent("h0", *extra)
        net.start_agent("h1", *extra)
        pids = {h: net.agents[h].pid for h in ("h0", "h1")}
        idle0 = {h: cpu_seconds(pid) for h, pid in pids.items()}
        time.sleep(args.idle)
        idle = {h: (cpu_seconds(pid) - idle0[h]) / args.idle for h, pid in pids.items()}
        with net.client("h0", timeout=60) as h0, net.client("h1", timeout=60) as h1:
            region = h1.register("bench", args.size)
            for n in range(args.runs):
                result = one_run(args, h0, h1, region, pids, mtu, seed=n + 1)
                runs.append(result)
                print(
                    f"run {n + 1}: {result['data_pps']:,.0f} data packets/s, "
                    f"{result['control_pps']:,.0f} control packets/s, "
                    f"CPU {100 * result['cpu_h0_sender']:.0f}% / "
                    f"{100 * result['cpu_h1_receiver']:.0f}%, "
                    f"RTT p50 {result['rtt_p50_ms']:.1f} ms, load {result['load_average']:.1f}",
                    file=sys.stderr,
                )

    def median(key: str) -> float:
        return float(statistics.median(r[key] for r in runs))

    return {
        "benchmark": "agent_pps",
        "planes": args.planes,
        "payload_bytes": mtu,
        "size_bytes": args.size,
        "runs": args.runs,
        "message_size": args.message_size,
        "policy": args.policy,
        "cc": args.cc,
        "cc_params": args.cc_param,
        "rx_ring": args.rx_ring,
        "window_messages": args.window,
        "all_done": all(r["state"] == "done" for r in runs),
        "all_verified": all(r["verified"] for r in runs),
        "data_pps": median("data_pps"),
        "data_pps_best": max(r["data_pps"] for r in runs),
        "control_pps": median("control_pps"),
        "goodput_mbps": median("goodput_mbps"),
        "retransmits": sum(r["retransmits"] for r in runs),
        "kernel_drops_receiver": sum(r["kernel_drops_receiver"] for r in runs),
        "cpu_h0_sender": median("cpu_h0_sender"),
        "cpu_h1_receiver": median("cpu_h1_receiver"),
        "cpu_us_per_data_packet_sender": median("cpu_us_per_data_packet_sender"),
        "cpu_us_per_data_packet_receiver": median("cpu_us_per_data_packet_receiver"),
        "cpu_idle_h0": idle["h0"],
        "cpu_idle_h1": idle["h1"],
        "rtt_p50_ms": median("rtt_p50_ms"),
        "load_average": median("load_average"),
        "cpus": os.cpu_count(),
        "target_pps": TARGET_PPS,
        "per_run": runs,
    }


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    handle_termination()  # SIGTERM cleans up as Ctrl-C does: nothing is left running
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--size", type=parse_size, default=parse_size("256M"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--planes", type=int, default=1, choices=range(1, 9))
    parser.add_argument("--message-size", type=parse_size, default=parse_size("1M"))
    parser.add_argument("--window", type=int, default=64, help="messages in flight")
    parser.add_argument("--policy", default="mrc")
    parser.add_argument("--cc", default="fixed", help="congestion control of both agents")
    parser.add_argument(
        "--cc-param", action="append", default=None, metavar="NAME=VALUE",
        help="congestion control parameter (repeatable; default window=1024 for fixed)",
    )  # fmt: skip
    parser.add_argument("--no-rx-ring", dest="rx_ring", action="store_false")
    parser.add_argument(
        "--rate",
        type=float,
        help="pace each NIC at this link rate in Mb/s, as on a fabric (default: not paced, the "
        "agents' own packet rate)",
    )
    parser.add_argument("--idle", type=float, default=2.0, help="seconds of idle CPU measurement")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    args = parser.parse_args(argv)
    if args.cc_param is None:
        args.cc_param = ["window=1024"] if args.cc == "fixed" else []
    if args.runs < 1:
        parser.error("--runs: expected at least 1")
    reason = netns_available()
    if reason is not None:
        print(f"agent_pps: {reason}", file=sys.stderr)
        return 1
    r = run(args)
    params = f" ({', '.join(r['cc_params'])})" if r["cc_params"] else ""
    print(
        f"agent_pps: {r['planes']} plane(s), {r['payload_bytes']}-byte payload, "
        f"{r['runs']} x {r['size_bytes'] / 2**20:.0f} MiB, cc {r['cc']}{params}, "
        f"rx ring {'on' if r['rx_ring'] else 'off'}; all done {r['all_done']}, "
        f"verified {r['all_verified']}\n"
        f"  h0 -> h1 data    {r['data_pps']:10,.0f} packets/s median "
        f"(best {r['data_pps_best']:,.0f}; {r['goodput_mbps']:,.0f} Mb/s goodput, "
        f"{r['retransmits']} retransmits, {r['kernel_drops_receiver']} socket drops)\n"
        f"  h1 -> h0 control {r['control_pps']:10,.0f} packets/s median\n"
        f"  CPU: sender {100 * r['cpu_h0_sender']:.0f}% of a core "
        f"({r['cpu_us_per_data_packet_sender']:.1f} us/packet), receiver "
        f"{100 * r['cpu_h1_receiver']:.0f}% ({r['cpu_us_per_data_packet_receiver']:.1f} "
        f"us/packet); idle {100 * r['cpu_idle_h0']:.1f}% / {100 * r['cpu_idle_h1']:.1f}%\n"
        f"  RTT p50 {r['rtt_p50_ms']:.1f} ms; load average {r['load_average']:.1f} "
        f"on {r['cpus']} CPUs\n"
        f"  target {TARGET_PPS:,} packets/s: {'met' if r['data_pps'] >= TARGET_PPS else 'not met'}"
    )
    if args.out is not None:
        args.out.write_text(json.dumps(r, indent=2) + "\n")
    return 0 if r["all_done"] and r["all_verified"] else 1


if __name__ == "__main__":
    sys.exit(main())
