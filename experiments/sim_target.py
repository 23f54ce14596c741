"""The ``sim`` target of ``mrc-testbed run``: a scenario's phases on the in-memory network.

Where the emulation boots switches and host agents and lets real time pass, the sim target
builds a :class:`sim.network.SimNet` of the scenario's topology and drives the hosts' transport
cores (:class:`host.transport.api.Context`, sans-IO) itself, in simulated time. It is a thin
driver: everything MRC does is the transport core's, everything the switches do is the
network's; what this module adds is what the agents and the runner do around them.

- the switches' operating point is the emulated switches' (:func:`controller.qos.default_qos`
  of the topology, with the scenario's ``trim_threshold`` / ``ecn_threshold`` and a transport's
  ``trimming: false`` applied as the runner applies them): trim at the data queue's threshold
  (or when it is full), ECN at a threshold or RED between two, decided when a packet is queued
  on the depth of the data queue, each priority queue holding ``queue_depth`` packets;
- every host that takes part in a flow is configured as ``mrc-host`` configures its core:
  the scenario's stack profile, 128 EVs per QP, NSCC fitted to the fabric
  (:func:`host.transport.cc.fabric.fabric_cc_profile`) or the transport's CC profile, its EV
  format, spine routes, the topology's time dilation, and a NIC that holds
  :data:`host.agent.agent.NIC_QUEUE` data frames (the agent's transmit queue);
- the workload runs as :class:`experiments.flows.mrc.MrcFlows` runs it: every flow keeps
  :func:`~experiments.flows.mrc.window` messages of pattern data in flight, each checked at
  the receiver after the run;
- the faults act at their times on the network (:class:`SimFaults`, an
  :class:`experiments.faults.FaultTarget`): a link, a NIC's cable (the host's core is told its
  port went down, as the agent's link watch tells it), switches (every link of each down), a
  plane (its spines), the operator's EV states;
- a scenario's training job runs as the agents run it (:func:`experiments.jobs.sim.run_steps`
  over the phase's hosts and QPs: each step's compute time, then its collectives of
  WRITE_IMMs), with the faults applied at their times between the network's events; its steps
  are the phase's ``steps.jsonl``;
- every ``sample_interval_s`` of simulated time the receivers' placed bytes and the senders' EV
  states are sampled; switch and port counters, host statistics and EV transitions are read at
  the end.

What a phase records is a :class:`experiments.metrics.TransportResult`, the emulation's: the
runner writes the same results folder from it. The kernel's TCP / MPTCP baselines exist only
in emulation (:func:`skip_reason`). A run is a pure function of the scenario and the seed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from controller.qos import default_qos, operating_point
from experiments.faults import EvFault, Step
from experiments.flows.mrc import phase_host_stats, window
from experiments.jobs.collectives import Job
from experiments.jobs.sim import Ranks, rank_pairs, run_steps
from experiments.metrics import Completion, FaultMark, Progress, TransportResult, flow_name
from experiments.results import EV_STATES
from experiments.scenario import Scenario, Transport
from host.agent.agent import NIC_QUEUE
from host.agent.data import pattern, verify_bytes
from host.agent.options import AgentOptions
from host.transport.api import CompletionQueue, Context, QueuePair, operator_state
from host.transport.cc import DEFAULT_CC, CcProfile
from host.transport.cc.fabric import fabric_cc_profile
from host.transport.config import StackConfig
from host.transport.endpoint import SpineRoutes
from host.transport.evs import GeneratedEvProfile, format_profile
from p4src.contract import QDEPTH_MAX
from sim.network import SimNet
from topologies import Fabric, Topology

#: what applies the links' latency on this target (``run.json``'s ``latency_by``)
LATENCY_BY = "sim"
#: where the receive region of flow ``i`` starts (one region per flow, as the agents register)
REGION_BASE = 1 << 32
REGION_ALIGN = 1 << 16
_DEFAULTS = AgentOptions(host="-")  # what mrc-host runs with unless told otherwise


class SimTargetError(ValueError):
    """A scenario the sim target cannot run; the message names the scenario and the reason."""


def skip_reason(transport: Transport) -> str | None:
    """Why ``transport`` does not run on the sim target (None: it does)."""
    if transport.is_kernel:
        return (
            f"{transport.name}: kernel {transport.kind.upper()} runs only in emulation "
            "(--target model or bmv2); skipped on the sim target"
        )
    return None


def sim_operating_point(topology: Topology) -> dict[str, Any]:
    """The switches' operating point as ``run.json`` records it (the emulation's, with the
    latency applied by the simulated links)."""
    return {**operating_point(topology), "latency_by": LATENCY_BY}


def build_network(scenario: Scenario, transport: Transport, seed: int) -> SimNet:
    """The in-memory network of ``scenario`` for one phase: the topology's links, queues and
    thresholds as the controller installs them on the emulated switches (see the module
    docstring)."""
    topology = scenario.topology
    qos = default_qos(topology)
    changes: dict[str, object] = {}
    if not transport.trimming:
        changes.update(trim_mode="threshold", trim=QDEPTH_MAX)
    elif scenario.trim_threshold is not None:
        changes.update(trim_mode="threshold", trim=scenario.trim_threshold)
    if scenario.ecn_threshold is not None:
        changes.update(ecn_mode="threshold", ecn=scenario.ecn_threshold)
    qos = qos.with_(**changes)
    depth = topology.queue_depth
    trim = depth if qos.trim_mode == "full" else qos.trim
    return SimNet(
        Fabric(topology),
        seed=seed,
        trim=trim < QDEPTH_MAX,
        trim_threshold=trim,
        ecn_threshold=qos.ecn,
        ecn_max_threshold=qos.ecn_max if qos.ecn_mode == "red" else None,
        # the slope the controller installs (its rounding, its ecn_pmax), as the switches mark
        ecn_slope=qos.action_params(depth)["ecn_slope"] if qos.ecn_mode == "red" else None,
        queue_depth=depth,
        data_depth=True,
        nic_slots=NIC_QUEUE,
        host_ecn=False,
    )


@dataclass
class _Flow:
    """One flow of the workload and its messages."""

    index: int
    src: str
    dst: str
    start: float
    message_bytes: int
    sizes: list[int]
    window: int  # messages in flight
    rkey: int = 0
    addr: int = 0
    next: int = 0  # the next message to post
    posted: dict[int, tuple[int, float, int]] = field(default_factory=dict)  # wr_id -> msg
    failed: bool = False

    @property
    def name(self) -> str:
        return flow_name(self.src, self.dst)

    @property
    def done(self) -> bool:
        return self.next >= len(self.sizes) and not self.posted


class SimFaults:
    """The network as a phase's faults act on it (:class:`experiments.faults.FaultTarget`):
    every action is carried out at the current simulated time and recorded in the result; what
    is still down when the phase ends is brought back (:meth:`restore`), as the runner's
    :class:`~experiments.runner.FaultLedger` does, so ``faults.csv`` shows the same actions."""

    def __init__(self, phase: SimPhase) -> None:
        self.phase = phase
        self.net = phase.net
        self.down_links: dict[tuple[str, str], None] = {}
        self.killed: dict[str, None] = {}

    def _nic(self, a: str, b: str, up: bool) -> None:
        """A host's cable: its core sees the NIC's port go down or up (the link watch)."""
        fabric = self.net.fabric
        for host, switch in ((a, b), (b, a)):
            ctx = self.phase.contexts.get(host)
            if ctx is not None and fabric.node_kind(switch) == "switch":
                ctx.set_port_state(fabric.switch(switch).plane, up, self.net.now)
                self.net.kick(host)

    def link_down(self, a: str, b: str) -> None:
        self.net.link_down(a, b)
        self._nic(a, b, up=False)
        self.down_links[(a, b)] = None
        self.phase.mark("down", f"{a} <-> {b}")

    def link_up(self, a: str, b: str) -> None:
        self.net.link_up(a, b)
        self._nic(a, b, up=True)
        self.down_links.pop((a, b), None)
        self.phase.mark("up", f"{a} <-> {b}")

    def kill_switches(self, names: Sequence[str]) -> None:
        self.net.kill_switches(names)
        for name in names:
            self.killed[name] = None
            self.phase.mark("kill", name)

    def start_switches(self, names: Sequence[str]) -> None:
        self.net.start_switches(names)
        for name in names:
            self.killed.pop(name, None)
            self.phase.mark("start", name)

    def restore(self) -> None:
        """Bring every failed link up and start every killed switch (recorded now)."""
        for a, b in list(self.down_links):
            self.link_up(a, b)
        if self.killed:
            self.start_switches(list(self.killed))

    def set_ev_state(self, fault: EvFault, state: str) -> None:
        """The operator's EV state on the QP of ``fault.host`` towards ``fault.peer``."""
        qp = self.phase.qp(fault.host, fault.peer)
        chosen = [
            info.ev
            for info in qp.ev_table.evs()
            if (info.path == fault.path if fault.path is not None else info.ev == fault.ev)
        ]
        if not chosen:
            raise SimTargetError(f"{fault.target}: no such EV or path on the QP")
        ctx = self.phase.context(fault.host)
        ctx.set_ev_states(qp.qpn, chosen, operator_state(state.lower()), self.net.now)
        self.net.kick(fault.host)
        self.phase.mark("deny" if state == "DENIED" else "allow", fault.target)


