"""Flows on the simulated network: one RDMA WRITE per connection, from a start time, measured.

A :class:`Connection` is one flow of a traffic matrix (htsim's ``.cm`` line: source and
destination host indices, start time, bytes). :func:`run_flows` gives every host a transport
context on a :class:`sim.network.SimNet`, connects one QP pair per connection, posts the WRITE
at its start time and runs until every flow completed (or ``until``). Connections that start
when another finishes (the matrices' triggers) start at that flow's completion. A caller that
passes ``progress`` hears of the run (a :class:`Progress`) whenever flows complete and at
least every :data:`PROGRESS_EVERY` of simulated time; the run is the same with it or without.

What comes back (:class:`FlowsResult`) is what the comparison with the reference needs: each
flow's completion time, the packets, NACKs and retransmissions of its sender, and NSCC's
window changes by cause (:data:`host.transport.cc.nscc.CHANGE_CAUSES`).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from host.transport.api import CompletionQueue, Context, QueuePair
from host.transport.cc import CcProfile
from host.transport.cc.nscc import CHANGE_CAUSES
from host.transport.config import StackConfig
from host.transport.events import STATUS_OK, Completion
from host.transport.evs import STEV_FORMAT, ExplicitEvProfile
from host.transport.policy import get_policy
from sim.network import SimNet

if TYPE_CHECKING:
    from topologies import Path

REGION = 0x10_0000_0000
#: simulated time between two reports to ``run_flows``' ``progress`` (seconds): some 10 CPU
#: seconds of a 1,024-host permutation at full load, a quarter of one of a 1,023 -> 1 incast
PROGRESS_EVERY = 25e-6


@dataclass(frozen=True)
class Connection:
    """One flow: ``src`` -> ``dst`` (host indices), ``size`` bytes from ``start`` (seconds)."""

    src: int
    dst: int
    size: int
    start: float | None = 0.0  #: None: started by ``trigger``
    id: int | None = None  #: the matrix's flow id
    trigger: int | None = None  #: started when this trigger fires
    send_done_trigger: int | None = None  #: fires this trigger when the flow completes


@dataclass(frozen=True)
class Progress:
    """Where a run of :func:`run_flows` is."""

    now: float  #: simulated seconds
    until: float  #: the run's end (simulated seconds), if flows are left by then
    finished: int  #: flows completed (in error included)
    flows: int
    cpu_seconds: float  #: CPU time so far
    run: int = 1  #: of several runs of one experiment (:func:`sim.parity.run_sim`)
    runs: int = 1


@dataclass
class FlowResult:
    """One flow's outcome."""

    connection: Connection
    started: float | None = None  #: seconds
    finished: float | None = None  #: seconds (sender's completion, status ok)
    #: the status of a completion in error (the flow failed, e.g. "retry_exceeded": a packet
    #: lost more than ``max_retransmits`` times): not finished
    error: str | None = None
    changes: dict[str, float] = field(default_factory=dict)  #: NSCC window changes by cause
    #: acknowledged bytes per NSCC case, and when each case and the first NACK first came
    #: (simulated seconds): host.transport.cc.nscc.NSCC_CASES
    cases: dict[str, float] = field(default_factory=dict)
    first: dict[str, float] = field(default_factory=dict)

    @property
    def fct(self) -> float | None:
        """Flow completion time (seconds), None when unfinished."""
        if self.finished is None or self.started is None:
            return None
        return self.finished - self.started


