"""Fabric-level performance of the testbed: goodput, recovery, incast, CPU headroom.

Brings the small fabric up (Mininet) on each switch target asked for (``--target both``: BMv2
and switchmodel, one after the other at the same link rate) and runs four measurements through
the experiment runner, each a scenario of its own:

1. **permutation goodput** -- every host sends ``--size`` to one host of the other rack; MRC
   beside single-path and kernel MPTCP, as a fraction of the aggregate plane capacity
   (target for MRC: >= 0.9);
2. **recovery after a link failure** -- the same permutation with a leaf-spine link failed
   mid-transfer and not repaired; goodput recovery (until goodput is back to 90% of what
   survives, at the sampling resolution) and, for MRC, the EV failover time (fault to the first
   EV of a failed path marked ASSUMED_BAD, median over the QPs that used it), in ms and in base
   RTTs (target <= 10 RTTs); MRC beside MPTCP;
3. **incast** -- three senders to one receiver with a shallow buffer, trimming on and off:
   bottleneck utilisation (target with trimming >= 0.9) and RTOs (target 0);
4. **CPU headroom** -- CPU time of the switch, agent and watch processes over an idle period
   and during the MRC permutation, as a share of the machine's cores.

Figures are printed side by side, one column per target, and written to ``--out`` (JSON) with
the results folders.

    sudo .venv/bin/python benchmarks/fabric.py [--rate 10] [--size 8MiB] [--target both] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from controller.bmv2 import missing_tools
from experiments.fabricnet import choose_target
from experiments.runner import Phase, run_scenario
from experiments.scenario import parse_scenario
from experiments.testbed import Testbed

LINK = ["t0-p0-r0", "t1-p0-s0"]
HZ = os.sysconf("SC_CLK_TCK")


def ticks(pid: int) -> int:
    """CPU ticks (user + system) a process has used so far (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return 0


class CpuMeter:
    """CPU seconds used by the testbed's processes, accumulated per pid between reads.

    A background thread reads every 0.2 s, so processes that are restarted (the agents, between
    transports) are counted up to shortly before they exit; a process first seen after
    :meth:`reset` counts from its start.
    """

    def __init__(self, testbed: Testbed) -> None:
        self.testbed = testbed
        self.last: dict[int, int] = {}
        self.used = 0.0
        self.by_kind = {"switches": 0.0, "agents": 0.0, "watch": 0.0}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self.stop.wait(0.2):
            try:
                self.read()
            except Exception:  # the testbed is being rebuilt
                continue

    def pids(self) -> dict[int, str]:
        out = {
            sw.process.pid: "switches"
            for sw in self.testbed.net.switches.values()
            if sw.process.pid
        }
        out.update({p.pid: "agents" for p in self.testbed.agents.values()})
        if self.testbed.watch is not None:
            out[self.testbed.watch.pid] = "watch"
        return out

    def read(self) -> None:
        with self.lock:
            for pid, kind in self.pids().items():
                now = ticks(pid)
                before = self.last.get(pid, 0)
                if now >= before:
                    seconds = (now - before) / HZ
                    self.used += seconds
                    self.by_kind[kind] += seconds
                    self.last[pid] = now

    def reset(self) -> None:
        with self.lock:
            self.last = {pid: ticks(pid) for pid in self.pids()}
            self.used = 0.0
            self.by_kind = dict.fromkeys(self.by_kind, 0.0)


def scenario(
    name: str,
    rate: float,
    size: str,
    transports: list[Any],
    duration: float,
    faults: list[dict[str, Any]] | None = None,
    **extra: Any,
) -> Any:
    data: dict[str, Any] = {
        "name": name,
        "topology": "small",
        "link_rate_mbps": rate,
        "link_delay_us": 0,
        "duration_s": duration,
        "sample_interval_s": 0.1,
        "transports": transports,
        "workloads": [
            {"kind": "permutation", "message_bytes": "256KiB", "total_bytes": size, "start_s": 0.2}
        ],
        "faults": faults or [],
    }
    data.update(extra)
    return parse_scenario(data)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=10.0, help="link rate in Mb/s (default 10)")
    parser.add_argument("--size", default="8MiB", help="bytes per flow of the permutation")
    parser.add_argument(
        "--target",
        default="both",
        choices=["both", "auto", "bmv2", "model"],
        help="switch target(s) (default both: BMv2 where installed, and switchmodel)",
    )
    parser.add_argument("--out", type=Path, help="folder for the results (default: a temp dir)")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print(
            "benchmarks/fabric.py needs root (Mininet, namespaces): run it with sudo",
            file=sys.stderr,
        )
        return 1
    if args.target == "both":
        targets = ["model"] if missing_tools() else ["bmv2", "model"]
        if missing_tools():
            print(f"BMv2 not measured: {', '.join(missing_tools())} not on PATH", file=sys.stderr)
    else:
        targets = [choose_target(args.target)]
    out = args.out or Path(tempfile.mkdtemp(prefix="mrc-fabric-bench-"))
    out.mkdir(parents=True, exist_ok=True)
    figures: dict[str, Any] = {
        "rate_mbps": args.rate,
        "size": args.size,
        "cores": os.cpu_count(),
        "targets": {},
    }
    for target in targets:
        print(f"measuring on {target} ...", file=sys.stderr)
        figures["targets"][target] = measure(target, args.rate, args.size, out / target)
    (out / "fabric.json").write_text(json.dumps(figures, indent=2) + "\n")
    report(figures)
    print(f"results: {out}")
    return 0


