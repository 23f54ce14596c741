"""Fabric-level performance of the testbed: goodput, recovery, incast, CPU headroom.

Brings fabrics up (Mininet) on each switch target asked for (``--target both``: BMv2 and
switchmodel, one after the other at the same link rate) and runs these measurements through the
experiment runner, each a scenario of its own:

1. **permutation goodput** on the small fabric -- every host sends ``--size`` to one host of the
   other rack; MRC beside single-path and kernel MPTCP, as a fraction of the aggregate plane
   capacity (target for MRC: >= 0.9), with RTOs and EV retirements (target: none, nothing
   failed);
2. **permutation on the default fabric** (4 planes, 16 switches): MRC alone, the same figures,
   at the benchmark's rate and at ``--default-rates`` (5 Mb/s: the 20 Python processes of that
   fabric need most of two cores at 10 Mb/s; the machine's busy share is reported beside);
3. **recovery after a link failure** -- the small permutation with a leaf-spine link failed
   mid-transfer and not repaired; goodput recovery (until goodput is back to 90% of what
   survives, at the sampling resolution) and, for MRC, the EV failover time (fault to the first
   EV of a failed path marked ASSUMED_BAD, median over the QPs that used it), in ms, in base
   RTTs (target <= 10 RTTs) and as real-fabric time; MRC beside MPTCP;
4. **incast** -- three senders to one receiver (small fabric) and eight to one (medium fabric),
   with a shallow buffer, trimming on and off: bottleneck utilisation (target with trimming
   >= 0.9 and >= trimming off + 0.08) and RTOs (target 0);
5. **CPU headroom** -- CPU time of the switch, agent and watch processes over an idle period
   and during the MRC permutation's transfers (from its first progress sample to its last), as
   a share of the machine's cores, and the time-dilation
   margin: the emulated time of one full-size frame on a link over the CPU time a switch hop
   and an agent spend on a packet (the dilation holds while that margin is well above 1).

Figures are printed side by side, one column per target, and written to ``--out`` (JSON) with
the results folders. Every run is strict: one whose machine fell behind (not faithful, see
``experiments/fidelity.py``) stops the benchmark with exit status 3 rather than report the
emulator's figure as MRC's.

    sudo .venv/bin/python benchmarks/fabric.py [--rate 10] [--size 8MiB] [--target both] [--out DIR]
        [--only permutation,default,failure,incast] [--default-rates 5]
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

from experiments.fidelity import machine_ticks
from experiments.runner import UNFAITHFUL_EXIT, Phase, PhaseObserver, UnfaithfulRun, run_scenario
from experiments.scenario import Scenario, parse_scenario
from experiments.testbed import Testbed
from targets.bmv2 import missing_tools
from targets.factory import choose_target
from targets.interrupt import handle_termination

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
        self.machine = machine_ticks()
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

    KINDS = {"switch": "switches", "agent": "agents", "watch": "watch"}

    def pids(self) -> dict[int, str]:
        return {p.pid: self.KINDS[p.kind] for p in self.testbed.processes()}

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
            self.machine = machine_ticks()

    def machine_busy(self) -> float:
        """Share of the machine's CPU time (all cores, every process) busy since reset."""
        busy, total = machine_ticks()
        return (busy - self.machine[0]) / max(total - self.machine[1], 1)


class MeteredPhases(PhaseObserver):
    """CPU use of the testbed's processes over the transfers of each phase (``marks``, by
    transport name): from the phase's first progress sample (its agents started, its regions
    registered, its transfers not yet begun) to its last (every flow complete), so that the
    agents' start-up and the receivers' byte checks are not counted as per-packet CPU."""

    def __init__(self, cpu: CpuMeter) -> None:
        self.cpu = cpu
        self.marks: dict[str, dict[str, float]] = {}
        self.began: float | None = None

    def started(self, phase: Phase) -> None:
        self.began = None

    def sampled(self, phase: Phase) -> None:
        if self.began is None:
            self.cpu.reset()
            self.began = time.monotonic()
            return
        self.cpu.read()
        took = max(time.monotonic() - self.began, 1e-9)
        self.marks[phase.transport.name] = {
            "cores": self.cpu.used / took,
            "machine_busy": self.cpu.machine_busy(),
            **dict(self.cpu.by_kind),
        }


