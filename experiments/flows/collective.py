"""A training job's collectives as the phase's flows: through the host agents, or over kernel
TCP / MPTCP.

:class:`JobDriver` is the step loop both share: per step, the compute time, then each
collective; a step ends when every rank of every collective is finished, and its record
(``steps.jsonl``) carries the transport's counters over the step, summed over the ranks.

:class:`CollectiveFlows` (MRC transports) sets the agents up as
:class:`~experiments.flows.mrc.MrcFlows` does (restart, trimming, CC profile, EV format) and
registers one receive region per rank. In each collective every rank's
:class:`~experiments.jobs.collectives.RankMachine` is started, and every
:class:`~experiments.jobs.collectives.Send` it asks for becomes a ``transfer`` of one WRITE_IMM
(``imm``) into the destination rank's region. As in the sim's job (:mod:`experiments.jobs.sim`)
and in an MRC application, a rank learns of a message from its own completions: a waiter
thread per transfer (``wait``) reports the sender's completion (every byte acknowledged) to the
sending rank's machine, and one thread per rank (``received``) reports each WRITE_IMM its agent
received to the receiving rank's, which may then post its next ring step before the sender has
its ACK. The next messages are posted as the machines ask. Progress (placed bytes at each
rank) and EV states (towards the ranks each one writes to) are sampled as for transfers, so
``goodput.png`` and ``ev_states.png`` show the job too. The bytes of a collective are the
agent's pattern, not reduced values: the reduction itself is checked by
``capi/examples/mrc_allreduce.c``.

:class:`KernelCollectiveFlows` (``tcp``, ``mptcp``) puts the kernel on the NICs as
:class:`~experiments.flows.kernel.KernelFlows` does and starts one rank program per host
(:mod:`experiments.flows.kernel_rank`: the same machines over streams, a header per message
standing for the immediate), connected over the hosts' plane-0 addresses (MPTCP adds a subflow
per plane); each collective is a line to every rank program, and it ends when every one
answered. Its step counters are the namespaces' TCP retransmitted segments and timeouts.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
from abc import ABC, abstractmethod
from typing import Any

from experiments.flows.base import PhaseView
from experiments.flows.kernel import KernelFlows, netstat
from experiments.flows.mrc import MrcFlows
from experiments.jobs.collectives import (
    Collective,
    Job,
    RankMachine,
    Send,
    machines,
    split_imm,
)
from experiments.jobs.steps import add_counters, collective_record, transport_counters
from experiments.metrics import StepRecord

SENT, RECEIVED = "sent", "received"
#: one report from a waiter thread: (SENT or RECEIVED, sending rank, destination rank,
#: immediate, error or None)
Report = tuple[str, int, int, int, str | None]
#: seconds a waiter's request to its agent waits before the thread looks at the phase again
WAIT_SLICE = 1.0


class JobDriver(ABC):
    """The step loop of a scenario's job, shared by the agents' and the kernel's flows: per
    step the compute time, then each collective (:meth:`_collective`), the transport's
    counters (:meth:`_counters`) read around the step."""

    phase: PhaseView
    job: Job
    ranks: list[str]
    complete: bool

    def _take_job(self, phase: PhaseView) -> Job:
        """The scenario's job, its ranks, and not complete yet."""
        if phase.scenario.job is None:
            raise ValueError("collective flows need a scenario with a job")
        self.job = phase.scenario.job
        self.ranks = list(self.job.ranks)
        self.complete = False
        return self.job

    @abstractmethod
    def _collective(self, collective: Collective, tag: int) -> float | None:
        """Run one collective over the ranks; its end (None: stopped or failed)."""

    @abstractmethod
    def _counters(self) -> dict[str, float]:
        """The transport's counters summed over the ranks (retransmissions, trims, ...)."""

    def _job(self) -> None:
        """Run every step; ``complete`` once the last one ended."""
        phase, job = self.phase, self.job
        if phase.stop.wait(max(0.0, job.start_s - phase.now())):
            return
        try:
            for k in range(job.steps):
                before = self._counters()  # read between steps: not in the step's time
                start = phase.now()
                step = StepRecord(k, start, None, job.compute_s, [])
                with phase.lock:
                    phase.result.steps.append(step)
                if phase.stop.wait(job.compute_s):
                    return
                end: float | None = phase.now()
                for i, collective in enumerate(job.collectives):
                    began = phase.now()
                    end = self._collective(collective, k * len(job.collectives) + i)
                    step.collectives.append(
                        collective_record(collective, len(self.ranks), began, end)
                    )
                    if end is None:
                        return
                step.end = end
                add_counters(step, before, self._counters())
            self.complete = True
        except Exception as exc:
            phase.errors.append(f"job: {exc}")


