"""Side by side with uet-htsim: one experiment description, run in both simulators, compared.

An :class:`Experiment` is what both simulators are built from: the fabric
(:class:`sim.fabric.SimFabric`: hosts, tiers, rate, hop latency, queue sizes), the traffic
(a :class:`sim.htsim.Matrix`) and the reference's options that have a meaning on both sides
(``-paths`` as EVs per QP, ``-paths 1`` as one EV per QP drawn by a hash, run
:data:`ECMP_DRAWS` times a side with the figures pooled, since that draw alone sets the tail, ``-failed N`` as
the links of spines ``0..N-1`` at a quarter of their rate, ``-q`` as the queue size,
``-sack_threshold`` at or below one packet as an ACK per packet, ``-end`` as the run's end). :func:`from_plan` makes one from an experiment of a
validation plan; the fabric is the two-tier leaf-spine of the matrix's node count
(:func:`sim.fabric.leaf_spine`) unless the plan names a topology file.

:func:`run_reference` runs it in ``htsim_uec`` (with ``-topo`` of that fabric and ``-mtu`` of
its data frame, so that both simulators move frames of the same size through queues of the same
bytes), :func:`run_sim` on :class:`sim.network.SimNet`. Each gives :class:`Figures`: tail FCT
over the ideal, FCT spread (first / last), NACKs and retransmissions per new packet, and each
cause's share of NSCC's window changes. :func:`compare` checks the targets: tail FCT within
10 %, NACKs per packet within a factor of 1.5, every cause's share within 0.1.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from host.transport.cc.nscc import CHANGE_CAUSES, NSCC_CASES
from host.transport.config import StackConfig
from host.transport.policy import POLICIES, balancer_policy
from sim.fabric import SimFabric, leaf_spine
from sim.htsim import (
    Matrix,
    PlanExperiment,
    Published,
    read_matrix,
    run_htsim,
)
from sim.network import SimNet
from sim.queues import QueuePolicy
from sim.workload import Progress, run_flows

#: the reference's default EVs per connection (``path_entropy_size``)
REFERENCE_PATHS = 64
#: the share of its rate a "failed" link keeps in the reference (``_failed_link_ratio``)
FAILED_LINK_SHARE = 0.25
#: runs per side of an experiment whose flows take one hashed path each (``-paths 1``): which
#: flows share a link is drawn once per run, and sets its tail (the reference's 16-host
#: permutation finishes at 2.34 to 4.64 times the ideal over sixty seeds). Twenty draws a side
#: left the means 11 % apart (htsim's first twenty seeds held none of its runs with at most two
#: flows a link); sixty bring them within 2 %, each side's draws as a uniform draw gives them
ECMP_DRAWS = 60
#: the targets
TAIL_FCT_TOLERANCE = 0.10
NACK_FACTOR = 1.5
SHARE_TOLERANCE = 0.10

#: options passed to the reference as they are (no counterpart needed in the sim)
_REFERENCE_ONLY = ("-sender_cc_only", "-cwnd")
#: a reorder threshold no window reaches: no packet is judged lost by later ones acknowledged
NO_SACK_LOSS = 1 << 30
#: the reference's load balancer when a plan names none (``main_uec.cpp``: MIXED)
REFERENCE_BALANCER = "mixed"
#: how the sim sprays: with the reference's load balancer (the ``uet-*`` policies over
#: STEV EVs the switches hash: the comparison of like with like) or with MRC's own spraying
#: over SRv6 paths (MRC's departure, measured beside it)
SPRAYING = ("uet", "mrc")


@dataclass(frozen=True)
class Experiment:
    """One comparison: fabric, traffic and options (see the module docstring)."""

    name: str
    fabric: SimFabric
    matrix: Matrix
    end_us: float = 1000.0
    paths: int = REFERENCE_PATHS
    failed: int = 0  #: spines whose links run at FAILED_LINK_SHARE
    #: the reference's receiver ACKs once 16,384 bytes are in (4 frames of 4,210 B), or at once
    #: for a CE-marked packet, an ACK request or the first packet (``UecSink::processData``)
    ack_every: int = 4
    #: the reference's receiver has no ACK timer: the sim's (``ack_delay``; the agents' 10 ns
    #: ACKs every packet at line rate) waits this long, past the run's end when None. A shorter
    #: one fires before the 4 packets of a flow that gets a share of a link (the outcast's
    #: tenths), and the RTT it echoes carries the wait: no sample stays under 1 us, no fast
    #: increase
    ack_delay_us: float | None = None
    #: data frames the sim's host NIC holds. The reference's NIC asks a source for its packet
    #: when a port is free (``UecNIC::requestSending``), so a packet's send time, and its RTT,
    #: start on the wire; with the agents' two (the one on the wire and the next) every RTT
    #: sample of a sender at line rate carries one frame time of the NIC's queue
    nic_slots: int = 1
    #: the sim's transport policy (:data:`host.transport.policy.POLICIES`): the reference's
    #: load balancer (``uet-mixed`` unless the plan names another), MRC's spraying ("mrc"),
    #: or with ``-paths 1`` "ecmp", one EV per QP picked by a hash of the QP among EVs on
    #: every path. The reference's one EV per connection goes where its switches' ECMP hash
    #: sends it (``FatTreeSwitch``: ``freeBSDHash(flow, EV, salt)``), a spine drawn per flow;
    #: MRC with one EV would put every QP on its first path, every flow on spine 0
    policy: str = "mrc"
    #: runs per side, seeds 1.. (the reference's ``-seed``), their figures pooled
    #: (:func:`pool`): 1, or :data:`ECMP_DRAWS` with ``-paths 1``, where which flows share a
    #: spine is drawn once per run on each side and that draw alone sets the tail
    draws: int = 1
    reference_args: tuple[str, ...] = ("-sender_cc_only",)
    notes: tuple[str, ...] = ()  #: options the sim does not model

    def htsim_args(self) -> list[str]:
        """The reference's arguments (``-topo`` is added by :func:`sim.htsim.run_htsim`)."""
        args = [*self.reference_args, "-end", f"{self.end_us:g}", "-paths", str(self.paths)]
        # the hosts' NIC rate (the topology file sets the switches' links only)
        args += [
            "-mtu",
            str(self.fabric.frame_bytes),
            "-linkspeed",
            f"{self.fabric.rate_gbps * 1e3:g}",
        ]
        if self.failed:
            args += ["-failed", str(self.failed)]
        if self.fabric.queues.packets is not None:
            args += ["-q", str(self.fabric.queues.packets)]
        if self.fabric.planes > 1:
            args += ["-planes", str(self.fabric.planes)]
        return args

    def reference_rto_us(self) -> float:
        """The reference's ACK timeout, microseconds: 15 us and six full queues at the link rate
        (``main_uec.cpp`` ``_min_rto``: "2 priority queues; 3 hops for incast"), after each
        packet's send time."""
        return 15.0 + self.fabric.port_queue().size_bytes * 6 * 8 / self.fabric.rate_bps * 1e6

    def ideal_us(self) -> float:
        """The tail FCT of a perfect fabric: the busiest host's bytes (sent or received) at one
        NIC's rate per plane."""
        load: dict[tuple[str, int], int] = {}
        for c in self.matrix.connections:
            load[("tx", c.src)] = load.get(("tx", c.src), 0) + c.size
            load[("rx", c.dst)] = load.get(("rx", c.dst), 0) + c.size
        busiest = max(load.values(), default=0)
        return busiest * 8 / (self.fabric.planes * self.fabric.rate_bps) * 1e6


