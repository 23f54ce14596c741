"""``mrc-testbed run`` and ``report``: run a scenario on a fresh testbed and record its results.

Each transport of the scenario runs in turn on the same fabric (a *phase*): the agents are
restarted so every phase starts clean, the workload's flows start at their times, the faults
fire at theirs, and a sampler records delivered bytes and EV states every
``sample_interval_s``; switch counters and agent statistics are read before and after. A phase ends when every flow completed or at ``duration_s``; then every
fault is undone (links up, switches started) before the next phase.

Classes and functions:

- :class:`Phase` -- one transport's run; :class:`MrcFlows` drives MRC agents over their control
  sockets, :class:`experiments.kernel.KernelFlows` runs kernel TCP / MPTCP baselines;
- :func:`run_scenario` -- the whole run into a results folder (see :mod:`experiments.results`);
- :func:`register` -- the ``run`` and ``report`` subcommands.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from experiments.metrics import Completion, FaultMark, Progress, TransportResult, flow_name
from experiments.results import EV_STATES, render, write_raw
from experiments.scenario import Fault, Scenario, Transport, load_scenario
from experiments.testbed import Testbed

WINDOW = 2  # messages in flight per flow
PLACED = "core.payload_bytes_placed"  # agent statistic: payload bytes written into regions


def numbers(stats: Any, prefix: str = "") -> dict[str, float]:
    """Flatten the numeric fields of an agent's stats (``retransmits.rto``...)."""
    out: dict[str, float] = {}
    if isinstance(stats, dict):
        for key, value in stats.items():
            name = f"{prefix}{key}"
            if isinstance(value, bool):
                continue
            if isinstance(value, (int, float)):
                out[name] = float(value)
            elif isinstance(value, dict) and key != "rtt":
                out.update(numbers(value, name + "."))
    return out


class SwitchCounters:
    """Reads trims, ECN marks and drops of every switch over P4Runtime (read-only)."""

    def __init__(self, testbed: Testbed) -> None:
        self.testbed = testbed

    def read(self) -> dict[str, dict[str, int]]:
        """switch -> trimmed / ecn_marked / drops totals, and ``rx/PORT`` / ``tx/PORT`` bytes of
        every port (switches that do not answer: absent)."""
        from controller.client import SwitchClient
        from controller.p4info import P4Info, default_p4info_path

        info = P4Info.load(path=default_p4info_path())
        out: dict[str, dict[str, int]] = {}
        for name, sw in self.testbed.net.switches.items():
            client = SwitchClient(
                sw.grpc_addr,
                device_id=sw.model.device_id,
                election_id=1,
                timeout=2.0,
                name=name,
                p4info=info,
            )
            try:
                client.connect()
                row = {}
                for key, counter in (
                    ("trimmed", "MrcIngress.trimmed"),
                    ("ecn_marked", "MrcIngress.ecn_marked"),
                    ("drops", "MrcIngress.drops"),
                ):
                    row[key] = sum(p for p, _ in client.read_counter(counter).values())
                for key, counter in (("rx", "MrcIngress.port_in"), ("tx", "MrcEgress.port_out")):
                    for port, (_, nbytes) in client.read_counter(counter).items():
                        if nbytes:
                            row[f"{key}/{port}"] = nbytes
                out[name] = row
            except Exception:  # a switch being rebooted has no counters to give
                continue
            finally:
                with contextlib.suppress(Exception):
                    client.close()
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