class SimPhase:
    """One transport's run of a scenario on a fresh in-memory network."""

    def __init__(self, scenario: Scenario, transport: Transport, seed: int = 1) -> None:
        reason = skip_reason(transport)
        if reason is not None:
            raise SimTargetError(f"{scenario.name}: {reason}")
        if scenario.job is not None and scenario.workloads:
            raise SimTargetError(
                f"{scenario.name}: a job beside workloads: the sim target runs one or the other"
            )
        self.scenario = scenario
        self.transport = transport
        self.seed = seed
        self.net = build_network(scenario, transport, seed)
        self.fabric = self.net.fabric
        self.result = TransportResult(
            name=transport.name,
            kind=transport.kind,
            duration=scenario.duration_s,
            flows=[(s, d) for _, s, d in scenario.flows()],
        )
        self.errors: list[str] = []
        self.contexts: dict[str, Context] = {}
        self.cqs: dict[str, CompletionQueue] = {}
        self._qps: dict[tuple[str, str], QueuePair] = {}
        self._peers: dict[str, set[str]] = {}  # host -> the hosts it has a flow with
        pairs = [(src, dst) for _, src, dst in scenario.flows()]
        if scenario.job is not None:
            ranks = scenario.job.ranks
            pairs = [(ranks[a], ranks[b]) for a, b in rank_pairs(scenario.job)]
        for src, dst in pairs:
            self._peers.setdefault(src, set()).add(dst)
            self._peers.setdefault(dst, set()).add(src)
        #: what is sampled: the receivers' placed bytes, the senders' QPs' EV states
        self._pairs = list(dict.fromkeys(pairs))
        self._setup_hosts()
        self.flows = self._setup_flows()

    # -- set-up: hosts as mrc-host configures them, regions as the flows register them --------

    def _setup_hosts(self) -> None:
        topology = self.scenario.topology
        config = StackConfig.profile(
            self.scenario.stack_profile, mtu=topology.mtu, ev_count=_DEFAULTS.ev_count,
            dilation=topology.dilation,
        )  # fmt: skip
        self.cc = fabric_cc_profile(topology, self.transport.cc or CcProfile(DEFAULT_CC), config)
        self.ev_format = format_profile(self.transport.ev_format)
        self.config = config
        for host in self.fabric.hosts:
            if host.name in self._peers:
                self.context(host.name)

    def context(self, name: str) -> Context:
        """Host ``name``'s transport core (made and attached on first use: a host that takes
        part in no flow has none unless a fault names it), its spine routes those towards the
        hosts it has a flow with (a fabric of MRC's size has too many paths for all of them)."""
        found = self.contexts.get(name)
        if found is not None:
            return found
        host = self.fabric.host(name)
        routes = SpineRoutes.from_paths(
            path
            for peer in sorted(self._peers.get(name, ()))
            for path in self.fabric.paths(name, peer)
        )
        ctx = Context(
            name, host.nics, config=self.config, seed=self.seed * 7919 + host.index + 1,
            routes=routes,
        )  # fmt: skip
        self.net.attach(ctx)
        self.contexts[name] = ctx
        self.cqs[name] = ctx.create_cq()
        return ctx

    def qp(self, src: str, dst: str) -> QueuePair:
        """The QP of ``src`` towards ``dst`` for the phase's transport (made, with its peer's,
        on first use)."""
        found = self._qps.get((src, dst))
        if found is not None:
            return found
        ends = []
        for a, b in ((src, dst), (dst, src)):
            ends.append(
                self.context(a).create_qp(
                    b,
                    self.fabric.paths(a, b),
                    cq=self.cqs[a],
                    policy=self.transport.kind,
                    cc=self.cc,
                    ev_profile=GeneratedEvProfile(fmt=self.ev_format),
                )
            )
        ends[0].connect(ends[1].qpn)
        ends[1].connect(ends[0].qpn)
        self._qps[(src, dst)], self._qps[(dst, src)] = ends
        return ends[0]

    def _setup_flows(self) -> list[_Flow]:
        flows = []
        cursor: dict[str, int] = {}
        for i, (w, src, dst) in enumerate(self.scenario.flows()):
            workload = self.scenario.workloads[w]
            flow = _Flow(
                i,
                src,
                dst,
                workload.start_s,
                workload.message_bytes,
                workload.message_sizes(),
                window(self.scenario.topology, workload.message_bytes),
            )
            addr = cursor.get(dst, REGION_BASE)
            region = self.contexts[dst].register_region(addr, workload.total_bytes)
            cursor[dst] = addr + (-(-workload.total_bytes // REGION_ALIGN) + 1) * REGION_ALIGN
            flow.rkey, flow.addr = region.rkey, addr
            self.qp(src, dst)
            flows.append(flow)
        return flows

    # -- the run ------------------------------------------------------------------------------

    def mark(self, action: str, target: str) -> None:
        """Record a fault action now."""
        self.result.faults.append(FaultMark(self.net.now, action, target))

    def _post(self, flow: _Flow) -> None:
        qp = self.qp(flow.src, flow.dst)
        while not flow.failed and flow.next < len(flow.sizes) and len(flow.posted) < flow.window:
            message, size = flow.next, flow.sizes[flow.next]
            wr_id = (flow.index << 24) | (message + 1)
            data = _pattern(flow.index + 1, size)
            qp.post_write(data, flow.addr + message * flow.message_bytes, flow.rkey, wr_id)
            flow.posted[wr_id] = (message, self.net.now, size)
            flow.next += 1
        self.net.kick(flow.src)

    def _poll(self) -> None:
        by_index = {f.index: f for f in self.flows}
        for host in sorted({f.src for f in self.flows}):
            for done in self.cqs[host].poll(1 << 16):
                if done.opcode not in ("write", "write_imm"):
                    continue
                flow = by_index.get(done.wr_id >> 24)
                if flow is None or done.wr_id not in flow.posted:
                    continue
                message, start, size = flow.posted.pop(done.wr_id)
                if done.status != "ok":
                    flow.failed = True
                    self.errors.append(f"flow {flow.name}: message {message} ended {done.status}")
                    self.result.completions.append(
                        Completion(flow.name, message, size, start, None)
                    )
                    continue
                self.result.completions.append(
                    Completion(flow.name, message, size, start, done.time)
                )
                self._post(flow)

    def _sample(self) -> None:
        t = self.net.now
        for host in sorted({dst for _, dst in self._pairs}):
            placed = int(self.contexts[host].stats()["payload_bytes_placed"])
            self.result.progress.append(Progress(t, f"rx:{host}", placed))
        counts = dict.fromkeys(EV_STATES, 0.0)
        for src, dst in self._pairs:
            for state, n in self.qp(src, dst).ev_table.counts().items():
                if state.upper() in counts:
                    counts[state.upper()] += n
        self.result.ev_states.append({"t": t, **counts})

    def _finished(self) -> bool:
        return all(f.done or f.failed for f in self.flows)

    def run(self) -> TransportResult:
        """Run the transport's flows (or its job) with the scenario's faults; returns the
        records."""
        if self.scenario.job is not None:
            return self._run_job(self.scenario.job)
        scenario, net = self.scenario, self.net
        duration, interval = scenario.duration_s, scenario.sample_interval_s
        faults = SimFaults(self)
        steps = scenario.timeline()
        starts = sorted(self.flows, key=lambda f: (f.start, f.index))
        senders = {f.src for f in self.flows}
        cqs = self.cqs
        next_sample = interval
        while True:
            horizon = min(
                duration,
                next_sample,
                steps[0].t if steps else duration,
                starts[0].start if starts else duration,
            )
            net.run(horizon, host_stop=lambda h: h in senders and len(cqs[h]) > 0)
            self._poll()
            self._act(steps, faults)
            while starts and starts[0].start <= net.now:
                self._post(starts.pop(0))
            if self._finished() and not starts:
                self._sample()
                break
            if net.now >= next_sample:
                self._sample()
                next_sample += interval
            if net.now >= duration:
                break
        self._finish(faults)
        for flow in self.flows:  # what never completed, as the emulation records it
            for message, start, size in flow.posted.values():
                self.result.completions.append(Completion(flow.name, message, size, start, None))
            for message in range(flow.next, len(flow.sizes)):
                self.result.completions.append(
                    Completion(flow.name, message, flow.sizes[message], net.now, None)
                )
        self._record()
        return self.result

    def _act(self, timeline: list[Step], faults: SimFaults) -> None:
        """Take the fault actions due by now off the front of ``timeline`` and apply them (one
        that fails is reported with the run's errors)."""
        while timeline and timeline[0].t <= self.net.now:
            step = timeline.pop(0)
            try:
                step.run(faults)
            except Exception as exc:
                self.errors.append(
                    f"fault {step.action} {step.fault.target} at {step.t:g} s: {exc}"
                )

    def _finish(self, faults: SimFaults) -> None:
        faults.restore()
        scenario = self.scenario
        self.result.duration = min(
            scenario.duration_s, max(self.net.now, scenario.sample_interval_s)
        )

    def _run_job(self, job: Job) -> TransportResult:
        """The scenario's job until its last step or ``duration_s``; every fault action and
        sample at its time, between the network's events."""
        scenario, net = self.scenario, self.net
        faults = SimFaults(self)
        timeline = scenario.timeline()
        interval = scenario.sample_interval_s
        next_sample = interval

        def advance(until: float, stop: Callable[[str], bool] | None) -> None:
            nonlocal next_sample
            while True:
                horizon = min(until, next_sample, timeline[0].t if timeline else until)
                net.run(horizon, host_stop=stop)
                self._act(timeline, faults)
                if net.now >= next_sample:
                    self._sample()
                    next_sample += interval
                if net.now < horizon or net.now >= until:
                    return

        ranks = Ranks(net, job, self.context, self.cqs.__getitem__, self.qp)
        duration = scenario.duration_s
        self.result.steps = run_steps(job, ranks, duration, advance)
        if net.now < duration and self.result.steps and self.result.steps[-1].end is not None:
            self._sample()
        self._finish(faults)
        self._record()
        return self.result

    # -- what the run leaves ------------------------------------------------------------------

    def _record(self) -> None:
        result, net, fabric = self.result, self.net, self.fabric
        rtts: list[float] = []
        for name, ctx in self.contexts.items():
            stats, transitions = phase_host_stats(name, {"core": ctx.stats()}, {}, 0.0)
            result.hosts[name] = stats
            result.ev_transitions += transitions
            if "rtt_min_s" in stats:
                rtts.append(stats["rtt_min_s"])
        for host in fabric.hosts:  # a host without a core sent and received nothing
            result.hosts.setdefault(host.name, dict.fromkeys(("rtos", "nacks", "trims_seen"), 0.0))
        result.ev_transitions.sort(key=lambda tr: (float(tr["t"]), str(tr["host"])))  # type: ignore[arg-type]
        result.base_rtt_s = min(rtts) if rtts else None
        counters = net.port_counters  # a default dict: ports that sent nothing count 0
        for sw in fabric.switches:
            row = dict.fromkeys(("trimmed", "ecn_marked", "drops"), 0)
            ports: dict[str, int] = {}
            for port in sw.ports:
                mine = counters[net.port_name(sw.name, port.number)]
                row["trimmed"] += mine["trimmed"]
                row["ecn_marked"] += mine["ecn_marked"]
                row["drops"] += mine["queue_full"]
                peer_port = port.peer_port if fabric.node_kind(port.peer) == "switch" else sw.plane
                rx = counters[net.port_name(port.peer, peer_port)]["tx_bytes"]
                tx = mine["tx_bytes"]
                if rx:
                    ports[f"rx/{port.number}"] = rx
                if tx:
                    ports[f"tx/{port.number}"] = tx
            result.switches[sw.name] = row
            result.ports[sw.name] = ports
        planes: dict[str, int] = {}
        for host in fabric.hosts:
            for nic in host.nics:
                sent = counters[net.port_name(host.name, nic.plane)]["tx_bytes"]
                planes[str(nic.plane)] = planes.get(str(nic.plane), 0) + sent
        result.planes = planes
        self._check_bytes()

    def _check_bytes(self) -> None:
        """Every completed message's bytes, checked in the receiver's region."""
        flows = {f.name: f for f in self.flows}
        checked = corrupt = 0
        for done in self.result.completions:
            if done.end is None:
                continue
            flow = flows[done.flow]
            view = self.contexts[flow.dst].region(flow.rkey).view
            offset = done.message * flow.message_bytes
            checked += 1
            if not verify_bytes(view[offset : offset + done.size], seed=flow.index + 1).match:
                corrupt += 1
                self.errors.append(
                    f"flow {done.flow}: message {done.message} arrived with other bytes than sent"
                )
        self.result.checked, self.result.corrupt = checked, corrupt


_PATTERNS: dict[tuple[int, int], bytes] = {}


def _pattern(seed: int, size: int) -> bytes:
    """The agents' pattern data (kept: every message of a flow carries the same bytes)."""
    key = (seed, size)
    if key not in _PATTERNS:
        if len(_PATTERNS) > 64:
            _PATTERNS.clear()
        _PATTERNS[key] = pattern(seed, size)
    return _PATTERNS[key]


def run_phases(
    phases: Iterable[tuple[Scenario, Transport]], seed: int = 1
) -> tuple[list[TransportResult], list[str]]:
    """Run each (scenario, transport) phase on a fresh network; returns the results and the
    errors and skips to report (kernel transports are skipped, saying why)."""
    results: list[TransportResult] = []
    notes: list[str] = []
    for scenario, transport in phases:
        reason = skip_reason(transport)
        if reason is not None:
            notes.append(reason)
            continue
        phase = SimPhase(scenario, transport, seed)
        results.append(phase.run())
        notes += [f"{transport.name}: {e}" for e in phase.errors]
    return results, notes


__all__ = [
    "LATENCY_BY",
    "SimFaults",
    "SimPhase",
    "SimTargetError",
    "build_network",
    "run_phases",
    "sim_operating_point",
    "skip_reason",
]