def from_plan(plan: PlanExperiment, shared: Path, spraying: str = "uet") -> Experiment:
    """The experiment of one entry of a validation plan (matrix paths relative to ``shared``);
    ``spraying`` (:data:`SPRAYING`) says whether the sim sprays with the reference's load
    balancer or with MRC's own spraying."""
    if spraying not in SPRAYING:
        raise ValueError(f"spraying {spraying!r}: expected one of {', '.join(SPRAYING)}")
    matrix = read_matrix(shared / plan.matrix)
    params = list(plan.params)
    options: dict[str, Any] = {}
    reference: list[str] = []
    notes: list[str] = []
    balancer = REFERENCE_BALANCER
    fabric = leaf_spine(matrix.nodes)
    i = 0
    while i < len(params):
        key = params[i]
        value = params[i + 1] if i + 1 < len(params) else ""
        if key == "-end":
            options["end_us"] = float(value)
        elif key == "-paths":
            options["paths"] = int(value)
            if int(value) == 1:
                options["policy"] = "ecmp"
                options["draws"] = ECMP_DRAWS
        elif key == "-failed":
            options["failed"] = int(value)
        elif key == "-q":
            fabric = fabric.with_(queues=QueuePolicy(packets=int(value)))
        elif key == "-sack_threshold":
            options["ack_every"] = max(1, math.ceil(int(value) / fabric.frame_bytes))
            reference += [key, value]
        elif key == "-topo":
            fabric = _fabric_of_topo(shared / value, fabric)
        elif key == "-load_balancing_algo":
            balancer = value
            balancer_policy(value)  # refused here, naming the option, if the sim has none
            reference += [key, value]
        elif key == "-sender_cc_only":
            reference.append(key)
            i += 1
            continue
        elif key in _REFERENCE_ONLY:
            reference += [key, value]
            notes.append(f"{key} {value}: not modelled in the sim")
        else:
            raise ValueError(f"{plan.name}: option {key} has no counterpart in the comparison")
        i += 2
    if "policy" not in options:  # not a single hashed path
        options["policy"] = balancer_policy(balancer) if spraying == "uet" else "mrc"
    return Experiment(
        plan.name, fabric, matrix, reference_args=tuple(reference), notes=tuple(notes), **options
    )


