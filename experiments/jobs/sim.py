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
"""

from __future__ import annotations

from collections.abc import Sequence
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


class _Ranks:
    """The contexts, QPs and regions of a job's ranks on one network."""

    def __init__(self, net: SimNet, job: Job, policy: str, seed: int) -> None:
        fabric = net.fabric
        config = StackConfig(mtu=fabric.topology.mtu).with_(dilation=net.dilation)
        self.net = net
        self.hosts = list(job.ranks)
        n = len(self.hosts)
        self.contexts: list[Context] = []
        self.cqs: list[CompletionQueue] = []
        region = max(RankMachine(c, 0, n).region_bytes() for c in job.collectives)
        self.rkeys: list[int] = []
        for name in self.hosts:
            host = fabric.host(name)
            ctx = Context(name, host.nics, config=config, seed=seed * 7919 + host.index)
            net.attach(ctx)
            self.contexts.append(ctx)
            self.cqs.append(ctx.create_cq())
            self.rkeys.append(ctx.register_region(REGION, region).rkey)
        self.payload = memoryview(bytes(max(c.chunk(n) for c in job.collectives)))
        pairs = {(r, (r + 1) % n) for r in range(n)}
        if any(c.kind == "all-to-all" for c in job.collectives):
            pairs = {(a, b) for a in range(n) for b in range(n) if a != b}
        self.qps: dict[tuple[int, int], QueuePair] = {}  # (src, dst) -> the src's QP
        self.source: dict[tuple[int, int], int] = {}  # (receiving rank, its QPN) -> src rank
        for a, b in sorted(pairs):
            ha, hb = self.hosts[a], self.hosts[b]
            qa = self.contexts[a].create_qp(hb, fabric.paths(ha, hb), cq=self.cqs[a], policy=policy)
            qb = self.contexts[b].create_qp(ha, fabric.paths(hb, ha), cq=self.cqs[b], policy=policy)
            qa.connect(qb.qpn)
            qb.connect(qa.qpn)
            self.qps[(a, b)] = qa
            self.source[(b, qb.qpn)] = a

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

    def run_collective(self, collective: Collective, tag: int, deadline: float) -> float | None:
        """Run one collective from now; its end time (None: not finished by ``deadline``)."""
        ranks = machines(collective, len(self.hosts), tag)
        for r, m in enumerate(ranks):
            self.post(r, m.start())
        cqs = {h: self.cqs[i] for i, h in enumerate(self.hosts)}
        while not all(m.finished for m in ranks):
            if self.net.now >= deadline:
                return None
            self.net.run(deadline, host_stop=lambda host: host in cqs and len(cqs[host]) > 0)
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
    ranks = _Ranks(net, job, policy, seed)
    steps: list[StepRecord] = []
    net.run(job.start_s)
    for k in range(job.steps):
        start = net.now
        before = ranks.counters()
        net.run(start + job.compute_s)
        step = StepRecord(k, start, None, job.compute_s, [])
        end: float | None = net.now
        for i, collective in enumerate(job.collectives):
            began = net.now
            end = ranks.run_collective(collective, k * len(job.collectives) + i, until)
            step.collectives.append(collective_record(collective, len(job.ranks), began, end))
            if end is None:
                break
        step.end = end
        add_counters(step, before, ranks.counters())
        steps.append(step)
        if end is None:
            break
    transitions = [
        {"t": float(tr["time"]), "host": ctx.host, **{k: v for k, v in tr.items() if k != "time"}}
        for ctx in ranks.contexts
        for tr in ctx.stats()["ev_transitions"]
    ]
    annotate(steps, [m for m in marks if m.t <= net.now], transitions)
    return SimJobResult(steps, marks, transitions, net.now)


__all__ = ["SimJobResult", "run_job"]