@dataclass
class FlowsResult:
    """Every flow's outcome and the run's figures."""

    flows: list[FlowResult]
    end: float  #: simulated seconds at the end of the run
    events: int  #: events the simulator processed
    cpu_seconds: float  #: CPU time of the run
    counters: dict[str, int]  #: the network's counters (trimmed, ecn_marked, drops, ...)
    packets: int = 0  #: data packets the senders sent, retransmissions included
    new_packets: int = 0  #: of those, first transmissions (the retransmissions declared may
    #: not all have been sent again by the end)
    nacks: int = 0  #: NACKs the senders received
    retransmits: int = 0  #: packets retransmitted (every cause)
    setup_cpu_seconds: float = 0.0  #: of ``cpu_seconds``: creating contexts, regions and QPs

    @property
    def finished(self) -> list[FlowResult]:
        """The flows that completed."""
        return [f for f in self.flows if f.finished is not None]

    @property
    def failed(self) -> list[FlowResult]:
        """The flows whose sender's completion was an error."""
        return [f for f in self.flows if f.error is not None]

    def summary(self) -> dict[str, Any]:
        """Totals, JSON-ready: flows, packets, NACKs, retransmissions, changes by cause."""
        changes = dict.fromkeys(CHANGE_CAUSES, 0.0)
        for flow in self.flows:
            for cause, value in flow.changes.items():
                changes[cause] += value
        fcts = [f.fct for f in self.finished if f.fct is not None]
        return {
            "flows": len(self.flows),
            "finished": len(fcts),
            "failed": len(self.failed),
            "fct_min_us": min(fcts) * 1e6 if fcts else None,
            "fct_max_us": max(fcts) * 1e6 if fcts else None,
            "packets": self.packets,
            "new_packets": self.new_packets,
            "nacks": self.nacks,
            "retransmits": self.retransmits,
            "changes": changes,
            "events": self.events,
            "cpu_seconds": self.cpu_seconds,
            "end_us": self.end * 1e6,
            "counters": dict(self.counters),
        }


def entropy_profile(count: int, paths: Sequence[Path], rng: random.Random) -> ExplicitEvProfile:
    """A UET sender's ``count`` STEV entropy values, the planes of ``paths`` in turn: distinct
    non-zero 32-bit values drawn from ``rng``. Drawn, not counted from 1: the switches' hash
    (BMv2's CRC-32) is linear, and consecutive values put runs of 16 EVs on one uplink of four,
    so a balancer taking EVs in order sent bursts of 16 packets to one spine (the reference's
    switches hash each EV with a salt of their own, ``freeBSDHash``)."""
    planes = sorted({path.plane for path in paths})
    values: dict[int, None] = {}
    while len(values) < count:
        values.setdefault(rng.getrandbits(32) or 1)
    return ExplicitEvProfile(
        tuple((ev, planes[n % len(planes)]) for n, ev in enumerate(values)), fmt=STEV_FORMAT
    )