def _fabric_of_topo(path: Path, fabric: SimFabric) -> SimFabric:
    """The leaf-spine a two-tier ``.topo`` file describes (hosts per leaf, uplinks, rate)."""
    tiers: list[dict[str, str]] = []
    for line in path.read_text().splitlines():
        words = line.split()
        if len(words) == 2 and words[0] == "Tier":
            tiers.append({})
        elif len(words) == 2 and tiers:
            tiers[-1][words[0]] = words[1]
    leaf = tiers[0]
    per_rack = int(leaf["Radix_Down"])
    return fabric.with_(
        racks=fabric.hosts // per_rack,
        hosts_per_rack=per_rack,
        spines_per_plane=int(leaf["Radix_Up"]),
        rate_gbps=float(leaf["Downlink_speed_Gbps"]),
        hop_latency_us=float(leaf["Downlink_Latency_ns"]) / 1e3,
    )


@dataclass
class Figures:
    """One simulator's figures for one experiment."""

    tail_fct_us: float | None
    first_fct_us: float | None
    ideal_us: float
    finished: int
    flows: int
    new_packets: int
    nacks: int
    retransmits: int
    changes: dict[str, float] = field(default_factory=dict)
    failed: int = 0  #: the sim's flows whose completion was an error (not finished)
    cpu_seconds: float | None = None
    #: the sim's only: acknowledged bytes per NSCC case (NSCC_CASES), every flow together, and
    #: the earliest time (us) any flow met each case or took its first NACK
    cases: dict[str, float] = field(default_factory=dict)
    first_us: dict[str, float] = field(default_factory=dict)
    #: the runs pooled into these figures (:func:`pool`), empty for one run
    draws: list[Figures] = field(default_factory=list)

    @property
    def tail_over_ideal(self) -> float | None:
        """Tail FCT / ideal."""
        return self.tail_fct_us / self.ideal_us if self.tail_fct_us and self.ideal_us else None

    @property
    def spread(self) -> float | None:
        """First FCT / last FCT."""
        if not self.tail_fct_us or self.first_fct_us is None:
            return None
        return self.first_fct_us / self.tail_fct_us

    @property
    def nacks_per_packet(self) -> float:
        """NACKs per new data packet."""
        return self.nacks / self.new_packets if self.new_packets else 0.0

    @property
    def retransmits_per_packet(self) -> float:
        """Retransmissions per new data packet."""
        return self.retransmits / self.new_packets if self.new_packets else 0.0

    def shares(self) -> dict[str, float]:
        """Each cause's share of the window changes (bytes), summing to 1 (empty: none)."""
        total = sum(abs(v) for v in self.changes.values())
        return {c: abs(self.changes.get(c, 0.0)) / total for c in CHANGE_CAUSES} if total else {}

    def case_shares(self) -> dict[str, float]:
        """Each NSCC case's share of the acknowledged bytes, summing to 1 (empty: none)."""
        total = sum(self.cases.values())
        return {c: self.cases.get(c, 0.0) / total for c in NSCC_CASES} if total else {}

    def steered_before_trims(self) -> bool | None:
        """True when a flow met ECN with its delay below target (the steering case) before any
        flow took a NACK; None when neither happened."""
        steer, nack = self.first_us.get("ecn_below_target"), self.first_us.get("nack")
        if steer is None and nack is None:
            return None
        return steer is not None and (nack is None or steer < nack)