def scenario(
    name: str,
    rate: float,
    size: str,
    transports: list[Any],
    duration: float,
    faults: list[dict[str, Any]] | None = None,
    topology: str = "small",
    **extra: Any,
) -> Any:
    data: dict[str, Any] = {
        "name": name,
        "topology": topology,
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


def incast_scenario(topology: str, rate: float, senders: int, total: str) -> Any:
    """``senders`` hosts to h0 with a shallow buffer, trimming on and off."""
    return parse_scenario(
        {
            "name": f"incast-{senders}",
            "topology": topology,
            "link_rate_mbps": rate,
            "link_delay_us": 0,
            "queue_depth": 8,
            "trim_threshold": 4,
            "ecn_threshold": 2,
            "duration_s": 30,
            "sample_interval_s": 0.1,
            "transports": [
                {"name": "mrc-trim", "transport": "mrc", "trimming": True},
                {"name": "mrc-no-trim", "transport": "mrc", "trimming": False},
            ],
            "workloads": [
                {
                    "kind": "incast",
                    "receiver": "h0",
                    "senders": [f"h{i}" for i in range(1, senders + 1)],
                    "message_bytes": "256KiB",
                    "total_bytes": total,
                    "start_s": 0.2,
                }
            ],
        }
    )


MEASUREMENTS = ("permutation", "default", "failure", "incast")


def main(argv: list[str] | None = None) -> int:
    handle_termination()  # SIGTERM cleans up as Ctrl-C does: nothing is left running
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=10.0, help="link rate in Mb/s (default 10)")
    parser.add_argument("--size", default="8MiB", help="bytes per flow of the permutation")
    parser.add_argument(
        "--target",
        default="both",
        choices=["both", "auto", "bmv2", "model"],
        help="switch target(s) (default both: BMv2 where installed, and switchmodel)",
    )
    parser.add_argument(
        "--only",
        default=",".join(MEASUREMENTS),
        help=f"comma-separated measurements (default all: {','.join(MEASUREMENTS)})",
    )
    parser.add_argument(
        "--default-rates",
        type=lambda text: [float(x) for x in text.split(",") if x],
        default=[5.0],
        help="further link rates (Mb/s, comma-separated) of the default-fabric permutation "
        "(default 5; the benchmark's --rate is always measured)",
    )
    parser.add_argument("--out", type=Path, help="folder for the results (default: a temp dir)")
    args = parser.parse_args(argv)
    only = [m.strip() for m in args.only.split(",") if m.strip()]
    unknown = sorted(set(only) - set(MEASUREMENTS))
    if unknown:
        print(f"--only {args.only}: unknown {unknown}; expected some of {MEASUREMENTS}",
              file=sys.stderr)  # fmt: skip
        return 2
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
        try:
            figures["targets"][target] = measure(
                target, args.rate, args.size, out / target, only, args.default_rates
            )
        except UnfaithfulRun as exc:
            print(f"benchmarks/fabric.py: {exc}", file=sys.stderr)
            return UNFAITHFUL_EXIT
    (out / "fabric.json").write_text(json.dumps(figures, indent=2) + "\n")
    report(figures)
    print(f"results: {out}")
    return 0


def _ms(value: float | None) -> float | None:
    return None if value is None else value * 1000


def _us(value: float | None) -> float | None:
    return None if value is None else value * 1e6


def permutation_figures(
    metrics: dict[str, Any], cpu: dict[str, dict[str, float]], frame_time: float
) -> dict[str, Any]:
    """Goodput, RTOs, EV retirements and CPU of each transport of a permutation run."""
    out: dict[str, Any] = {}
    for k, v in metrics.items():
        entry: dict[str, Any] = {
            "goodput_fraction": v["goodput_fraction"],
            "goodput_mbps": v["goodput_bps"] / 1e6,
            "rtos": v["rtos"],
            "ev_retirements": v.get("ev_retirements", 0),
            "complete": v["complete"],
        }
        used = cpu.get(k)
        if used:
            entry["cpu_cores"] = used["cores"]
            entry["machine_busy"] = used["machine_busy"]
            # the dilation margin: a frame's emulated time over the CPU time spent on it per
            # switch hop (3 between racks) and per agent (sender and receiver)
            packets = max(v["delivered_bytes"] / 4096, 1.0)
            switch_hop = used["switches"] / (packets * 3)
            agent = used["agents"] / (packets * 2)
            entry["cpu_per_switch_hop_us"] = switch_hop * 1e6
            entry["cpu_per_agent_packet_us"] = agent * 1e6
            entry["dilation_margin"] = frame_time / max(switch_hop, agent, 1e-12)
        out[k] = entry
    return out