def measure(target: str, rate: float, size: str, out: Path) -> dict[str, Any]:
    """The four measurements on one switch target; results folders go under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    first = scenario("bench", rate, size, ["mrc"], 30)
    testbed = Testbed(first.topology, target, state_path=out / "run" / "state.json")
    figures: dict[str, Any] = {}
    quiet = lambda _line: None  # noqa: E731 -- the runner's chatter is not wanted here
    testbed.up()
    cpu = CpuMeter(testbed)
    try:
        cpu.reset()
        time.sleep(5.0)
        cpu.read()
        figures["cpu_idle_cores"] = cpu.used / 5.0
        figures["cpu_idle_by_kind"] = {k: v / 5.0 for k, v in cpu.by_kind.items()}

        # 1. permutation goodput (with CPU metering of the MRC phase)
        perm = scenario("permutation", rate, size, ["mrc", "single-path", "mptcp"], 30)
        marks: dict[str, float] = {}
        original = Phase.run

        def run_metered(self: Phase) -> Any:
            cpu.reset()
            started = time.monotonic()
            result = original(self)
            cpu.read()
            marks[self.transport.name] = cpu.used / max(time.monotonic() - started, 1e-9)
            return result

        Phase.run = run_metered  # type: ignore[method-assign]
        try:
            m1 = run_scenario(
                perm, out / "permutation", testbed=testbed, progress=False, show=quiet
            )
        finally:
            Phase.run = original  # type: ignore[method-assign]
        figures["permutation"] = {
            k: {
                "goodput_fraction": v["goodput_fraction"],
                "goodput_mbps": v["goodput_bps"] / 1e6,
                "rtos": v["rtos"],
                "complete": v["complete"],
                "cpu_cores": marks.get(k),
            }
            for k, v in m1.items()
        }

        # 2. recovery after a link failure (not repaired during the run)
        fail = scenario(
            "failure",
            rate,
            "16MiB",
            ["mrc", "mptcp"],
            20,
            faults=[{"kind": "link_down", "at_s": 3.0, "link": LINK}],
        )
        m2 = run_scenario(fail, out / "failure", testbed=testbed, progress=False, show=quiet)
        figures["failure"] = {}
        for k, v in m2.items():
            rec = v["recovery"][0] if v["recovery"] else {}
            figures["failure"][k] = {
                "goodput_recovery_ms": None
                if rec.get("recovery_s") is None
                else rec["recovery_s"] * 1000,
                "ev_failover_p50_ms": None
                if rec.get("ev_failover_p50_s") is None
                else rec["ev_failover_p50_s"] * 1000,
                "ev_failover_max_ms": None
                if rec.get("ev_failover_max_s") is None
                else rec["ev_failover_max_s"] * 1000,
                "ev_failover_p50_rtts": rec.get("ev_failover_p50_rtts"),
                "base_rtt_ms": None if v["base_rtt_s"] is None else v["base_rtt_s"] * 1000,
                "goodput_fraction": v["goodput_fraction"],
                "complete": v["complete"],
            }

        # 3. incast with trimming on and off
        incast = parse_scenario(
            {
                "name": "incast",
                "topology": "small",
                "link_rate_mbps": rate,
                "link_delay_us": 0,
                "queue_depth": 8,
                "trim_threshold": 4,
                "ecn_threshold": 2,
                "duration_s": 20,
                "sample_interval_s": 0.1,
                "transports": [
                    {"name": "mrc-trim", "transport": "mrc", "trimming": True},
                    {"name": "mrc-no-trim", "transport": "mrc", "trimming": False},
                ],
                "workloads": [
                    {
                        "kind": "incast",
                        "receiver": "h0",
                        "senders": ["h1", "h2", "h3"],
                        "message_bytes": "256KiB",
                        "total_bytes": "6MiB",
                        "start_s": 0.2,
                    }
                ],
            }
        )
        # The incast needs the shallow buffer: it runs on a fabric of its own.
        testbed.down()
        testbed = Testbed(incast.topology, target, state_path=out / "run" / "state.json")
        cpu.testbed = testbed
        testbed.up()
        m3 = run_scenario(incast, out / "incast", testbed=testbed, progress=False, show=quiet)
        figures["incast"] = {
            k: {
                "bottleneck_utilisation": v["goodput_fraction"],
                "rtos": v["rtos"],
                "nacks": v["nacks"],
                "trims": v["switch_totals"]["trimmed"],
                "drops": v["switch_totals"]["drops"],
                "complete": v["complete"],
            }
            for k, v in m3.items()
        }
    finally:
        cpu.stop.set()
        testbed.down()
    return figures


def _fmt(value: Any, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def report(f: dict[str, Any]) -> None:
    """Print the figures, one column per target."""
    cores = f["cores"] or 1
    targets = list(f["targets"])
    by = f["targets"]
    print(f"fabric small at {f['rate_mbps']:g} Mb/s per link, {f['size']} per flow, {cores} cores")
    width = 24

    def row(label: str, cells: list[str]) -> None:
        print(f"  {label:<44}" + "".join(f"{c:>{width}}" for c in cells))

    row("", targets)
    row(
        "idle testbed CPU (cores)",
        [f"{by[t]['cpu_idle_cores']:.2f}" for t in targets],
    )
    print("1. permutation: goodput / aggregate plane capacity (target MRC >= 0.9)")
    for k in by[targets[0]]["permutation"]:
        cells = []
        for t in targets:
            v = by[t]["permutation"].get(k)
            cells.append(
                "-"
                if v is None
                else f"{v['goodput_fraction']:.2f}, {v['rtos']:.0f} RTO"
                + ("" if v["complete"] else " (inc.)")
            )
        row(f"   {k}", cells)
    for k in by[targets[0]]["permutation"]:
        row(
            f"   CPU during {k} (cores)",
            [_fmt(by[t]["permutation"].get(k, {}).get("cpu_cores")) for t in targets],
        )
    print("2. link failure: goodput recovery and EV failover (target <= 10 base RTTs)")
    for k in by[targets[0]]["failure"]:
        rec, fail = [], []
        for t in targets:
            v = by[t]["failure"].get(k, {})
            base = v.get("base_rtt_ms")
            ms = v.get("goodput_recovery_ms")
            rtts = ms / base if ms is not None and base else None
            rec.append(f"{_fmt(ms, '.0f')} ms ({_fmt(rtts, '.0f')} RTT)")
            fail.append(
                f"{_fmt(v.get('ev_failover_p50_ms'), '.1f')} ms "
                f"({_fmt(v.get('ev_failover_p50_rtts'), '.1f')} RTT)"
            )
        row(f"   {k} goodput back to 90%", rec)
        if k == "mrc":
            row(f"   {k} EV failover p50", fail)
    row(
        "   base RTT (ms)",
        [_fmt(by[t]["failure"].get("mrc", {}).get("base_rtt_ms")) for t in targets],
    )
    print("3. incast 3 -> 1: bottleneck utilisation (target with trimming >= 0.9, 0 RTOs)")
    for k in by[targets[0]]["incast"]:
        cells = []
        for t in targets:
            v = by[t]["incast"].get(k)
            cells.append(
                "-"
                if v is None
                else f"{v['bottleneck_utilisation']:.2f}, {v['rtos']:.0f} RTO, {v['trims']} trims"
            )
        row(f"   {k}", cells)


if __name__ == "__main__":
    sys.exit(main())
