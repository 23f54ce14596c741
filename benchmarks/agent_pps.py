"""Agent packet rate: two mrc-host agents back to back over veths, one long transfer.

Two hosts of one rack (h0 -> h1 of topologies/small.yaml, reduced to ``--planes`` planes) run
as real ``mrc-host --direct`` processes in namespaces ``agb<pid>-h0`` / ``agb<pid>-h1`` joined by
one veth pair per plane. h0 writes ``--size`` bytes of pattern data to a region of h1 at the
topology's 4096-byte payload; the receiver verifies the data. Reported: data packets/s (h0 ->
h1), control packets/s (ACKs, h1 -> h0), goodput, retransmissions, and the CPU each agent used
(user + system seconds over the transfer, as a share of one core).

    sudo .venv/bin/python benchmarks/agent_pps.py [--size 256M] [--planes 1] [--out result.json]

Target: 50,000 packets/s at 4096-byte payload.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from host.agent_testnet import BackToBack, netns_available  # noqa: E402
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


def run(args: argparse.Namespace) -> dict[str, Any]:
    """One measurement; returns the figures."""
    base = load_topology(shipped_topology("small"))
    topo = base.with_(planes=args.planes)
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
    with BackToBack(fabric, topo_file, ("h0", "h1"), prefix="agb", workdir=work) as net:
        net.start_agent("h0", *extra)
        net.start_agent("h1", *extra)
        pids = {h: net.agents[h].pid for h in ("h0", "h1")}
        idle0 = {h: cpu_seconds(pid) for h, pid in pids.items()}
        time.sleep(args.idle)
        idle = {h: (cpu_seconds(pid) - idle0[h]) / args.idle for h, pid in pids.items()}
        with net.client("h0", timeout=30) as h0, net.client("h1", timeout=30) as h1:
            region = h1.register("bench", args.size)
            s0, s1 = h0.stats()["stats"], h1.stats()["stats"]
            t = h0.transfer(
                "h1", region["addr"], region["rkey"], args.size, seed=1,
                message_size=args.message_size, policy=args.policy,
            )  # fmt: skip
            # the pattern data is made before the reply: measure from here
            cpu0 = {h: cpu_seconds(pid) for h, pid in pids.items()}
            started = time.monotonic()
            last = 0
            while True:
                reply = h0.wait([t["transfer"]], timeout=1.0)
                done = reply["transfers"][str(t["transfer"])]
                if not args.quiet:
                    pct = 100 * done["bytes_completed"] / args.size
                    elapsed = time.monotonic() - started
                    rate = (done["bytes_completed"] - last) / max(mtu, 1)
                    last = done["bytes_completed"]
                    print(f"  {pct:5.1f}%  {elapsed:6.1f} s  ~{rate:,.0f} data packets in the last second",
                          file=sys.stderr)  # fmt: skip
                if reply["complete"]:
                    break
            wall = time.monotonic() - started
            cpu1 = {h: cpu_seconds(pid) for h, pid in pids.items()}
            e0, e1 = h0.stats()["stats"], h1.stats()["stats"]
            verified = h1.verify("bench", seed=1)["match"]
    elapsed = done["elapsed"]

    def delta(a: dict[str, Any], b: dict[str, Any], key: str) -> int:
        return int(b["core"][key]) - int(a["core"][key])

    data_pkts = delta(s0, e0, "data_packets_sent")
    ctrl_pkts = delta(s1, e1, "packets_sent")
    retx_before = sum(s0["core"]["retransmits"].values())
    retx_after = sum(e0["core"]["retransmits"].values())
    result = {
        "benchmark": "agent_pps",
        "planes": args.planes,
        "payload_bytes": mtu,
        "size_bytes": args.size,
        "message_size": args.message_size,
        "policy": args.policy,
        "cc": args.cc,
        "cc_params": args.cc_param,
        "window_messages": args.window,
        "state": done["state"],
        "verified": verified,
        "elapsed_s": elapsed,
        "data_packets": data_pkts,
        "data_pps": data_pkts / elapsed,
        "control_packets": ctrl_pkts,
        "control_pps": ctrl_pkts / elapsed,
        "goodput_mbps": args.size * 8 / elapsed / 1e6,
        "retransmits": retx_after - retx_before,
        "cpu_h0_sender": (cpu1["h0"] - cpu0["h0"]) / wall,
        "cpu_h1_receiver": (cpu1["h1"] - cpu0["h1"]) / wall,
        "cpu_us_per_data_packet_sender": (cpu1["h0"] - cpu0["h0"]) / max(data_pkts, 1) * 1e6,
        "cpu_us_per_data_packet_receiver": (cpu1["h1"] - cpu0["h1"]) / max(data_pkts, 1) * 1e6,
        "cpu_idle_h0": idle["h0"],
        "cpu_idle_h1": idle["h1"],
        "rtt_p50_ms": e0["core"]["rtt"].get("p50", 0.0) * 1e3,
        "rtt_p99_ms": e0["core"]["rtt"].get("p99", 0.0) * 1e3,
        "cwnd_packets_end": e0["core"]["qps"][str(t["qpn"])]["cwnd"] / mtu,
        "load_average": os.getloadavg()[0],
        "kernel_drops_receiver": sum(p["kernel_drops"] for p in e1["planes"].values()),
        "target_pps": TARGET_PPS,
    }
    return result


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=parse_size, default=parse_size("256M"))
    parser.add_argument("--planes", type=int, default=1, choices=range(1, 9))
    parser.add_argument("--message-size", type=parse_size, default=parse_size("1M"))
    parser.add_argument("--window", type=int, default=64, help="messages in flight")
    parser.add_argument("--policy", default="mrc")
    parser.add_argument(
        "--cc", default="nscc", help="congestion control of both agents (nscc, fixed)"
    )
    parser.add_argument(
        "--cc-param", action="append", default=[], metavar="NAME=VALUE",
        help="congestion control parameter for both agents (repeatable), e.g. window=512",
    )  # fmt: skip
    parser.add_argument("--idle", type=float, default=2.0, help="seconds of idle CPU measurement")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    reason = netns_available()
    if reason is not None:
        print(f"agent_pps: {reason}", file=sys.stderr)
        return 1
    result = run(args)
    print(
        f"agent_pps: {result['planes']} plane(s), {result['payload_bytes']}-byte payload, "
        f"{result['size_bytes'] / 2**20:.0f} MiB in {result['elapsed_s']:.2f} s "
        f"({result['state']}, verified {result['verified']})\n"
        f"  h0 -> h1 data    {result['data_pps']:10,.0f} packets/s  "
        f"({result['goodput_mbps']:,.0f} Mb/s goodput, {result['retransmits']} retransmits, "
        f"{result['kernel_drops_receiver']} dropped by the receiver's socket buffer)\n"
        f"  h1 -> h0 control {result['control_pps']:10,.0f} packets/s\n"
        f"  CPU: sender {100 * result['cpu_h0_sender']:.0f}% of a core "
        f"({result['cpu_us_per_data_packet_sender']:.1f} us/packet), "
        f"receiver {100 * result['cpu_h1_receiver']:.0f}% "
        f"({result['cpu_us_per_data_packet_receiver']:.1f} us/packet); idle: "
        f"{100 * result['cpu_idle_h0']:.1f}% / {100 * result['cpu_idle_h1']:.1f}%\n"
        f"  RTT p50 {result['rtt_p50_ms']:.2f} ms, p99 {result['rtt_p99_ms']:.2f} ms, "
        f"cwnd {result['cwnd_packets_end']:.0f} packets, "
        f"load average {result['load_average']:.1f} on {os.cpu_count()} CPUs\n"
        f"  target {TARGET_PPS:,} packets/s: "
        f"{'met' if result['data_pps'] >= TARGET_PPS else 'not met'}"
    )
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if result["state"] == "done" and result["verified"] else 1


if __name__ == "__main__":
    sys.exit(main())