def measure(
    target: str, rate: float, size: str, out: Path, only: list[str], default_rates: list[float]
) -> dict[str, Any]:
    """The measurements on one switch target; results folders go under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    first = scenario("bench", rate, size, ["mrc"], 30)
    testbed = Testbed(first.topology, target, state_path=out / "run" / "state.json")
    figures: dict[str, Any] = {
        "dilation": first.topology.dilation,
        "nominal_rate_gbps": first.topology.nominal_rate_gbps,
    }
    quiet = lambda _line: None  # noqa: E731 -- the runner's chatter is not wanted here
    testbed.up()
    cpu = CpuMeter(testbed)
    metered = MeteredPhases(cpu)
    marks = metered.marks

    def run(scenario: Scenario, name: str) -> dict[str, dict[str, Any]]:
        """Run ``scenario`` metered; its metrics as metrics.json holds them."""
        metrics = run_scenario(scenario, out / name, testbed=testbed, progress=False,
                               show=quiet, observers=[metered], strict=True)  # fmt: skip
        return {k: v.as_json() for k, v in metrics.items()}

    def rebuild(topology: Any) -> Testbed:
        nonlocal testbed
        testbed.down()
        testbed = Testbed(topology, target, state_path=out / "run" / "state.json")
        cpu.testbed = testbed
        testbed.up()
        return testbed

    try:
        cpu.reset()
        time.sleep(5.0)
        cpu.read()
        figures["cpu_idle_cores"] = cpu.used / 5.0
        figures["cpu_idle_by_kind"] = {k: v / 5.0 for k, v in cpu.by_kind.items()}

        if "permutation" in only:
            perm = scenario("permutation", rate, size, ["mrc", "single-path", "mptcp"], 30)
            marks.clear()
            m1 = run(perm, "permutation")
            figures["permutation"] = permutation_figures(m1, marks, perm.topology.frame_time)

        if "failure" in only:
            fail = scenario(
                "failure",
                rate,
                "16MiB",
                ["mrc", "mptcp"],
                20,
                faults=[{"kind": "link_down", "at_s": 3.0, "link": LINK}],
                # the recovery has the resolution of one sample: 50 ms is 3.5 base RTTs at
                # 10 Mb/s (100 ms would be 7)
                sample_interval_s=0.05,
            )
            m2 = run(fail, "failure")
            figures["failure"] = {}
            for k, v in m2.items():
                rec = v["recovery"][0] if v["recovery"] else {}
                base = v["base_rtt_s"]
                took = rec.get("recovery_s")
                figures["failure"][k] = {
                    "goodput_recovery_ms": _ms(took),
                    "goodput_recovery_rtts": took / base if took is not None and base else None,
                    "goodput_recovery_real_us": _us(rec.get("recovery_real_s")),
                    "ev_failover_p50_ms": _ms(rec.get("ev_failover_p50_s")),
                    "ev_failover_max_ms": _ms(rec.get("ev_failover_max_s")),
                    "ev_failover_p50_rtts": rec.get("ev_failover_p50_rtts"),
                    "ev_failover_p50_real_us": _us(rec.get("ev_failover_p50_real_s")),
                    "base_rtt_ms": _ms(base),
                    "base_rtt_real_us": _us(v.get("base_rtt_real_s")),
                    "goodput_fraction": v["goodput_fraction"],
                    "rtos": v["rtos"],
                    "complete": v["complete"],
                }

        if "default" in only:
            # at the benchmark's rate, and at lower ones where 16 switches and 4 agents of 4
            # NICs each leave the machine's cores headroom (the dilation margin)
            for wide_rate in sorted({rate, *default_rates}, reverse=True):
                label = f"mrc-{wide_rate:g}mbps"
                wide = scenario(
                    "default-permutation", wide_rate, size, [{"name": label, "transport": "mrc"}],
                    30, topology="default",
                )  # fmt: skip
                rebuild(wide.topology)
                marks.clear()
                m4 = run(wide, f"default-{wide_rate:g}")
                figures.setdefault("default", {}).update(
                    permutation_figures(m4, marks, wide.topology.frame_time)
                )

        if "incast" in only:
            figures["incast"] = {}
            # the incasts need the shallow buffer: each runs on a fabric of its own
            for label, topo, senders, total in (
                ("3 -> 1", "small", 3, "6MiB"),
                ("8 -> 1", "medium", 8, "3MiB"),
            ):
                inc = incast_scenario(topo, rate, senders, total)
                rebuild(inc.topology)
                m3 = run(inc, f"incast-{senders}")
                figures["incast"][label] = {
                    k: {
                        "bottleneck_utilisation": v["goodput_fraction"],
                        "rtos": v["rtos"],
                        "nacks": v["nacks"],
                        "trims": v["switch_totals"]["trimmed"],
                        "drops": v["switch_totals"]["drops"],
                        "ev_retirements": v.get("ev_retirements", 0),
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
    first = by[targets[0]]
    print(
        f"fabrics at {f['rate_mbps']:g} Mb/s per link standing for "
        f"{first['nominal_rate_gbps']:g} Gb/s (dilation {first['dilation']:,.0f}), "
        f"{f['size']} per flow, {cores} cores"
    )
    width = 30

    def row(label: str, cells: list[str]) -> None:
        print(f"  {label:<44}" + "".join(f"  {c:>{width}}" for c in cells))

    row("", targets)
    row("idle testbed CPU (cores)", [f"{by[t]['cpu_idle_cores']:.2f}" for t in targets])

    def permutation(key: str, title: str) -> None:
        if key not in first:
            return
        print(title)
        for k in first[key]:
            cells = []
            for t in targets:
                v = by[t].get(key, {}).get(k)
                cells.append(
                    "-"
                    if v is None
                    else f"{v['goodput_fraction']:.2f}, {v['rtos']:.0f} RTO, "
                    f"{v['ev_retirements']} EVs retired" + ("" if v["complete"] else " (inc.)")
                )
            row(f"   {k}", cells)
        for k in first[key]:
            row(
                f"   CPU during {k}: testbed cores, machine busy",
                [
                    f"{_fmt(by[t].get(key, {}).get(k, {}).get('cpu_cores'))}, "
                    f"{_fmt(by[t].get(key, {}).get(k, {}).get('machine_busy'), '.0%')}"
                    for t in targets
                ],
            )
        for k in first[key]:
            if not k.startswith("mrc"):
                continue
            mrc = [by[t].get(key, {}).get(k, {}) for t in targets]
            row(
                f"   {k}: CPU per switch hop / agent packet (us)",
                [
                    f"{_fmt(v.get('cpu_per_switch_hop_us'), '.0f')} / "
                    f"{_fmt(v.get('cpu_per_agent_packet_us'), '.0f')}"
                    for v in mrc
                ],
            )
            row(
                f"   {k}: dilation margin (frame time / CPU)",
                [_fmt(v.get("dilation_margin"), ".0f") for v in mrc],
            )

    permutation(
        "permutation",
        "1. permutation, small fabric: goodput / capacity (target MRC >= 0.9, 0 EVs retired)",
    )
    permutation(
        "default",
        "2. permutation, default fabric (4 planes): goodput / capacity (target >= 0.9, 0 retired)",
    )
    if "failure" in first:
        print("3. link failure: goodput recovery and EV failover (target <= 10 base RTTs)")
        for k in first["failure"]:
            rec, fail = [], []
            for t in targets:
                v = by[t].get("failure", {}).get(k, {})
                rec.append(
                    f"{_fmt(v.get('goodput_recovery_ms'), '.0f')} ms "
                    f"({_fmt(v.get('goodput_recovery_rtts'), '.1f')} RTT, "
                    f"{_fmt(v.get('goodput_recovery_real_us'), '.1f')} us)"
                )
                fail.append(
                    f"{_fmt(v.get('ev_failover_p50_ms'), '.1f')} ms "
                    f"({_fmt(v.get('ev_failover_p50_rtts'), '.1f')} RTT, "
                    f"{_fmt(v.get('ev_failover_p50_real_us'), '.2f')} us)"
                )
            row(f"   {k} goodput back to 90%", rec)
            if k == "mrc":
                row(f"   {k} EV failover p50", fail)
        row(
            "   base RTT (ms; real us)",
            [
                f"{_fmt(by[t].get('failure', {}).get('mrc', {}).get('base_rtt_ms'))}; "
                f"{_fmt(by[t].get('failure', {}).get('mrc', {}).get('base_rtt_real_us'))}"
                for t in targets
            ],
        )
    if "incast" in first:
        print(
            "4. incast: bottleneck utilisation (target trimming >= 0.9 and >= off + 0.08, 0 RTOs;"
            " with trimming 0 EVs retired: nothing failed)"
        )
        for label in first["incast"]:
            for k in first["incast"][label]:
                cells = []
                for t in targets:
                    v = by[t].get("incast", {}).get(label, {}).get(k)
                    cells.append(
                        "-"
                        if v is None
                        else f"{v['bottleneck_utilisation']:.2f}, {v['rtos']:.0f} RTO, "
                        f"{v['trims']} trims, {v['drops']} drops, "
                        f"{v.get('ev_retirements', 0)} EVs retired"
                    )
                row(f"   {label} {k}", cells)


if __name__ == "__main__":
    sys.exit(main())