class Phase:
    """One transport's run on a running testbed."""

    def __init__(
        self,
        testbed: Testbed,
        scenario: Scenario,
        transport: Transport,
        on_sample: Callable[[Phase], None] | None = None,
    ) -> None:
        self.testbed = testbed
        self.scenario = scenario
        self.transport = transport
        self.on_sample = on_sample
        flows = [(s, d) for _, s, d in scenario.flows()]
        self.result = TransportResult(
            name=transport.name, kind=transport.kind, duration=scenario.duration_s, flows=flows
        )
        self.t0 = 0.0
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.down_links: set[tuple[str, str]] = set()
        self.killed: set[str] = set()
        self.errors: list[str] = []

    def now(self) -> float:
        """Seconds since the phase started."""
        return time.monotonic() - self.t0

    # -- faults ------------------------------------------------------------------------------

    def apply(self, action: str, fault: Fault) -> None:
        """Carry out one fault action and record it."""
        tb = self.testbed
        if fault.link is not None:
            a, b = fault.link
            if action == "down":
                tb.link_down(a, b)
                self.down_links.add((a, b))
            else:
                tb.link_up(a, b)
                self.down_links.discard((a, b))
        elif fault.switches:  # a whole plane's spines: one mark per switch
            t = self.now()
            if action == "kill":  # at the same time: a plane fails at once
                threads = [
                    threading.Thread(target=tb.kill_switch, args=(name,), daemon=True)
                    for name in fault.switches
                ]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                self.killed.update(fault.switches)
            for name in fault.switches:
                if action != "kill" and name in self.killed:
                    tb.start_switch(name)
                    self.killed.discard(name)
                with self.lock:  # marked when the action began: EVs fail over from then on
                    self.result.faults.append(FaultMark(t, action, name))
            return
        elif fault.switch is not None:
            if action == "kill":
                tb.kill_switch(fault.switch)
                self.killed.add(fault.switch)
            else:
                tb.start_switch(fault.switch)
                self.killed.discard(fault.switch)
        elif action in ("deny", "allow"):
            if self.transport.is_kernel:
                return  # operator EV states are the MRC agents'
            self._set_ev(fault, "DENIED" if action == "deny" else "UNKNOWN")
        self._mark(action, fault.target)

    def _set_ev(self, fault: Fault, state: str) -> None:
        """The operator's EV state through the agent's control interface (set-ev) on the QP of
        this phase's transport."""
        from host.agent.control_client import ControlClient

        assert fault.host is not None
        which: dict[str, object] = (
            {"path": fault.path} if fault.path is not None else {"ev": fault.ev}
        )
        with ControlClient(self.testbed.control_path(fault.host), timeout=10.0) as c:
            c.request("set-ev", peer=fault.peer, policy=self.transport.kind, state=state, **which)

    def _faults(self) -> None:
        for t, action, fault in self.scenario.timeline():
            if self.stop.wait(max(0.0, t - self.now())):
                return
            try:
                self.apply(action, fault)
            except Exception as exc:
                self.errors.append(f"fault {action} {fault.target} at {t:g} s: {exc}")

    def undo_faults(self) -> None:
        """Bring every failed link up and start every killed switch.

        A phase whose flows finish before the scenario's own ``up``/``start`` leaves the fabric
        to the next phase as it found it; the action is recorded at the time it happens so
        ``faults.csv`` still shows when the link or switch came back.
        """
        for a, b in list(self.down_links):
            self.testbed.link_up(a, b)
            self._mark("up", f"{a} <-> {b}")
        self.down_links.clear()
        for name in list(self.killed):
            self.testbed.start_switch(name)
            self._mark("start", name)
        self.killed.clear()

    def _mark(self, action: str, target: str) -> None:
        with self.lock:
            self.result.faults.append(FaultMark(self.now(), action, target))

    # -- the run -----------------------------------------------------------------------------

    def run(self) -> TransportResult:
        """Run the transport's flows with the scenario's faults; returns the records."""
        from experiments.kernel import KernelFlows

        counters = SwitchCounters(self.testbed)
        flows: MrcFlows | KernelFlows = (
            KernelFlows(self) if self.transport.is_kernel else MrcFlows(self)
        )
        flows.prepare()
        before = counters.read()
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
                if self.on_sample is not None:
                    self.on_sample(self)
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
        counted = _delta(counters.read(), before)
        self.result.switches = {
            sw: {k: v for k, v in row.items() if "/" not in k} for sw, row in counted.items()
        }
        self.result.ports = {
            sw: {k: v for k, v in row.items() if "/" in k} for sw, row in counted.items()
        }
        after = self.plane_bytes()
        self.result.planes = {p: after.get(p, 0) - planes_before.get(p, 0) for p in after}
        flows.cleanup()
        return self.result

    def plane_bytes(self) -> dict[str, int]:
        """Bytes sent by every host NIC so far, per plane (from the interface counters)."""
        out: dict[str, int] = {}
        for host in self.testbed.fabric.hosts:
            node = self.testbed.net.hosts[host.name]
            for nic in host.nics:
                text = node.cmd(f"cat /sys/class/net/{nic.intf}/statistics/tx_bytes").strip()
                if text.isdigit():
                    out[str(nic.plane)] = out.get(str(nic.plane), 0) + int(text)
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