class CollectiveFlows(JobDriver, MrcFlows):
    """The scenario's job, run through the agents' control sockets."""

    def __init__(self, phase: PhaseView) -> None:
        super().__init__(phase)
        job = self._take_job(phase)
        n = len(self.ranks)
        self.receivers = sorted({*self.receivers, *self.ranks})
        every = any(c.kind == "all-to-all" for c in job.collectives)
        for r, host in enumerate(self.ranks):
            writes_to = [p for p in self.ranks if p != host] if every else [self.ranks[(r + 1) % n]]
            mine = self.peers.setdefault(host, [])
            mine += [p for p in writes_to if p not in mine]
        self.rank_regions: list[dict[str, Any]] = []

    def prepare(self) -> None:
        """The agents as for transfers, and one receive region per rank."""
        super().prepare()
        n = len(self.ranks)
        size = max(RankMachine(c, 0, n).region_bytes() for c in self.job.collectives)
        for r, host in enumerate(self.ranks):
            with self.client(host) as c:
                self.rank_regions.append(c.register(f"rank{r}", size))

    def threads(self) -> list[threading.Thread]:
        """The job's thread (and one per transfer flow of the workloads, if any)."""
        return [*super().threads(), threading.Thread(target=self._job, daemon=True, name="job")]

    def _counters(self) -> dict[str, float]:
        total: dict[str, float] = {}
        for host in self.ranks:
            try:
                with self.client(host, timeout=5.0) as c:
                    core = c.stats().get("stats", {}).get("core", {})
            except Exception:
                continue
            for key, value in transport_counters(core).items():
                total[key] = total.get(key, 0.0) + value
        return total

    def _collective(self, collective: Collective, tag: int) -> float | None:
        """Run one collective; its end (None: the phase stopped or a transfer failed)."""
        phase = self.phase
        ranks = machines(collective, len(self.ranks), tag)
        reports: queue.Queue[Report] = queue.Queue()
        clients = [self.client(h) for h in self.ranks]
        over = threading.Event()
        try:
            for r, c in enumerate(clients):
                # what each agent had received before this collective is not its business
                since = int(c.received(since=1 << 62)["last"])
                listener = threading.Thread(
                    target=self._receive,
                    args=(r, since, ranks[r].tag, reports, over),
                    daemon=True,
                    name=f"received{r}",
                )
                listener.start()
            for r, m in enumerate(ranks):
                self._post(clients[r], r, m.start(), reports)
            while not all(m.finished for m in ranks):
                if phase.stop.is_set():
                    return None
                try:
                    kind, src, dst, imm, error = reports.get(timeout=0.5)
                except queue.Empty:
                    continue
                if error is not None:
                    phase.errors.append(f"collective {collective.kind}: {error}")
                    return None
                if kind == SENT:
                    self._post(clients[src], src, ranks[src].on_sent(imm), reports)
                else:
                    self._post(clients[dst], dst, ranks[dst].on_received(src, imm), reports)
            return phase.now()
        finally:
            over.set()  # each listener ends within WAIT_SLICE; the next step need not wait
            for c in clients:
                c.close()

    def _receive(
        self, rank: int, since: int, tag: int, reports: queue.Queue[Report], over: threading.Event
    ) -> None:
        """Report each WRITE_IMM of collective ``tag`` that rank ``rank``'s agent receives
        after its ``since``-th, until the collective is over."""
        phase = self.phase
        host = self.ranks[rank]
        try:
            with self.client(host) as c:
                while not (over.is_set() or phase.stop.is_set()):
                    reply = c.received(since=since, timeout=WAIT_SLICE)
                    since = int(reply["last"])
                    for got in reply["received"]:
                        peer, imm = got.get("peer"), int(got["imm"])
                        if peer not in self.ranks or split_imm(imm)[0] != tag:
                            continue  # another flow's immediate
                        src = self.ranks.index(peer)
                        error = None
                        if got.get("status") != "ok":
                            error = f"{peer} -> {host}: WRITE_IMM received {got.get('status')}"
                        reports.put((RECEIVED, src, rank, imm, error))
        except Exception as exc:
            if not over.is_set():
                reports.put((RECEIVED, rank, rank, 0, f"{host}: received: {exc}"))

    def _post(self, client: Any, src: int, sends: list[Send], reports: queue.Queue[Report]) -> None:
        for s in sends:
            region = self.rank_regions[s.dst]
            reply = client.transfer(
                self.ranks[s.dst],
                int(region["addr"]) + s.offset,
                int(region["rkey"]),
                s.size,
                policy=self.phase.transport.kind,
                message_size=s.size,
                imm=s.imm,
                seed=s.imm,
            )
            threading.Thread(
                target=self._wait,
                args=(src, s, int(reply["transfer"]), reports),
                daemon=True,
                name=f"wait{src}-{s.imm:#x}",
            ).start()

    def _wait(self, src: int, send: Send, transfer: int, reports: queue.Queue[Report]) -> None:
        phase = self.phase
        error: str | None = None
        try:
            with self.client(self.ranks[src]) as c:
                while True:
                    left = phase.scenario.duration_s - phase.now()
                    if left <= 0 or phase.stop.is_set():
                        return
                    reply = c.wait([transfer], timeout=min(left, WAIT_SLICE))
                    if reply.get("complete"):
                        break
            if reply.get("failed"):
                summary = reply["transfers"][str(transfer)]
                error = f"{self.ranks[src]} -> {self.ranks[send.dst]}: {summary.get('error')}"
        except Exception as exc:
            error = f"{self.ranks[src]} -> {self.ranks[send.dst]}: {exc}"
        reports.put((SENT, src, send.dst, send.imm, error))

    def finished(self) -> bool:
        """True when every step of the job ended (and every transfer flow completed)."""
        return self.complete and super().finished()


