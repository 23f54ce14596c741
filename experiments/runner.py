"""``mrc-testbed run`` and ``report``: run a scenario on a fresh testbed and record its results.

Each transport of the scenario runs in turn on the same fabric (a *phase*): the agents are
restarted so every phase starts clean, the workload's flows start at their times, the faults
fire at theirs, and a sampler records delivered bytes and EV states every
``sample_interval_s``, with the CPU and lags of every switch and agent
(:class:`experiments.fidelity.FidelitySampler`: was the run faithful?); switch counters and
agent statistics are read before and after. A phase ends when every flow completed or at ``duration_s``; then every
fault is undone (links up, switches started) before the next phase.

On the ``sim`` target (:data:`targets.factory.SIM_TARGET`) no testbed is brought up: each phase
runs on a fresh in-memory network in simulated time (:mod:`experiments.sim_target`), kernel
baselines are skipped with a message, and the same results folder is written.

Classes and functions:

- :class:`Phase` -- one transport's run, through the flows of its transport
  (:mod:`experiments.flows`); :class:`FaultLedger` -- the testbed as its faults act on it;
- :func:`run_scenario` -- the whole run into a results folder (see :mod:`experiments.results`);
- :func:`unfaithful` -- the transports whose run was not faithful (``--strict`` fails on them);
- :func:`register` -- the ``run`` and ``report`` subcommands.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from controller.counters import SwitchCounters
from experiments.calibrate import resolve_rate
from experiments.faults import EvFault, Step
from experiments.fidelity import FidelitySampler
from experiments.flows import flows_for
from experiments.jobs.steps import BASELINE_SUFFIX, JOB_COLUMNS, job_rows
from experiments.metrics import FaultMark, TransportMetrics, TransportResult
from experiments.rate import RateError, UnfaithfulRate
from experiments.results import EV_STATES, load_jobs, render, write_raw
from experiments.scenario import Scenario, Transport, load_scenario, shipped_scenario
from experiments.sim_target import SimTargetError, run_phases, sim_operating_point
from experiments.testbed import Testbed
from targets.factory import SIM_TARGET, TARGETS


def counter_rows(counters: Mapping[str, SwitchCounters]) -> dict[str, dict[str, int]]:
    """switch -> trimmed / ecn_marked / drops totals, and ``rx/PORT`` / ``tx/PORT`` bytes of
    every port that carried any."""
    out: dict[str, dict[str, int]] = {}
    for name, c in counters.items():
        row = {
            "trimmed": sum(p.trimmed for p in c.ports),
            "ecn_marked": sum(p.ecn_marked for p in c.ports),
            "drops": sum(c.drops.values()),
        }
        for key in ("rx", "tx"):
            for p in c.ports:
                nbytes = p.rx_bytes if key == "rx" else p.tx_bytes
                if nbytes:
                    row[f"{key}/{p.port}"] = nbytes
        out[name] = row
    return out


def _delta(
    after: dict[str, dict[str, int]], before: dict[str, dict[str, int]]
) -> dict[str, dict[str, int]]:
    out = {}
    for sw, row in after.items():
        base = before.get(sw, {})
        # A rebooted switch starts from zero: its count since then is all there is.
        out[sw] = {k: v - base.get(k, 0) if v >= base.get(k, 0) else v for k, v in row.items()}
    return out


class FaultLedger:
    """The testbed as the faults of a phase act on it (:class:`experiments.faults.FaultTarget`).

    Every action is carried out on the testbed, recorded in the phase's result, and remembered
    until it is reversed, so that :meth:`restore` can leave the fabric to the next phase as it
    found it. Switches are marked when their action began (EVs fail over from then on); a
    plane's spines are killed at the same time, as a plane fails at once.
    """

    def __init__(self, phase: Phase) -> None:
        self.phase = phase
        self.down_links: set[tuple[str, str]] = set()
        self.killed: set[str] = set()

    def link_down(self, a: str, b: str) -> None:
        self.phase.testbed.link_down(a, b)
        self.down_links.add((a, b))
        self.phase.mark("down", f"{a} <-> {b}")

    def link_up(self, a: str, b: str) -> None:
        self.phase.testbed.link_up(a, b)
        self.down_links.discard((a, b))
        self.phase.mark("up", f"{a} <-> {b}")

    def kill_switches(self, names: Sequence[str]) -> None:
        t = self.phase.now()
        threads = [
            threading.Thread(target=self.phase.testbed.kill_switch, args=(name,), daemon=True)
            for name in names
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.killed.update(names)
        for name in names:
            self.phase.mark("kill", name, t)

    def start_switches(self, names: Sequence[str]) -> None:
        t = self.phase.now()
        for name in names:
            if name in self.killed:
                self.phase.testbed.start_switch(name)
                self.killed.discard(name)
            self.phase.mark("start", name, t)

    def set_ev_state(self, fault: EvFault, state: str) -> None:
        """The operator's EV state through the agent's control interface (``set-ev``) on the
        QP of the phase's transport; nothing for the kernel's transports."""
        from host.agent.control_client import ControlClient

        transport = self.phase.transport
        if transport.is_kernel:
            return
        with ControlClient(self.phase.testbed.control_path(fault.host), timeout=10.0) as c:
            c.request("set-ev", peer=fault.peer, policy=transport.kind, state=state, **fault.which)
        self.phase.mark("deny" if state == "DENIED" else "allow", fault.target)

    def restore(self) -> None:
        """Bring every failed link up and start every killed switch.

        A phase whose flows finish before the scenario's own ``up``/``start`` leaves the fabric
        to the next phase as it found it; the action is recorded at the time it happens so
        ``faults.csv`` still shows when the link or switch came back.
        """
        for a, b in list(self.down_links):
            self.link_up(a, b)
        for name in list(self.killed):
            self.phase.testbed.start_switch(name)
            self.killed.discard(name)
            self.phase.mark("start", name)


class PhaseObserver:
    """Hooks around every phase of a run: the progress bar is one, a benchmark adds its own
    (:func:`run_scenario`'s ``observers``). Each does nothing unless overridden."""

    def started(self, phase: Phase) -> None:
        """Before the phase prepares its flows."""

    def sampled(self, phase: Phase) -> None:
        """After each sample of the flows' progress."""

    def finished(self, phase: Phase) -> None:
        """After the phase recorded everything and cleaned up (``phase.result`` is final)."""


class Phase:
    """One transport's run on a running testbed."""

    def __init__(
        self,
        testbed: Testbed,
        scenario: Scenario,
        transport: Transport,
        observers: Sequence[PhaseObserver] = (),
    ) -> None:
        self.testbed = testbed
        self.scenario = scenario
        self.transport = transport
        self.observers = tuple(observers)
        flows = [(s, d) for _, s, d in scenario.flows()]
        self.result = TransportResult(
            name=transport.name, kind=transport.kind, duration=scenario.duration_s, flows=flows
        )
        self.t0 = 0.0
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.ledger = FaultLedger(self)
        self.errors: list[str] = []

    def now(self) -> float:
        """Seconds since the phase started."""
        return time.monotonic() - self.t0

    # -- faults ------------------------------------------------------------------------------

    def apply(self, step: Step) -> None:
        """Carry out one fault step (its actions are recorded in the result)."""
        step.run(self.ledger)

    def _faults(self) -> None:
        for step in self.scenario.timeline():
            if self.stop.wait(max(0.0, step.t - self.now())):
                return
            try:
                self.apply(step)
            except Exception as exc:
                self.errors.append(
                    f"fault {step.action} {step.fault.target} at {step.t:g} s: {exc}"
                )

    def undo_faults(self) -> None:
        """Bring every failed link up and start every killed switch (see
        :meth:`FaultLedger.restore`)."""
        self.ledger.restore()

    def mark(self, action: str, target: str, t: float | None = None) -> None:
        """Record a fault action at ``t`` (default: now)."""
        with self.lock:
            self.result.faults.append(FaultMark(self.now() if t is None else t, action, target))

    # -- the run -----------------------------------------------------------------------------

    def run(self) -> TransportResult:
        """Run the transport's flows with the scenario's faults; returns the records."""
        for observer in self.observers:
            observer.started(self)
        flows = flows_for(self)
        flows.prepare()
        before = counter_rows(self.testbed.control.counters())
        planes_before = self.plane_bytes()
        self.t0 = time.monotonic()
        threads = [threading.Thread(target=self._faults, daemon=True, name="faults")]
        threads += flows.threads()
        for thread in threads:
            thread.start()
        interval = self.scenario.sample_interval_s
        try:
            while self.now() < self.scenario.duration_s:
                flows.sample()
                for observer in self.observers:
                    observer.sampled(self)
                if flows.finished():
                    break
                time.sleep(max(0.0, interval - (self.now() % interval)))
            flows.sample()
        finally:
            self.stop.set()
            for thread in threads:
                thread.join(timeout=15.0)
            flows.finish()
            self.undo_faults()
        self.result.duration = min(self.scenario.duration_s, max(self.now(), interval))
        counted = _delta(counter_rows(self.testbed.control.counters()), before)
        self.result.switches = {
            sw: {k: v for k, v in row.items() if "/" not in k} for sw, row in counted.items()
        }
        self.result.ports = {
            sw: {k: v for k, v in row.items() if "/" in k} for sw, row in counted.items()
        }
        after = self.plane_bytes()
        self.result.planes = {p: after.get(p, 0) - planes_before.get(p, 0) for p in after}
        flows.cleanup()
        for observer in self.observers:
            observer.finished(self)
        return self.result

    def plane_bytes(self) -> dict[str, int]:
        """Bytes sent by every host NIC so far, per plane (from the interface counters)."""
        out: dict[str, int] = {}
        for nic in self.testbed.nic_counters():
            out[str(nic.plane)] = out.get(str(nic.plane), 0) + nic.tx_bytes
        return out

    def live(self) -> dict[str, float]:
        """Figures for the progress bar: goodput of the last second, EVs bad, trims."""
        with self.lock:
            progress = list(self.result.progress)
            evs = self.result.ev_states[-1] if self.result.ev_states else {}
        now = self.now()
        recent = [p for p in progress if p.t >= now - 1.0]
        by_flow: dict[str, list[int]] = {}
        for p in recent:
            by_flow.setdefault(p.flow, []).append(p.delivered)
        rate = sum(max(v) - min(v) for v in by_flow.values()) * 8 / 1.0
        return {
            "goodput_bps": rate,
            "bad": evs.get("ASSUMED_BAD", 0),
            "evs": sum(evs.get(s, 0) for s in EV_STATES),
        }


def run_scenario(
    scenario: Scenario,
    out: Path,
    target: str = "auto",
    *,
    state_path: Path | None = None,
    show: Callable[[str], None] = print,
    progress: bool = True,
    testbed: Testbed | None = None,
    observers: Sequence[PhaseObserver] = (),
    strict: bool = False,
    seed: int = 1,
) -> dict[str, TransportMetrics]:
    """Run every transport of ``scenario`` and write the results folder ``out``; each phase
    tells ``observers`` (and the progress bar) when it starts, samples and ends. ``strict``:
    raise :class:`UnfaithfulRun` (after writing the folder) when a transport's run was not
    faithful, so that a CPU-bound figure is never taken for MRC's. On the ``sim`` target the
    phases run in simulated time on the in-memory network seeded with ``seed`` (observers and
    the progress bar are not used: nothing runs in real time). A ``link_rate_mbps: auto``
    scenario runs at the rate of ``testbed``, else at the rate chosen for the machine
    (:func:`experiments.calibrate.resolve_rate`; on the sim target at its reference rate)."""
    if scenario.auto_rate and testbed is not None:
        scenario = scenario.at_rate(testbed.topology.link_rate_mbps)
    elif scenario.auto_rate:
        scenario = resolve_rate(scenario, target, show, strict=strict)
    if target == SIM_TARGET:
        show(describe(scenario) + f" (target sim: simulated time, seed {seed})")
        results, errors = run_phases(phases(scenario), seed)
        if not results:
            raise SimTargetError(f"{scenario.name}: no transport runs on the sim target")
        point = sim_operating_point(scenario.topology)
    else:
        results, errors, point = _emulate(
            scenario, target, state_path=state_path, show=show, progress=progress,
            testbed=testbed, observers=observers,
        )  # fmt: skip
    write_raw(
        out, dict(scenario.raw), scenario.topology.as_dict(), scenario.sample_interval_s, results,
        operating_point=point,
    )  # fmt: skip
    metrics = render(out)
    for error in errors:
        show(f"warning: {error}")
    print_summary(out, metrics, show)
    behind = unfaithful(metrics)
    if strict and behind:
        raise UnfaithfulRun(f"{out}: not faithful: " + "; ".join(behind))
    return metrics


def _emulate(
    scenario: Scenario,
    target: str,
    *,
    state_path: Path | None,
    show: Callable[[str], None],
    progress: bool,
    testbed: Testbed | None,
    observers: Sequence[PhaseObserver],
) -> tuple[list[TransportResult], list[str], dict[str, Any]]:
    """Every phase of ``scenario`` on a testbed (``testbed``, or one brought up and down here):
    the results, the errors to report and the switches' operating point."""
    own = testbed is None
    tb = testbed or Testbed(
        scenario.topology, target, state_path=state_path,
        agent_args=("--stack-profile", scenario.stack_profile),
    )  # fmt: skip
    results: list[TransportResult] = []
    errors: list[str] = []
    try:
        if own:
            tb.up(progress=show)
        show(describe(scenario))
        point = tb.operating_point()  # while up: what applies the latency is known
        bar = _ProgressBar(scenario, enabled=progress)
        sampler = _FidelityObserver()
        with bar:
            for scenario_run, transport in phases(scenario):
                phase = Phase(tb, scenario_run, transport, observers=[bar, sampler, *observers])
                results.append(phase.run())
                errors += [f"{transport.name}: {e}" for e in phase.errors]
        tb.reset_qos()
    finally:
        if own:
            tb.down()
    return results, errors, point


UNFAITHFUL_EXIT = 3  # the exit status of a run --strict found unfaithful


class UnfaithfulRun(RuntimeError):
    """A strict run fell behind: its figures measure the emulator, not MRC."""


def unfaithful(metrics: Mapping[str, TransportMetrics]) -> list[str]:
    """``"T: CPU-bound from t=..."`` for every transport whose run was not faithful."""
    return [f"{name}: {m.fidelity['verdict']}" for name, m in metrics.items() if not m.faithful]


def phases(scenario: Scenario) -> list[tuple[Scenario, Transport]]:
    """The phases of a run, in order: each transport, after its fault-free baseline
    (``T-baseline``) when the scenario says ``baseline: true``."""
    if not scenario.baseline:
        return [(scenario, t) for t in scenario.transports]
    quiet = scenario.with_(faults=[])
    return [
        pair
        for t in scenario.transports
        for pair in ((quiet, replace(t, name=t.name + BASELINE_SUFFIX)), (scenario, t))
    ]


def describe(scenario: Scenario) -> str:
    """One line saying what the scenario does."""
    loads = ", ".join(
        f"{w.kind} {len(w.flows())} flows x {w.total_bytes / (1 << 20):g} MiB"
        for w in scenario.workloads
    )
    job = scenario.job
    if job is not None:
        steps = " + ".join(f"{c.kind} {c.size / (1 << 20):g} MiB" for c in job.collectives)
        step_text = f"job of {job.steps} steps ({steps}) over {len(job.ranks)} ranks"
        loads = f"{loads}, {step_text}" if loads else step_text
    faults = "; ".join(f"{f.kind} {f.target} at {f.at_s:g} s" for f in scenario.faults)
    names = " vs ".join(t.name for t in scenario.transports)
    names += " (each after its fault-free baseline)" if scenario.baseline else ""
    return f"{scenario.name}: {loads}, {names}" + (f"; {faults}" if faults else "")


def print_summary(
    out: Path, metrics: Mapping[str, TransportMetrics], show: Callable[[str], None]
) -> None:
    """The results folder and the summary table, each through ``show``."""
    from rich.table import Table

    from experiments.metrics import SUMMARY_COLUMNS, summary_rows
    from experiments.topo_cmd import make_console

    def render(table: Table) -> None:
        console = make_console()
        with console.capture() as captured:
            console.print(table)
        show(captured.get().rstrip("\n"))

    files = "  ".join(p.name for p in sorted(out.iterdir()) if p.suffix in (".md", ".json", ".png"))
    show(f"results: {out}/  {files}")
    table = Table()
    for column in SUMMARY_COLUMNS:
        table.add_column(column)
    for row in summary_rows(metrics):
        table.add_row(*row)
    render(table)
    jobs = load_jobs(out)
    if jobs:
        steps = Table(title="steps of the job")
        for column in JOB_COLUMNS:
            steps.add_column(column)
        for row in job_rows(jobs):
            steps.add_row(*row)
        render(steps)


class _FidelityObserver(FidelitySampler, PhaseObserver):
    """The fidelity sampler as the phase observer it is (experiments.fidelity does not
    import this module)."""


class _ProgressBar(PhaseObserver):
    """A rich progress bar over the scenario's phases (or nothing when disabled)."""

    def __init__(self, scenario: Scenario, enabled: bool) -> None:
        self.scenario = scenario
        self.enabled = enabled
        self.bar: Any = None
        self.task: Any = None
        self.transport = ""
        self.total = scenario.duration_s * len(phases(scenario))
        self.done = 0.0

    def __enter__(self) -> _ProgressBar:
        if self.enabled:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(
                BarColumn(),
                TextColumn("{task.percentage:>3.0f}%"),
                TextColumn("{task.description}"),
                TimeElapsedColumn(),
            )
            self.bar.start()
            self.task = self.bar.add_task("", total=self.total)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()

    def started(self, phase: Phase) -> None:
        if self.transport:
            self.done += self.scenario.duration_s
        self.transport = phase.transport.name

    def sampled(self, phase: Phase) -> None:
        if self.bar is None:
            return
        live = phase.live()
        evs = f"  EVs bad {live['bad']:.0f}/{live['evs']:.0f}" if live["evs"] else ""
        self.bar.update(
            self.task,
            completed=self.done + phase.now(),
            description=f"{self.transport} {live['goodput_bps'] / 1e6:.1f} Mb/s{evs}",
        )


def default_out(scenario: Scenario) -> Path:
    """``results/NAME-YYYYmmdd-HHMMSS``."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return Path("results") / f"{scenario.name}-{stamp}"


def run_file(
    path: Path,
    target: str = "auto",
    out: Path | None = None,
    progress: bool = True,
    strict: bool = False,
    seed: int = 1,
) -> int:
    """Run the scenario file ``path`` on a fresh testbed (as root), or in simulated time on
    the ``sim`` target (``seed``: its network's); exit status (:data:`UNFAITHFUL_EXIT` when
    ``strict`` and a transport's run was not faithful, or its fixed link rate is over the
    machine's budget: :func:`experiments.calibrate.resolve_rate`)."""
    from experiments.testbed import STARTUP_ERRORS, require_root

    scenario = load_scenario(path)
    errors: tuple[type[Exception], ...] = (*STARTUP_ERRORS, SimTargetError, RateError)
    try:
        if target != SIM_TARGET:
            require_root(f"mrc-testbed run {scenario.name}")
        scenario = resolve_rate(scenario, target, strict=strict)
        metrics = run_scenario(
            scenario, out or default_out(scenario), target, progress=progress, seed=seed
        )
    except UnfaithfulRate as exc:  # strict, and the scenario's fixed rate is over the budget
        print(f"mrc-testbed: {exc}", file=sys.stderr)
        return UNFAITHFUL_EXIT
    except errors as exc:
        print(f"mrc-testbed: {exc}", file=sys.stderr)
        return 1
    behind = unfaithful(metrics)
    for line in behind:
        print(f"mrc-testbed: not faithful: {line}", file=sys.stderr)
    return UNFAITHFUL_EXIT if strict and behind else 0


def cmd_run(args: argparse.Namespace) -> int:
    """``mrc-testbed run SCENARIO``: a file, or the name of a shipped scenario."""
    path = Path(args.scenario)
    if not path.exists() and not path.suffix and shipped_scenario(args.scenario).exists():
        path = shipped_scenario(args.scenario)
    return run_file(
        path,
        args.target,
        Path(args.out) if args.out else None,
        not args.no_progress,
        args.strict,
        args.seed,
    )


def cmd_report(args: argparse.Namespace) -> int:
    """``mrc-testbed report DIR``."""
    out = Path(args.dir)
    metrics = render(out, plots=not args.no_plots)
    print_summary(out, metrics, print)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``run`` and ``report`` to the ``mrc-testbed`` command line."""
    run = subparsers.add_parser("run", help="run a scenario on a fresh testbed")
    run.add_argument("scenario", help="scenario YAML file or shipped name (demo, incast, ...)")
    run.set_defaults(func=cmd_run)
    report = subparsers.add_parser("report", help="re-render metrics, plots and summary")
    report.add_argument("dir", help="a results folder written by 'mrc-testbed run'")
    report.add_argument("--no-plots", action="store_true", help="only metrics and summary")
    report.set_defaults(func=cmd_report)
    demo = subparsers.add_parser(
        "demo", help="run the demo scenario (MRC vs single-path, a link fails and is repaired)"
    )
    demo.set_defaults(func=cmd_demo)
    for parser in (run, demo):
        parser.add_argument("--out", help="results folder (default: results/NAME-TIMESTAMP)")
        parser.add_argument(
            "--target",
            default="auto",
            choices=TARGETS,
            help="switch target (auto: BMv2 if installed, else model), or sim: the in-memory "
            "network in simulated time (no root; kernel baselines skipped)",
        )
        parser.add_argument("--seed", type=int, default=1, help="sim: the network's seed (1)")
        parser.add_argument("--no-progress", action="store_true", help="no progress bar")
        parser.add_argument(
            "--strict",
            action="store_true",
            help=f"exit {UNFAITHFUL_EXIT} when the machine fell behind (a run not faithful)",
        )


def cmd_demo(args: argparse.Namespace) -> int:
    """``mrc-testbed demo``: the shipped demo scenario."""
    return run_file(
        shipped_scenario("demo"),
        target=args.target,
        out=Path(args.out) if args.out else None,
        progress=not args.no_progress,
        strict=args.strict,
        seed=args.seed,
    )


__all__ = [
    "FaultLedger",
    "Phase",
    "PhaseObserver",
    "UNFAITHFUL_EXIT",
    "UnfaithfulRun",
    "counter_rows",
    "register",
    "run_scenario",
    "run_file",
    "unfaithful",
]