def run_reference(exp: Experiment) -> Figures:
    """The experiment in ``htsim_uec`` on the sim's two-tier fabric (``exp.draws`` runs,
    seeds 1.., pooled)."""
    if exp.draws > 1:
        return pool([_run_reference(exp, ["-seed", str(n)]) for n in range(1, exp.draws + 1)])
    return _run_reference(exp, [])


def _run_reference(exp: Experiment, extra: list[str]) -> Figures:
    run = run_htsim(exp.matrix, topology=exp.fabric, args=[*exp.htsim_args(), *extra])
    changes = dict.fromkeys(CHANGE_CAUSES, 0.0)
    for flow in run.flows:
        for cause, value in flow.changes.items():
            changes[cause] += value
    # the reference's flow completion time is its finish time less the flow's start
    starts = {(c.src, c.dst): (c.start or 0.0) * 1e6 for c in exp.matrix.connections}
    fcts = [f.finished_us - starts.get((f.src, f.dst), 0.0) for f in run.flows]
    every = len(fcts) == len(exp.matrix.connections)
    return Figures(
        tail_fct_us=max(fcts) if fcts and every else None,
        first_fct_us=min(fcts) if fcts else None,
        ideal_us=exp.ideal_us(),
        finished=len(fcts),
        flows=len(exp.matrix.connections),
        new_packets=run.summary.get("New", 0),
        nacks=run.summary.get("NACKs", 0),
        retransmits=run.summary.get("Rtx", 0),
        changes=changes,
    )


def build_sim(exp: Experiment, *, seed: int = 1) -> SimNet:
    """The sim's network for ``exp``, its failed links degraded."""
    net = SimNet.build(exp.fabric, seed=seed)
    net.nic_slots = exp.nic_slots
    fabric = net.fabric
    for plane in range(exp.fabric.planes):
        for rack in range(exp.fabric.racks):
            for spine in range(min(exp.failed, exp.fabric.spines_per_plane)):
                net.degrade_link(fabric.t0_name(plane, rack), fabric.t1_name(plane, spine),
                                 FAILED_LINK_SHARE)  # fmt: skip
    return net


def run_sim(
    exp: Experiment, *, seed: int = 1, progress: Callable[[Progress], None] | None = None
) -> Figures:
    """The experiment on the sim (``exp.draws`` runs, seeds ``seed``.., pooled); ``progress``
    hears of each run as :func:`sim.workload.run_flows` tells it."""
    if exp.draws > 1:
        runs = []
        for n in range(exp.draws):
            tell = None
            if progress is not None:
                tell = functools.partial(_nth_run, progress, n + 1, exp.draws)
            runs.append(_run_sim(exp, seed + n, tell))
        return pool(runs)
    return _run_sim(exp, seed, progress)


def _nth_run(progress: Callable[[Progress], None], run: int, runs: int, p: Progress) -> None:
    progress(dataclasses.replace(p, run=run, runs=runs))