class KernelCollectiveFlows(JobDriver, KernelFlows):
    """The scenario's job over kernel TCP or MPTCP: one rank program
    (:mod:`experiments.flows.kernel_rank`) per host, told each collective on its standard
    input; a collective ends when every rank reported it finished."""

    def __init__(self, phase: PhaseView) -> None:
        super().__init__(phase)
        self._take_job(phase)
        self.rank_procs: list[subprocess.Popen[bytes]] = []
        self.lines: list[queue.Queue[dict[str, Any]]] = []

    def threads(self) -> list[threading.Thread]:
        """The job's thread (and the transfer flows' starter)."""
        return [*super().threads(), threading.Thread(target=self._job, daemon=True, name="job")]

    def _job(self) -> None:
        """Start the rank programs, wait until every one is connected, run the steps."""
        phase = self.phase
        addrs = ",".join(str(self.fabric.host(h).nic(0).address) for h in self.ranks)
        every = any(c.kind == "all-to-all" for c in self.job.collectives)
        for r, host in enumerate(self.ranks):
            argv = [
                sys.executable, "-m", "experiments.flows.kernel_rank", "--rank", str(r),
                "--addrs", addrs, "--port", str(RANK_PORT), "--proto", self.proto,
                "--timeout", f"{phase.scenario.duration_s:g}", *(["--all-pairs"] if every else []),
            ]  # fmt: skip
            log = open(self.dir / f"rank{r}.log", "wb")  # noqa: SIM115 -- owned by the child
            proc = self.node(host).popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log
            )
            log.close()
            self.rank_procs.append(proc)
            lines: queue.Queue[dict[str, Any]] = queue.Queue()
            self.lines.append(lines)
            threading.Thread(target=_read_json, args=(proc, lines), daemon=True).start()
        for r, lines in enumerate(self.lines):
            if self._next(lines, "ready") is None:
                phase.errors.append(f"job: rank {r} ({self.ranks[r]}) never connected")
                return
        super()._job()

    def _next(self, lines: queue.Queue[dict[str, Any]], key: str) -> dict[str, Any] | None:
        while not self.phase.stop.is_set():
            try:
                record = lines.get(timeout=0.5)
            except queue.Empty:
                continue
            if key in record:
                return record
            if "error" in record or "eof" in record:
                return None
        return None

    def _collective(self, collective: Collective, tag: int) -> float | None:
        for proc in self.rank_procs:
            assert proc.stdin is not None
            proc.stdin.write(f"run {collective.kind} {collective.size} {tag}\n".encode())
            proc.stdin.flush()
        for r, lines in enumerate(self.lines):
            if self._next(lines, "tag") is None:
                self.phase.errors.append(f"collective {collective.kind}: rank {r} failed")
                return None
        return self.phase.now()

    def _counters(self) -> dict[str, float]:
        total = {"retransmissions": 0.0, "rtos": 0.0}
        for host in self.ranks:
            counts = netstat(self.node(host))
            total["retransmissions"] += counts.get("RetransSegs", 0.0)
            total["rtos"] += counts.get("TCPTimeouts", 0.0)
        return total

    def finished(self) -> bool:
        """True when every step of the job ended (and every transfer flow completed)."""
        return self.complete and super().finished()

    def finish(self) -> None:
        """Stop the rank programs with the transfer flows' processes; record as for those."""
        self.processes += self.rank_procs
        super().finish()


RANK_PORT = 26000  # the kernel rank programs' port, below the ephemeral ports


def _read_json(proc: subprocess.Popen[bytes], lines: queue.Queue[dict[str, Any]]) -> None:
    """Every JSON line a rank program prints, then ``{"eof": ...}``."""
    assert proc.stdout is not None
    for raw in proc.stdout:
        try:
            lines.put(json.loads(raw))
        except ValueError:
            continue
    lines.put({"eof": True})


__all__ = ["CollectiveFlows", "JobDriver", "KernelCollectiveFlows"]