class MrcFlows:
    """The workload's flows as MRC transfers through the agents' control sockets."""

    def __init__(self, phase: Phase) -> None:
        self.phase = phase
        self.testbed = phase.testbed
        self.regions: dict[int, dict[str, Any]] = {}
        self.done: set[int] = set()
        self.flows = phase.scenario.flows()
        self.receivers = sorted({d for _, _, d in self.flows})
        self.senders = sorted({s for _, s, _ in self.flows})
        self.peers: dict[str, list[str]] = {}
        for _, src, dst in self.flows:
            if dst not in self.peers.setdefault(src, []):
                self.peers[src].append(dst)
        self.stats_before: dict[str, dict[str, float]] = {}

    def client(self, host: str, timeout: float = 10.0) -> Any:
        from host.agent.control_client import ControlClient

        return ControlClient(self.testbed.control_path(host), timeout=timeout)

    def prepare(self) -> None:
        """Restart the agents (a clean slate), set trimming, register the receive regions."""
        self.testbed.restart_agents()
        scenario = self.phase.scenario
        self.testbed.set_trimming(
            self.phase.transport.trimming, scenario.trim_threshold, scenario.ecn_threshold
        )
        cc = self.phase.transport.cc
        if cc is not None:
            for host in self.testbed.fabric.hosts:
                with self.client(host.name) as c:
                    c.request("cc-profile", **cc.as_dict())
        if self.phase.transport.ev_format != "srv6":
            for host in self.testbed.fabric.hosts:
                with self.client(host.name) as c:
                    c.request("ev-format", format=self.phase.transport.ev_format)
        for i, (w, _src, dst) in enumerate(self.flows):
            size = self.phase.scenario.workloads[w].total_bytes
            with self.client(dst) as c:
                self.regions[i] = c.register(f"flow{i}", size)
        for host in self.testbed.fabric.hosts:
            with self.client(host.name) as c:
                self.stats_before[host.name] = numbers(c.stats().get("stats", {}))

    def threads(self) -> list[threading.Thread]:
        """One thread per flow."""
        return [
            threading.Thread(target=self._flow, args=(i,), daemon=True, name=f"flow{i}")
            for i in range(len(self.flows))
        ]

    def _flow(self, i: int) -> None:
        phase = self.phase
        w_index, src, dst = self.flows[i]
        workload = phase.scenario.workloads[w_index]
        name = flow_name(src, dst)
        region = self.regions[i]
        if phase.stop.wait(max(0.0, workload.start_s - phase.now())):
            return
        count = -(-workload.total_bytes // workload.message_bytes)
        posted: list[tuple[int, int, float, int]] = []  # message, transfer id, start, size
        nxt = 0
        try:
            with self.client(src) as c:
                while (nxt < count or posted) and not phase.stop.is_set():
                    while nxt < count and len(posted) < WINDOW:
                        offset = nxt * workload.message_bytes
                        size = min(workload.message_bytes, workload.total_bytes - offset)
                        reply = c.transfer(
                            dst,
                            int(region["addr"]) + offset,
                            int(region["rkey"]),
                            size,
                            policy=phase.transport.kind,
                            message_size=size,
                            seed=i + 1,
                        )
                        posted.append((nxt, int(reply["transfer"]), phase.now(), size))
                        nxt += 1
                    message, tid, start, size = posted[0]
                    left = phase.scenario.duration_s - phase.now()
                    if left <= 0:
                        break
                    reply = c.wait([tid], timeout=min(left, 1.0))
                    if reply.get("complete"):
                        posted.pop(0)
                        with phase.lock:
                            phase.result.completions.append(
                                Completion(name, message, size, start, phase.now())
                            )
        except Exception as exc:
            phase.errors.append(f"flow {name}: {exc}")
        with phase.lock:
            for message, _tid, start, size in posted:
                phase.result.completions.append(Completion(name, message, size, start, None))
            for message in range(nxt, count):
                size = min(
                    workload.message_bytes, workload.total_bytes - message * workload.message_bytes
                )
                phase.result.completions.append(Completion(name, message, size, phase.now(), None))
        if not posted and nxt >= count:
            self.done.add(i)

    def sample(self) -> None:
        """Delivered bytes at every receiver and EV states at every sender."""
        phase = self.phase
        for host in self.receivers:
            asked = phase.now()
            try:
                with self.client(host, timeout=2.0) as c:
                    stats = numbers(c.stats().get("stats", {}))
            except Exception:
                continue
            t = (asked + phase.now()) / 2  # the agent answered somewhere in between
            placed = stats.get(PLACED, 0.0) - self.stats_before.get(host, {}).get(PLACED, 0.0)
            with phase.lock:
                phase.result.progress.append(Progress(t, f"rx:{host}", int(placed)))
        counts = dict.fromkeys(EV_STATES, 0)
        policy = phase.transport.kind
        asked = phase.now()
        for src, peers in self.peers.items():
            try:
                with self.client(src, timeout=2.0) as c:
                    for dst in peers:
                        reply = c.request("paths", peer=dst, policy=policy)
                        table = reply["paths"][dst]["paths"]
                        for entry in table.values():
                            for state, n in entry.get("states", {}).items():
                                if state.upper() in counts:
                                    counts[state.upper()] += int(n)
            except Exception:
                continue
        t = (asked + phase.now()) / 2
        with phase.lock:
            phase.result.ev_states.append({"t": t, **{k: float(v) for k, v in counts.items()}})

    def finished(self) -> bool:
        """True when every flow completed."""
        return len(self.done) == len(self.flows)

    def finish(self) -> None:
        """Collect the agents' statistics of this phase."""
        rtts: list[float] = []
        for host in self.testbed.fabric.hosts:
            try:
                with self.client(host.name) as c:
                    raw = c.stats().get("stats", {})
            except Exception:
                continue
            for tr in (raw.get("core", {}) if isinstance(raw, dict) else {}).get(
                "ev_transitions", []
            ):
                if isinstance(tr, dict) and "time" in tr:
                    self.phase.result.ev_transitions.append(
                        {
                            "t": round(float(tr["time"]) - self.phase.t0, 6),
                            "host": host.name,
                            **{
                                k: tr.get(k, "")
                                for k in (
                                    "qpn",
                                    "ev",
                                    "path",
                                    "old",
                                    "new",
                                    "reason",
                                    "profile",
                                    "plane",
                                )  # fmt: skip
                            },
                        }
                    )
            now = numbers(raw)
            base = self.stats_before.get(host.name, {})
            stats = {k: v - base.get(k, 0.0) for k, v in now.items()}
            stats["rtos"] = stats.get("core.rtos", 0.0)
            stats["nacks"] = stats.get("core.nacks_received", 0.0)
            stats["trims_seen"] = stats.get("core.trims_seen", 0.0)
            core = raw.get("core", {}) if isinstance(raw, dict) else {}
            rtt = core.get("rtt", {}) if isinstance(core, dict) else {}
            if isinstance(rtt, dict) and rtt.get("count") and rtt.get("min"):
                rtts.append(float(rtt["min"]))
                stats["rtt_min_s"] = float(rtt["min"])
                stats["rtt_p50_s"] = float(rtt.get("p50", 0.0))
            self.phase.result.hosts[host.name] = stats
        self.phase.result.base_rtt_s = min(rtts) if rtts else None
        self._check_bytes()

    def _check_bytes(self) -> None:
        """Every completed message's bytes, checked at its receiver against what was sent."""
        phase = self.phase
        message_bytes = {
            flow_name(src, dst): phase.scenario.workloads[w].message_bytes
            for w, src, dst in self.flows
        }
        index = {flow_name(src, dst): i for i, (_w, src, dst) in enumerate(self.flows)}
        checked = corrupt = 0
        for done in [c for c in phase.result.completions if c.end is not None]:
            i = index[done.flow]
            dst = self.flows[i][2]
            try:
                with self.client(dst) as c:
                    reply = c.verify(
                        f"flow{i}",
                        offset=done.message * message_bytes[done.flow],
                        size=done.size,
                        seed=i + 1,
                    )
            except Exception as exc:
                phase.errors.append(f"flow {done.flow}: checking message {done.message}: {exc}")
                continue
            checked += 1
            if not reply.get("match"):
                corrupt += 1
                phase.errors.append(
                    f"flow {done.flow}: message {done.message} arrived with other bytes than sent"
                )
        phase.result.checked = checked
        phase.result.corrupt = corrupt

    def cleanup(self) -> None:
        """Nothing to undo: the next phase restarts the agents."""


def run_scenario(
    scenario: Scenario,
    out: Path,
    target: str = "auto",
    *,
    state_path: Path | None = None,
    show: Callable[[str], None] = print,
    progress: bool = True,
    testbed: Testbed | None = None,
) -> dict[str, dict[str, Any]]:
    """Run every transport of ``scenario`` and write the results folder ``out``."""
    own = testbed is None
    tb = testbed or Testbed(scenario.topology, target, state_path=state_path)
    results: list[TransportResult] = []
    errors: list[str] = []
    try:
        if own:
            tb.up(progress=show)
        show(describe(scenario))
        bar = _ProgressBar(scenario, enabled=progress)
        with bar:
            for transport in scenario.transports:
                phase = Phase(tb, scenario, transport, on_sample=bar.update)
                bar.start(transport)
                results.append(phase.run())
                errors += [f"{transport.name}: {e}" for e in phase.errors]
        tb.reset_qos()
    finally:
        if own:
            tb.down()
    write_raw(
        out, dict(scenario.raw), scenario.topology.as_dict(), scenario.sample_interval_s, results
    )
    metrics = render(out)
    for error in errors:
        show(f"warning: {error}")
    print_summary(out, metrics, show)
    return metrics


def describe(scenario: Scenario) -> str:
    """One line saying what the scenario does."""
    loads = ", ".join(
        f"{w.kind} {len(w.flows())} flows x {w.total_bytes / (1 << 20):g} MiB"
        for w in scenario.workloads
    )
    faults = "; ".join(f"{f.kind} {f.target} at {f.at_s:g} s" for f in scenario.faults)
    names = " vs ".join(t.name for t in scenario.transports)
    return f"{scenario.name}: {loads}, {names}" + (f"; {faults}" if faults else "")


def print_summary(
    out: Path, metrics: dict[str, dict[str, Any]], show: Callable[[str], None]
) -> None:
    """The results folder and the summary table."""
    from rich.table import Table

    from experiments.metrics import SUMMARY_COLUMNS, summary_rows
    from experiments.topo_cmd import make_console

    files = "  ".join(p.name for p in sorted(out.iterdir()) if p.suffix in (".md", ".json", ".png"))
    show(f"results: {out}/  {files}")
    table = Table()
    for column in SUMMARY_COLUMNS:
        table.add_column(column)
    for row in summary_rows(metrics):
        table.add_row(*row)
    make_console().print(table)


class _ProgressBar:
    """A rich progress bar over the scenario's phases (or nothing when disabled)."""

    def __init__(self, scenario: Scenario, enabled: bool) -> None:
        self.scenario = scenario
        self.enabled = enabled
        self.bar: Any = None
        self.task: Any = None
        self.transport = ""
        self.total = scenario.duration_s * len(scenario.transports)
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

    def start(self, transport: Transport) -> None:
        if self.transport:
            self.done += self.scenario.duration_s
        self.transport = transport.name

    def update(self, phase: Phase) -> None:
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


def run_shipped(
    name: str, target: str = "auto", out: Path | None = None, progress: bool = True
) -> int:
    """Run a shipped scenario (``demo``, ``incast``, ``flaps``, ``baselines``); exit status."""
    from experiments.scenario import shipped_scenario
    from experiments.testbed import STARTUP_ERRORS, require_root

    scenario = load_scenario(shipped_scenario(name))
    try:
        require_root(f"mrc-testbed {name}")
        run_scenario(scenario, out or default_out(scenario), target, progress=progress)
    except STARTUP_ERRORS as exc:
        print(f"mrc-testbed: {exc}", file=sys.stderr)
        return 1
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """``mrc-testbed run SCENARIO``."""
    from experiments.scenario import shipped_scenario
    from experiments.testbed import require_root

    path = Path(args.scenario)
    if not path.exists() and not path.suffix and shipped_scenario(args.scenario).exists():
        path = shipped_scenario(args.scenario)
    scenario = load_scenario(path)
    require_root("mrc-testbed run")
    out = Path(args.out) if args.out else default_out(scenario)
    from experiments.testbed import STARTUP_ERRORS

    try:
        run_scenario(scenario, out, args.target, progress=not args.no_progress)
    except STARTUP_ERRORS as exc:
        print(f"mrc-testbed: {exc}", file=sys.stderr)
        return 1
    return 0


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
    run.add_argument("--out", help="results folder (default: results/NAME-TIMESTAMP)")
    run.add_argument("--target", default="auto", choices=["auto", "bmv2", "model"])
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.set_defaults(func=cmd_run)
    report = subparsers.add_parser("report", help="re-render metrics, plots and summary")
    report.add_argument("dir", help="a results folder written by 'mrc-testbed run'")
    report.add_argument("--no-plots", action="store_true", help="only metrics and summary")
    report.set_defaults(func=cmd_report)
    demo = subparsers.add_parser(
        "demo", help="run the demo scenario (MRC vs single-path, a link fails and is repaired)"
    )
    demo.add_argument("--out", help="results folder (default: results/demo-TIMESTAMP)")
    demo.add_argument("--target", default="auto", choices=["auto", "bmv2", "model"])
    demo.add_argument("--no-progress", action="store_true", help="no progress bar")
    demo.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    """``mrc-testbed demo``: the shipped demo scenario."""
    return run_shipped(
        "demo",
        target=args.target,
        out=Path(args.out) if args.out else None,
        progress=not args.no_progress,
    )


__all__ = ["MrcFlows", "Phase", "SwitchCounters", "register", "run_scenario", "run_shipped"]
