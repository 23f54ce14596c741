"""CPU per packet inside a running fabric: where a switch hop's and an agent packet's CPU goes.

Boots one fabric (``--topology``, default the small one) on one switch target and runs MRC's
fault-free permutation (every host writes ``--size`` to a host of the other rack) ``--runs``
times. For each run it reads every switch and agent process's CPU time from
``/proc/PID/stat`` (user + system, so the figure does not depend on how busy the rest of the
machine is) over two windows:

- the *transfer* window, from the run's first progress sample (the agents are up, the
  transfers not yet started) to the sample that saw every flow complete;
- the whole *phase*, as ``benchmarks/fabric.py`` meters it (agent restarts, region set-up and
  the receivers' byte checks included).

CPU per switch hop is the switches' CPU over three hops per data packet (host, leaf, spine,
leaf, host) and CPU per agent packet the agents' CPU over two (sender and receiver), with data
packets counted as delivered bytes over the topology's payload, as ``benchmarks/fabric.py``
counts them. The CPU each process uses while the fabric idles (5 s before the runs) is
printed beside them: the part of the per-packet figures that does not depend on traffic.

With ``--py-spy PATH`` (the ``py-spy`` profiler, from PyPI) the first run also records one
switch (``--profile-switch``) and one agent (``--profile-agent``) with ``py-spy record`` over
the transfer window, and prints where their CPU went: the functions with the most samples on
the CPU, their own and with what they call (``--perf``: the same with ``perf record``, which
sees the kernel's share as well).

    sudo .venv/bin/python benchmarks/cpu_per_packet.py [--target model|bmv2] [--rate 10]
        [--size 8MiB] [--runs 3] [--py-spy PATH] [--out DIR]

Run it under the fabric lock (``flock /tmp/mrc-fabric.lock ...``); the load average before
and after each run is printed and recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.fidelity import process_ticks  # noqa: E402
from experiments.runner import Phase, PhaseObserver, run_scenario  # noqa: E402
from experiments.scenario import parse_scenario  # noqa: E402
from experiments.testbed import Testbed  # noqa: E402
from targets.factory import choose_target  # noqa: E402

HZ = os.sysconf("SC_CLK_TCK")
#: imported at start by every Python process of the fabric when --cprofile is given (through
#: PYTHONPATH): each thread runs under its own cProfile, all written at exit to DIR/PID.prof
SITECUSTOMIZE = """
import atexit, cProfile, os, pstats, sys, threading
_dir = os.environ.get("MRC_CPROFILE_DIR")
if _dir:
    _profiles = []
    def _thread(*_args):
        sys.setprofile(None)
        profile = cProfile.Profile()
        _profiles.append(profile)
        profile.enable()
    def _dump():
        stats = None
        for profile in list(_profiles):
            profile.disable()
            stats = pstats.Stats(profile) if stats is None else stats.add(profile)
        if stats is not None:
            stats.dump_stats(os.path.join(_dir, f"{os.getpid()}.prof"))
    threading.setprofile(_thread)
    _thread()
    atexit.register(_dump)