def pool(runs: Sequence[Figures]) -> Figures:
    """The figures of several runs of one experiment as one: the mean first and tail FCT (a
    tail only when every run had one), counts and NSCC's changes and cases summed, so shares
    and per-packet figures are over every run's packets. ``draws`` keeps each run's."""
    tails = [r.tail_fct_us for r in runs]
    firsts = [r.first_fct_us for r in runs if r.first_fct_us is not None]
    cpu = [r.cpu_seconds for r in runs if r.cpu_seconds is not None]

    def summed(attr: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for r in runs:
            for k, v in getattr(r, attr).items():
                out[k] = out.get(k, 0.0) + v
        return out

    first_us: dict[str, float] = {}
    for r in runs:
        for k, v in r.first_us.items():
            first_us[k] = min(first_us.get(k, math.inf), v)
    return Figures(
        tail_fct_us=None if None in tails else sum(t or 0.0 for t in tails) / len(tails),
        first_fct_us=sum(firsts) / len(firsts) if firsts else None,
        ideal_us=runs[0].ideal_us,
        finished=sum(r.finished for r in runs),
        failed=sum(r.failed for r in runs),
        flows=sum(r.flows for r in runs),
        new_packets=sum(r.new_packets for r in runs),
        nacks=sum(r.nacks for r in runs),
        retransmits=sum(r.retransmits for r in runs),
        changes=summed("changes"),
        cpu_seconds=sum(cpu) if cpu else None,
        cases=summed("cases"),
        first_us=first_us,
        draws=list(runs),
    )


def sim_config(exp: Experiment) -> StackConfig:
    """The sim's stack configuration for ``exp``: the reference's ACKs, and with one of its
    load balancers (the ``uet-*`` policies) its loss detection too."""
    ack_delay = (exp.ack_delay_us if exp.ack_delay_us is not None else 2 * exp.end_us) * 1e-6
    ev_count = REFERENCE_PATHS if exp.policy == "ecmp" else exp.paths
    config = StackConfig(
        mtu=exp.fabric.mtu, ev_count=ev_count, ack_every=exp.ack_every, ack_delay=ack_delay
    )
    if POLICIES[exp.policy].balancer is not None:
        # UET's sender as the reference runs it finds losses by NACKs and its ACK timeout
        # alone (SACK-based recovery, SLEEK, is off by default): none of MRC's loss rules (a
        # packet overtaken on its path, or late for it), and the reference's timeout
        config = config.with_(reorder_threshold=NO_SACK_LOSS, rto_min=exp.reference_rto_us() * 1e-6)
    return config


def _run_sim(
    exp: Experiment, seed: int, progress: Callable[[Progress], None] | None = None
) -> Figures:
    net = build_sim(exp, seed=seed)
    config = sim_config(exp)
    result = run_flows(
        net,
        exp.matrix.connections,
        cc=exp.fabric.nscc_profile(),
        config=config,
        until=exp.end_us * 1e-6,
        seed=seed,
        barriers={t.id: t.count for t in exp.matrix.triggers if t.kind == "barrier"},
        policy=exp.policy,
        progress=progress,
    )
    fcts = [f.fct * 1e6 for f in result.flows if f.fct is not None]
    changes = result.summary()["changes"]
    cases = dict.fromkeys(NSCC_CASES, 0.0)
    first_us: dict[str, float] = {}
    for flow in result.flows:
        for case, nbytes in flow.cases.items():
            cases[case] += nbytes
        for what, t in flow.first.items():
            first_us[what] = min(first_us.get(what, math.inf), t * 1e6)
    return Figures(
        tail_fct_us=max(fcts) if len(fcts) == len(result.flows) and fcts else None,
        first_fct_us=min(fcts) if fcts else None,
        ideal_us=exp.ideal_us(),
        finished=len(fcts),
        flows=len(result.flows),
        failed=len(result.failed),
        new_packets=result.new_packets,
        nacks=result.nacks,
        retransmits=result.retransmits,
        changes=changes,
        cpu_seconds=result.cpu_seconds,
        cases=cases,
        first_us=first_us,
    )


def published_figures(exp: Experiment, published: Published | None) -> Figures | None:
    """The published three-tier figures of the experiment (None: not published)."""
    if published is None:
        return None
    summary = published.summary
    return Figures(
        tail_fct_us=published.tail_fct_us,
        first_fct_us=published.first_fct_us,
        ideal_us=exp.ideal_us(),
        finished=0,
        flows=len(exp.matrix.connections),
        new_packets=summary.get("New", 0),
        nacks=summary.get("NACKs", 0),
        retransmits=summary.get("Rtx", 0),
    )


@dataclass(frozen=True)
class Verdict:
    """The targets, checked: each with the measured figure."""

    tail_ratio: float | None  #: sim tail FCT / reference tail FCT
    nack_factor: float | None  #: larger / smaller NACKs per packet (1 when both are 0)
    share_gap: float | None  #: the largest difference of a cause's share
    misses: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """Every target met."""
        return not self.misses


def compare(sim: Figures, ref: Figures) -> Verdict:
    """Check the targets (see the module docstring)."""
    misses: list[str] = []
    tail = sim.tail_fct_us / ref.tail_fct_us if sim.tail_fct_us and ref.tail_fct_us else None
    if tail is None:
        misses.append(f"tail FCT: sim {sim.tail_fct_us} us, reference {ref.tail_fct_us} us")
    elif abs(tail - 1) > TAIL_FCT_TOLERANCE:
        misses.append(f"tail FCT ratio {tail:.3f} (target 1 +- {TAIL_FCT_TOLERANCE})")
    a, b = sim.nacks_per_packet, ref.nacks_per_packet
    factor: float | None
    if a == b:
        factor = 1.0
    elif min(a, b) == 0:
        factor = math.inf
    else:
        factor = max(a, b) / min(a, b)
    if factor > NACK_FACTOR:
        misses.append(f"NACKs per packet: sim {a:.4f}, reference {b:.4f} (factor {factor:.2f})")
    shares_sim, shares_ref = sim.shares(), ref.shares()
    gap: float | None = None
    if shares_sim or shares_ref:
        gap = max(abs(shares_sim.get(c, 0.0) - shares_ref.get(c, 0.0)) for c in CHANGE_CAUSES)
        if gap > SHARE_TOLERANCE:
            worst = max(
                CHANGE_CAUSES, key=lambda c: abs(shares_sim.get(c, 0.0) - shares_ref.get(c, 0.0))
            )
            misses.append(
                f"share of {worst}: sim {shares_sim.get(worst, 0.0):.2f}, "
                f"reference {shares_ref.get(worst, 0.0):.2f}"
            )
    return Verdict(tail, factor, gap, tuple(misses))


def table_rows(
    sim: Figures, ref: Figures, published: Figures | None
) -> list[tuple[str, str, str, str, str]]:
    """Rows of (figure, sim, reference, sim / reference, published three-tier)."""

    def fmt(value: float | None, digits: int = 3) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    def ratio(a: float | None, b: float | None) -> str:
        return "-" if a is None or not b else f"{a / b:.2f}"

    rows = []
    figures: Sequence[tuple[str, str]] = (
        ("tail FCT / ideal", "tail_over_ideal"),
        ("FCT spread (first / last)", "spread"),
        ("NACKs per packet", "nacks_per_packet"),
        ("retransmissions per packet", "retransmits_per_packet"),
    )
    for label, attr in figures:
        a, b = getattr(sim, attr), getattr(ref, attr)
        c = getattr(published, attr) if published is not None else None
        rows.append((label, fmt(a), fmt(b), ratio(a, b), fmt(c)))
    shares_sim, shares_ref = sim.shares(), ref.shares()
    for cause in CHANGE_CAUSES:
        a, b = shares_sim.get(cause), shares_ref.get(cause)
        rows.append((f"share {cause}", fmt(a, 2), fmt(b, 2), ratio(a, b), "-"))
    return rows
