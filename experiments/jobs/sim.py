"""A job on the in-memory network (:class:`sim.network.SimNet`): virtual time, no root.

Every rank is a host :class:`~host.transport.api.Context` attached to the network, with one
completion queue and one receive region; every pair of ranks a collective writes between gets a
connected QP pair. Each step runs its compute time (the network runs on, idle), then its
collectives one after the other: every rank's :class:`~experiments.jobs.collectives.RankMachine`
is started, and the network runs until a completion queue has an entry; sender completions
(``write_imm``) go to the sending rank, receiver completions (``recv_write_imm``, with the
immediate) to the receiving rank, and the WRITE_IMMs they ask for are posted at once. A
collective ends when every rank is finished, the step when its last collective ends.

Link failures may be scheduled (``failures``: a link down between two times); they are marked
as a run's faults are, so :func:`experiments.jobs.steps.annotate` says which steps they
overlapped. A run is a pure function of the job, the fabric and the seed.

:func:`run_steps` is the step loop alone, over :class:`Ranks` made from any contexts and QPs and
an ``advance`` that runs the network to a time: the sim target of ``mrc-testbed run``
(:mod:`experiments.sim_target`) drives a scenario's job with it, its faults applied between.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from experiments.jobs.collectives import Collective, Job, RankMachine, Send, machines
from experiments.jobs.steps import add_counters, annotate, collective_record, transport_counters
from experiments.metrics import FaultMark, StepRecord
from host.transport.api import CompletionQueue, Context, QueuePair
from host.transport.config import StackConfig
from sim.network import SimNet
from topologies import Fabric

REGION = 0x20_0000_0000  # where every rank's receive region starts


@dataclass
class SimJobResult:
    """What a job on the in-memory network recorded."""

    steps: list[StepRecord]
    faults: list[FaultMark] = field(default_factory=list)
    ev_transitions: list[dict[str, object]] = field(default_factory=list)
    end: float = 0.0


#: runs the network to a time, stopping early when the predicate says a host has work
Advance = Callable[[float, Callable[[str], bool] | None], None]


def rank_pairs(job: Job) -> list[tuple[int, int]]:
    """The (writer, written) rank pairs of a job's collectives: ring neighbours, every pair
    for an all-to-all."""
    n = len(job.ranks)
    pairs = {(r, (r + 1) % n) for r in range(n)}
    if any(c.kind == "all-to-all" for c in job.collectives):
        pairs = {(a, b) for a in range(n) for b in range(n) if a != b}
    return sorted(pairs)


class Ranks:
    """The contexts, QPs and regions of a job's ranks on one network: ``context(host)`` gives a
    rank's attached context, ``cq(host)`` its completion queue, ``qp(a, b)`` a connected QP of
    host ``a`` towards ``b`` (its peer is ``qp(b, a)``)."""

    def __init__(
        self,
        net: SimNet,
        job: Job,
        context: Callable[[str], Context],
        cq: Callable[[str], CompletionQueue],
        qp: Callable[[str, str], QueuePair],
    ) -> None:
        self.net = net
        self.hosts = list(job.ranks)
        n = len(self.hosts)
        self.contexts = [context(name) for name in self.hosts]
        self.cqs = [cq(name) for name in self.hosts]
        region = max(RankMachine(c, 0, n).region_bytes() for c in job.collectives)
        self.rkeys = [ctx.register_region(REGION, region).rkey for ctx in self.contexts]
        self.payload = memoryview(bytes(max(c.chunk(n) for c in job.collectives)))
        self.qps: dict[tuple[int, int], QueuePair] = {}  # (src, dst) -> the src's QP
        self.source: dict[tuple[int, int], int] = {}  # (receiving rank, its QPN) -> src rank
        for a, b in rank_pairs(job):
            ha, hb = self.hosts[a], self.hosts[b]
            self.qps[(a, b)] = qp(ha, hb)
            self.source[(b, qp(hb, ha).qpn)] = a

    def post(self, src: int, sends: Sequence[Send]) -> None:
        for s in sends:
            qp = self.qps[(src, s.dst)]
            qp.post_write_imm(self.payload[: s.size], REGION + s.offset, self.rkeys[s.dst], s.imm)
        if sends:
            self.net.kick(self.hosts[src])

    def counters(self) -> dict[str, float]:
        total: dict[str, float] = {}
        for ctx in self.contexts:
            for key, value in transport_counters(ctx.stats()).items():
                total[key] = total.get(key, 0.0) + value
        return total

    def run_collective(
        self, collective: Collective, tag: int, deadline: float, advance: Advance | None = None
    ) -> float | None:
        """Run one collective from now; its end time (None: not finished by ``deadline``)."""
        advance = advance or self.advance
        ranks = machines(collective, len(self.hosts), tag)
        for r, m in enumerate(ranks):
            self.post(r, m.start())
        cqs = {h: self.cqs[i] for i, h in enumerate(self.hosts)}
        while not all(m.finished for m in ranks):
            if self.net.now >= deadline:
                return None
            advance(deadline, lambda host: host in cqs and len(cqs[host]) > 0)
            for r, cq in enumerate(self.cqs):
                for done in cq.poll(1 << 16):
                    if done.status != "ok" or done.imm is None:
                        raise RuntimeError(
                            f"{self.hosts[r]}: WRITE_IMM {done.opcode} ended {done.status}"
                        )
                    if done.opcode == "recv_write_imm":
                        src = self.source[(r, done.qpn)]
                        self.post(r, ranks[r].on_received(src, done.imm))
                    else:
                        self.post(r, ranks[r].on_sent(done.imm))
        return self.net.now

    def advance(self, until: float, stop: Callable[[str], bool] | None) -> None:
        """Run the network to ``until``, or until ``stop`` says a host has work."""
        self.net.run(until, host_stop=stop)


def run_steps(
    job: Job, ranks: Ranks, until: float, advance: Advance | None = None
) -> list[StepRecord]:
    """The job's steps from the network's now (its ``start_s`` first): each step's compute
    time, then its collectives; stops at a collective not finished by ``until``."""
    net = ranks.net
    advance = advance or ranks.advance
    advance(job.start_s, None)
    steps: list[StepRecord] = []
    for k in range(job.steps):
        start = net.now
        before = ranks.counters()
        advance(start + job.compute_s, None)
        step = StepRecord(k, start, None, job.compute_s, [])
        end: float | None = net.now
        for i, collective in enumerate(job.collectives):
            began = net.now
            end = ranks.run_collective(collective, k * len(job.collectives) + i, until, advance)
            step.collectives.append(collective_record(collective, len(job.ranks), began, end))
            if end is None:
                break
        step.end = end
        add_counters(step, before, ranks.counters())
        steps.append(step)
        if end is None:
            break
    return steps


def run_job(
    job: Job,
    fabric: Fabric,
    *,
    seed: int = 1,
    policy: str = "mrc",
    failures: Sequence[tuple[str, str, float, float]] = (),
    until: float = 600.0,
    net: SimNet | None = None,
) -> SimJobResult:
    """Run ``job`` on the in-memory network of ``fabric`` (or on ``net``); ``failures`` are
    links (a, b) down from one time to another. Times are the network's seconds."""
    net = net or SimNet(fabric, seed=seed)
    marks: list[FaultMark] = []
    for a, b, down, up in failures:
        net.fail_link(a, b, down, up)
        marks += [FaultMark(down, "down", f"{a} <-> {b}"), FaultMark(up, "up", f"{a} <-> {b}")]
    fabric = net.fabric
    config = StackConfig(mtu=fabric.topology.mtu).with_(dilation=net.dilation)
    contexts: dict[str, Context] = {}
    cqs: dict[str, CompletionQueue] = {}
    qps: dict[tuple[str, str], QueuePair] = {}

    def context(name: str) -> Context:
        if name not in contexts:
            host = fabric.host(name)
            ctx = Context(name, host.nics, config=config, seed=seed * 7919 + host.index)
            net.attach(ctx)
            contexts[name], cqs[name] = ctx, ctx.create_cq()
        return contexts[name]

    def cq(name: str) -> CompletionQueue:
        context(name)
        return cqs[name]

    def qp(a: str, b: str) -> QueuePair:
        if (a, b) not in qps:
            qa = context(a).create_qp(b, fabric.paths(a, b), cq=cqs[a], policy=policy)
            qb = context(b).create_qp(a, fabric.paths(b, a), cq=cqs[b], policy=policy)
            qa.connect(qb.qpn)
            qb.connect(qa.qpn)
            qps[(a, b)], qps[(b, a)] = qa, qb
        return qps[(a, b)]

    ranks = Ranks(net, job, context, cq, qp)
    steps = run_steps(job, ranks, until)
    transitions = [
        {"t": float(tr["time"]), "host": ctx.host, **{k: v for k, v in tr.items() if k != "time"}}
        for ctx in ranks.contexts
        for tr in ctx.stats()["ev_transitions"]
    ]
    annotate(steps, [m for m in marks if m.t <= net.now], transitions)
    return SimJobResult(steps, marks, transitions, net.now)


__all__ = ["Advance", "Ranks", "SimJobResult", "rank_pairs", "run_job", "run_steps"]