"""
SWITCH_HOPS = 3  # host -> leaf -> spine -> leaf -> host
IDLE_SECONDS = 5.0


def snapshot(testbed: Testbed) -> dict[tuple[str, str, int], int]:
    """(kind, name, pid) -> CPU ticks of every switch and agent process."""
    out = {}
    for proc in testbed.processes():
        if proc.kind in ("switch", "agent"):
            used = process_ticks(proc.pid)
            if used is not None:
                out[(proc.kind, proc.name, proc.pid)] = used[0]
    return out


def seconds_by_process(
    before: dict[tuple[str, str, int], int], after: dict[tuple[str, str, int], int]
) -> dict[str, dict[str, float]]:
    """CPU seconds per kind and process between two snapshots (a process that is new in
    ``after`` counts from its start)."""
    out: dict[str, dict[str, float]] = {"switch": {}, "agent": {}}
    for (kind, name, pid), now in after.items():
        out[kind][name] = (now - before.get((kind, name, pid), 0)) / HZ
    return out


def load() -> float:
    """The one-minute load average."""
    return os.getloadavg()[0]


class Recorder:
    """A profiler recording one process (``argv``), stopped with SIGINT (it then writes its
    output)."""

    def __init__(self, argv: list[str]) -> None:
        self.process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    def stop(self) -> None:
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class Windows(PhaseObserver):
    """CPU snapshots at the phase's start and end and at its first and last sample (the
    transfer window), and the profilers of the transfer window."""

    def __init__(self, py_spy: str | None, perf: bool, profile: dict[str, str], out: Path) -> None:
        self.py_spy = py_spy
        self.perf = perf
        self.profile = profile
        self.out = out
        self.marks: dict[str, dict[tuple[str, str, int], int]] = {}
        self.times: dict[str, float] = {}
        self.recorders: list[Recorder] = []

    def _mark(self, phase: Phase, name: str) -> None:
        self.marks[name] = snapshot(phase.testbed)
        self.times[name] = time.monotonic()

    def started(self, phase: Phase) -> None:
        self.marks.clear()
        self._mark(phase, "phase_start")

    def sampled(self, phase: Phase) -> None:
        if "first_sample" not in self.marks:
            self._mark(phase, "first_sample")
            if self.py_spy is not None or self.perf:
                self._record(phase)
        self._mark(phase, "last_sample")

    def _record(self, phase: Phase) -> None:
        pids = {p.name: p.pid for p in phase.testbed.processes()}
        for kind, name in self.profile.items():
            pid = str(pids.get(name, ""))
            if not pid:
                continue
            if self.py_spy is not None:
                out = self.out / f"py-spy-{kind}-{name}.txt"
                argv = [self.py_spy, "record", "--pid", pid, "--rate", "250", "--function"]
                argv += ["--format", "raw", "--output", str(out)]
                self.recorders.append(Recorder(argv))
            if self.perf:
                out = self.out / f"perf-{kind}-{name}.data"
                self.recorders.append(Recorder(["perf", "record", "-g", "-p", pid, "-o", str(out)]))
        self.py_spy, self.perf = None, False  # the first run only

    def finished(self, phase: Phase) -> None:
        for recorder in self.recorders:
            recorder.stop()
        self._mark(phase, "phase_end")


def scenario(topology: str, rate: float, size: str) -> Any:
    """MRC alone on the fault-free permutation."""
    return parse_scenario(
        {
            "name": "cpu-per-packet",
            "topology": topology,
            "link_rate_mbps": rate,
            "link_delay_us": 0,
            "duration_s": 60,
            "sample_interval_s": 0.1,
            "transports": ["mrc"],
            "workloads": [
                {
                    "kind": "permutation",
                    "message_bytes": "256KiB",
                    "total_bytes": size,
                    "start_s": 0.2,
                }
            ],
        }
    )


def per_packet(
    used: dict[str, dict[str, float]], packets: float
) -> dict[str, float | dict[str, float]]:
    """CPU seconds of a window turned into microseconds per switch hop and per agent packet."""
    switches = sum(used["switch"].values())
    agents = sum(used["agent"].values())
    return {
        "switch_cpu_s": switches,
        "agent_cpu_s": agents,
        "us_per_switch_hop": switches / (packets * SWITCH_HOPS) * 1e6,
        "us_per_agent_packet": agents / (packets * 2) * 1e6,
        "by_process_s": {**used["switch"], **used["agent"]},
    }


def top_functions(raw: Path, n: int = 25) -> list[tuple[str, float, float]]:
    """(function, own share, inclusive share) of a py-spy raw (collapsed stacks) file, the
    ``n`` largest by inclusive share of the samples."""
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    samples = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        samples += count
        frames = [
            f.split(" (")[0] + " " + f.rsplit("/", 1)[-1].rstrip(")") for f in stack.split(";")
        ]
        own[frames[-1]] += count
        for frame in set(frames):
            total[frame] += count
    if not samples:
        return []
    return [(f, own[f] / samples, c / samples) for f, c in total.most_common(n)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="model", choices=["model", "bmv2", "auto"])
    parser.add_argument("--topology", default="small")
    parser.add_argument("--rate", type=float, default=10.0, help="link rate in Mb/s (default 10)")
    parser.add_argument("--size", default="8MiB", help="bytes per flow (default 8MiB)")
    parser.add_argument("--runs", type=int, default=3, help="runs of the permutation (default 3)")
    parser.add_argument("--py-spy", help="path of py-spy: profile one switch and one agent")
    parser.add_argument(
        "--perf", action="store_true", help="record one switch and one agent with perf"
    )
    parser.add_argument(
        "--cprofile",
        action="store_true",
        help="run every switch model and agent under cProfile (calls per packet; slower)",
    )
    parser.add_argument("--profile-switch", default="t1-p0-s0")
    parser.add_argument("--profile-agent", default="h0")
    parser.add_argument("--out", type=Path, help="folder for the results (default: a temp dir)")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("benchmarks/cpu_per_packet.py needs root (Mininet): run it with sudo",
              file=sys.stderr)  # fmt: skip
        return 1
    out = args.out or Path(tempfile.mkdtemp(prefix="mrc-cpu-per-packet-"))
    out.mkdir(parents=True, exist_ok=True)
    target = choose_target(args.target)
    if args.cprofile:
        site = out / "site"
        site.mkdir(exist_ok=True)
        (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
        (out / "cprofile").mkdir(exist_ok=True)
        os.environ["PYTHONPATH"] = f"{site}:{os.environ.get('PYTHONPATH', '')}"
        os.environ["MRC_CPROFILE_DIR"] = str(out / "cprofile")
    scen = scenario(args.topology, args.rate, args.size)
    windows = Windows(
        args.py_spy, args.perf, {"switch": args.profile_switch, "agent": args.profile_agent}, out
    )
    figures: dict[str, Any] = {
        "target": target,
        "topology": args.topology,
        "rate_mbps": args.rate,
        "size": args.size,
        "cores": os.cpu_count(),
        "runs": [],
    }
    testbed = Testbed(scen.topology, target, state_path=out / "run" / "state.json")
    testbed.up()
    try:
        before = snapshot(testbed)
        time.sleep(IDLE_SECONDS)
        idle = seconds_by_process(before, snapshot(testbed))
        figures["idle_cores"] = {
            kind: {name: s / IDLE_SECONDS for name, s in by.items()} for kind, by in idle.items()
        }
        for run in range(args.runs):
            load_before = load()
            metrics = run_scenario(scen, out / f"run{run}", testbed=testbed, progress=False,
                                   show=lambda _line: None, observers=[windows])  # fmt: skip
            m = metrics["mrc"].as_json()
            packets = max(m["delivered_bytes"] / scen.topology.mtu, 1.0)
            marks = windows.marks
            entry = {
                "load_before": load_before,
                "load_after": load(),
                "goodput_fraction": m["goodput_fraction"],
                "complete": m["complete"],
                "rtos": m["rtos"],
                "ev_retirements": m.get("ev_retirements", 0),
                "data_packets": packets,
                "pids": {name: pid for _kind, name, pid in marks["first_sample"]},
                "transfer_s": windows.times["last_sample"] - windows.times["first_sample"],
                "transfer": per_packet(
                    seconds_by_process(marks["first_sample"], marks["last_sample"]), packets
                ),
                "phase": per_packet(
                    seconds_by_process(marks["phase_start"], marks["phase_end"]), packets
                ),
            }
            figures["runs"].append(entry)
            print(
                f"run {run}: goodput {entry['goodput_fraction']:.2f}, "
                f"{entry['rtos']:.0f} RTO, {entry['ev_retirements']} EVs retired; "
                f"us per switch hop / agent packet: transfer "
                f"{entry['transfer']['us_per_switch_hop']:.0f} / "
                f"{entry['transfer']['us_per_agent_packet']:.0f}, phase "
                f"{entry['phase']['us_per_switch_hop']:.0f} / "
                f"{entry['phase']['us_per_agent_packet']:.0f}; load "
                f"{load_before:.1f} -> {entry['load_after']:.1f}"
            )
    finally:
        testbed.down()
    runs = figures["runs"]
    for window in ("transfer", "phase"):
        for key in ("us_per_switch_hop", "us_per_agent_packet"):
            figures[f"median_{window}_{key}"] = statistics.median(r[window][key] for r in runs)
    print(
        f"{target}, {args.topology} fabric at {args.rate:g} Mb/s, {args.size} per flow, "
        f"{len(runs)} runs: median us per switch hop / agent packet: transfer "
        f"{figures['median_transfer_us_per_switch_hop']:.0f} / "
        f"{figures['median_transfer_us_per_agent_packet']:.0f}, phase "
        f"{figures['median_phase_us_per_switch_hop']:.0f} / "
        f"{figures['median_phase_us_per_agent_packet']:.0f}"
    )
    idle_cores = figures["idle_cores"]
    for kind in ("switch", "agent"):
        values = list(idle_cores[kind].values())
        if values:
            print(
                f"idle: {kind} processes use {statistics.mean(values) * 100:.1f} % of a core each"
            )
    for raw in sorted(out.glob("py-spy-*.txt")):
        print(f"\n{raw.name}: function (own %, with callees %)")
        for function, own, inclusive in top_functions(raw):
            print(f"  {own * 100:5.1f} {inclusive * 100:5.1f}  {function}")
    for data in sorted(out.glob("perf-*.data")):
        print(f"\n{data.name}: where the CPU went (perf report, self time)")
        report = subprocess.run(
            ["perf", "report", "-i", str(data), "--stdio", "--no-children", "-g", "none",
             "--percent-limit", "1", "--sort", "dso,sym"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        print("\n".join(line for line in report.stdout.splitlines() if line and line[0] != "#"))
    (out / "cpu_per_packet.json").write_text(json.dumps(figures, indent=2) + "\n")
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