def run_flows(
    net: SimNet,
    connections: Sequence[Connection],
    *,
    cc: CcProfile | str = "nscc",
    config: StackConfig | None = None,
    until: float = 1.0,
    seed: int = 1,
    barriers: Mapping[int, int] | None = None,
    policy: str = "mrc",
    progress: Callable[[Progress], None] | None = None,
) -> FlowsResult:
    """Run ``connections`` on ``net`` (see the module docstring); times in seconds. Every QP
    runs ``policy`` (:data:`host.transport.policy.POLICIES`); with one of UET's load balancers
    (``uet-*``) its EVs are STEV entropy values the switches hash, as UET's are.

    A trigger fires when a flow that names it as ``send_done_trigger`` completes; a trigger of
    ``barriers`` (id -> count) fires only once that many such flows completed."""
    cpu = time.process_time()
    fabric = net.fabric
    config = config or StackConfig(mtu=fabric.topology.mtu)
    if config.dilation != net.dilation:
        config = config.with_(dilation=net.dilation)
    names = [h.name for h in fabric.hosts]
    contexts: dict[str, Context] = {}
    cqs: dict[str, CompletionQueue] = {}

    def context(index: int) -> Context:
        name = names[index]
        if name not in contexts:
            host = fabric.host(name)
            ctx = Context(name, host.nics, config=config, seed=seed * 7919 + host.index)
            net.attach(ctx)
            contexts[name] = ctx
            cqs[name] = ctx.create_cq()
        return contexts[name]

    # MRC's EVs are SRv6 paths; a UET balancer's are entropy values placed by the ECMP hash
    balanced = get_policy(policy).balancer is not None
    entropy_rng = random.Random(seed)
    largest = max((c.size for c in connections), default=0)
    regions: dict[str, int] = {}
    flows: list[FlowResult] = []
    senders: list[tuple[QueuePair, FlowResult]] = []
    by_trigger: dict[int, list[int]] = {}
    activations: dict[int, int] = {}
    for n, conn in enumerate(connections):
        src, dst = context(conn.src), context(conn.dst)
        if dst.host not in regions:
            regions[dst.host] = dst.register_region(REGION, max(largest, 1)).rkey
        out, back = fabric.paths(src.host, dst.host), fabric.paths(dst.host, src.host)
        ev_profile = entropy_profile(config.ev_count, out, entropy_rng) if balanced else None
        qs, qr = (
            a.create_qp(b.host, paths, cq=cqs[a.host], cc=cc, policy=policy, ev_profile=ev_profile)
            for a, b, paths in ((src, dst, out), (dst, src, back))
        )
        qs.connect(qr.qpn)
        qr.connect(qs.qpn)
        flows.append(FlowResult(conn))
        senders.append((qs, flows[-1]))
        if conn.trigger is not None:
            by_trigger.setdefault(conn.trigger, []).append(n)
    setup = time.process_time() - cpu
    payload = bytes(largest)
    pending: dict[tuple[str, int], int] = {}  # (host, qpn) -> flow index

    def start(n: int, when: float) -> None:
        conn = connections[n]
        qp, flow = senders[n]
        flow.started = when
        src, dst = names[conn.src], names[conn.dst]
        qp.post_write(memoryview(payload)[: conn.size], REGION, regions[dst], wr_id=n + 1)
        pending[(src, qp.qpn)] = n
        net.kick_at(src, when)

    timed = sorted(
        (c.start, n) for n, c in enumerate(connections) if c.start is not None and c.trigger is None
    )
    next_start = 0
    remaining = len(connections)
    while remaining:
        horizon = timed[next_start][0] if next_start < len(timed) else until
        while next_start < len(timed) and timed[next_start][0] <= net.now:
            start(timed[next_start][1], timed[next_start][0])
            next_start += 1
            horizon = timed[next_start][0] if next_start < len(timed) else until
        if net.now >= until:
            break
        done_before = remaining
        stop_at = min(horizon, until)
        if progress is not None:
            stop_at = min(stop_at, net.now + PROGRESS_EVERY)
        net.run(stop_at, host_stop=lambda host: len(cqs[host]) > 0)
        for host, cq in cqs.items():
            for completion in cq.poll(1 << 16):
                n = pending.pop((host, completion.qpn), -1) if _is_send(completion) else -1
                if n < 0:
                    continue
                remaining -= 1
                if completion.status != STATUS_OK:
                    flows[n].error = completion.status
                    continue
                flows[n].finished = completion.time
                fired = connections[n].send_done_trigger
                if fired is not None and barriers and fired in barriers:
                    activations[fired] = activations.get(fired, 0) + 1
                    if activations[fired] < barriers[fired]:
                        continue
                for m in by_trigger.pop(fired, []) if fired is not None else []:
                    start(m, net.now)
        if progress is not None:
            cpu_now = time.process_time() - cpu
            progress(
                Progress(net.now, until, len(connections) - remaining, len(connections), cpu_now)
            )
        if remaining == done_before and net.now >= until:
            break
    for qp, flow in senders:
        flow.changes = dict(getattr(qp.cc, "changes", {}))
        flow.cases = dict(getattr(qp.cc, "cases", {}))
        flow.first = dict(getattr(qp.cc, "first", {}))
    stats = [ctx.stats() for ctx in contexts.values()]
    return FlowsResult(
        flows=flows,
        end=net.now,
        events=net.events,
        cpu_seconds=time.process_time() - cpu,
        counters=dict(net.counters),
        packets=sum(int(s["data_packets_sent"]) for s in stats),
        new_packets=sum(int(s["new_data_packets_sent"]) for s in stats),
        nacks=sum(int(s["nacks_received"]) for s in stats),
        retransmits=sum(sum(s["retransmits"].values()) for s in stats),
        setup_cpu_seconds=setup,
    )


def _is_send(completion: Completion) -> bool:
    return completion.opcode in ("write", "write_imm")
