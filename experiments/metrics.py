"""Metrics of an experiment: capacity, goodput series, completion times, recovery after faults.

Everything here is a pure function of recorded data (the results folder's CSV/JSON), so
``mrc-testbed report DIR`` recomputes the same figures as the run did:

- :func:`capacity_bps` -- the aggregate rate the fabric can give a set of flows when some links
  are down: max-min fair progressive filling where each flow has one sub-flow per plane, using
  its NICs and the pooled leaf-spine links of its racks on that plane (a sprayed transport can
  use all of them);
- :func:`goodput_series` -- delivered payload per time bin from cumulative progress samples;
- :func:`recovery` -- time from a fault until the goodput is back to 90% of what survives;
- :func:`summarise` -- the per-transport figures (:class:`TransportMetrics`, with a
  :class:`Recovery` per fault) of ``metrics.json`` and the summary table.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from experiments.fidelity import FidelitySample, judge
from topologies import Fabric, Tier

RECOVERY_LEVEL = 0.9


@dataclass(frozen=True)
class Progress:
    """Cumulative payload bytes a flow has delivered at time ``t`` (seconds from phase start)."""

    t: float
    flow: str
    delivered: int


@dataclass(frozen=True)
class Completion:
    """One message of a flow: when it was posted and when it completed (None: never)."""

    flow: str
    message: int
    size: int
    start: float
    end: float | None


@dataclass(frozen=True)
class FaultMark:
    """A fault action at ``t``: ``down``/``up`` of a link or ``kill``/``start`` of a switch."""

    t: float
    action: str
    target: str  # "a <-> b" for a link, the switch name otherwise


@dataclass(frozen=True)
class CollectiveRecord:
    """One collective of a job's step: kind, size per rank, ranks, start and end (seconds from
    phase start; end None: it never finished), and nccl-tests' bandwidths in GB/s."""

    kind: str
    size: int
    ranks: int
    start: float
    end: float | None
    algbw: float | None = None  # size / time, GB/s
    busbw: float | None = None  # algbw x the kind's bus factor, GB/s


@dataclass
class StepRecord:
    """One step of a job (a line of ``steps.jsonl``): its times, its collectives, and what the
    transport did during it (agent counters summed over the ranks, EVs retired) and the faults
    that overlapped it (``faults``: "down a <-> b", "kill t1-p0-s0")."""

    step: int
    start: float
    end: float | None
    compute_s: float
    collectives: list[CollectiveRecord]
    retransmissions: float = 0.0
    trims: float = 0.0
    nacks: float = 0.0
    rtos: float = 0.0
    evs_retired: int = 0
    faults: list[str] = field(default_factory=list)

    @property
    def time(self) -> float | None:
        """The step's time (None: it never finished)."""
        return None if self.end is None else self.end - self.start

    @property
    def comm_s(self) -> float:
        """Time spent communicating: the collectives' times, end to end."""
        return sum(c.end - c.start for c in self.collectives if c.end is not None)

    def as_json(self) -> dict[str, Any]:
        """The ``steps.jsonl`` line (without the transport)."""
        return {**asdict(self), "time_s": self.time, "comm_s": self.comm_s}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StepRecord:
        """Read a ``steps.jsonl`` line back."""
        fields = {k: v for k, v in data.items() if k not in ("time_s", "comm_s", "transport")}
        fields["collectives"] = [CollectiveRecord(**c) for c in data.get("collectives", [])]
        return cls(**fields)


@dataclass
class TransportResult:
    """Everything recorded for one transport's run (one phase of a scenario)."""

    name: str
    kind: str
    duration: float
    flows: list[tuple[str, str]]
    progress: list[Progress] = field(default_factory=list)
    completions: list[Completion] = field(default_factory=list)
    faults: list[FaultMark] = field(default_factory=list)
    ev_states: list[dict[str, float]] = field(default_factory=list)  # t + state counts
    switches: dict[str, dict[str, int]] = field(default_factory=dict)
    # switch -> "rx/PORT" and "tx/PORT" -> bytes over the run (the per-port counters)
    ports: dict[str, dict[str, int]] = field(default_factory=dict)
    hosts: dict[str, dict[str, float]] = field(default_factory=dict)
    planes: dict[str, int] = field(default_factory=dict)  # plane -> bytes sent by host NICs
    base_rtt_s: float | None = None
    # messages whose bytes the receiver checked after the run (None: not checked, e.g. the
    # kernel's transports) and how many of them held other bytes than were sent
    checked: int | None = None
    corrupt: int = 0
    # EV state changes reported by the agents: t, host, qpn, ev, path, old, new, reason
    ev_transitions: list[dict[str, object]] = field(default_factory=list)
    # a job's steps (collective workloads), in order
    steps: list[StepRecord] = field(default_factory=list)
    # per sampling interval: CPU and lags of every switch, agent and the machine
    fidelity: list[FidelitySample] = field(default_factory=list)


def flow_name(src: str, dst: str) -> str:
    """The label of a flow (``h0->h2``)."""
    return f"{src}->{dst}"


# -- capacity ------------------------------------------------------------------------------------


def _link_key(a: str, b: str) -> frozenset[str]:
    return frozenset((a, b))


def failed_links(fabric: Fabric, marks: Iterable[FaultMark], t: float) -> set[frozenset[str]]:
    """The links (as node-name pairs) that are down at time ``t``."""
    down_links: set[frozenset[str]] = set()
    down_switches: set[str] = set()
    for mark in sorted(marks, key=lambda m: m.t):
        if mark.t > t:
            break
        if " <-> " in mark.target:
            a, b = mark.target.split(" <-> ")
            key = _link_key(a, b)
            (down_links.add if mark.action == "down" else down_links.discard)(key)
        else:
            (down_switches.add if mark.action == "kill" else down_switches.discard)(mark.target)
    for link in fabric.links:
        if link.a in down_switches or link.b in down_switches:
            down_links.add(_link_key(link.a, link.b))
    return down_links


def capacity_bps(
    fabric: Fabric, flows: Sequence[tuple[str, str]], down: set[frozenset[str]] | None = None
) -> float:
    """Aggregate max-min fair rate of ``flows`` with the links in ``down`` failed."""
    down = down or set()
    rate = fabric.topology.link_rate_mbps * 1e6
    capacity: dict[tuple[str, ...], float] = {}
    users: list[list[tuple[str, ...]]] = []
    for src, dst in flows:
        a, b = fabric.host(src), fabric.host(dst)
        for plane in range(fabric.topology.planes):
            na, nb = a.nic(plane), b.nic(plane)
            res: list[tuple[str, ...]] = []
            ok = True
            for nic, way in ((na, "tx"), (nb, "rx")):
                if _link_key(nic.host, nic.switch) in down:
                    ok = False
                nic_key: tuple[str, ...] = ("nic", nic.intf, way)
                capacity[nic_key] = rate
                res.append(nic_key)
            if a.rack != b.rack:
                for rack, direction in ((a.rack, "up"), (b.rack, "down")):
                    leaf = fabric.t0_name(plane, rack)
                    alive = sum(
                        1
                        for sw in fabric.switches
                        if sw.tier is Tier.T1
                        and sw.plane == plane
                        and _link_key(leaf, sw.name) not in down
                    )
                    capacity[(direction, leaf)] = alive * rate
                    res.append((direction, leaf))
                # Both racks must reach a common live spine.
                common = sum(
                    1
                    for sw in fabric.switches
                    if sw.tier is Tier.T1
                    and sw.plane == plane
                    and _link_key(fabric.t0_name(plane, a.rack), sw.name) not in down
                    and _link_key(fabric.t0_name(plane, b.rack), sw.name) not in down
                )
                ok = ok and common > 0
            if ok and all(capacity[k] > 0 for k in res):
                users.append(res)
    # Progressive filling: raise every unfrozen sub-flow together until a resource saturates.
    rates = [0.0] * len(users)
    frozen = [False] * len(users)
    left = dict(capacity)
    while not all(frozen):
        count: dict[tuple[str, ...], int] = {}
        for i, res in enumerate(users):
            if not frozen[i]:
                for k in res:
                    count[k] = count.get(k, 0) + 1
        step = min(left[k] / n for k, n in count.items())
        for i, res in enumerate(users):
            if not frozen[i]:
                rates[i] += step
                for k in res:
                    left[k] -= step
        for i, res in enumerate(users):
            if not frozen[i] and any(left[k] <= 1e-6 for k in res):
                frozen[i] = True
    return sum(rates)


# -- series --------------------------------------------------------------------------------------


def goodput_series(
    progress: Sequence[Progress], duration: float, interval: float
) -> list[tuple[float, float]]:
    """(bin end time, aggregate goodput in b/s) per ``interval`` from cumulative progress.

    The bytes a flow delivered between two of its samples are spread evenly over the time
    between them, so a late sample does not show as a gap followed by a spike; what falls
    after ``duration`` is left out of the series (not out of the delivered totals).
    """
    bins = max(1, math.ceil(duration / interval - 1e-9))
    totals = [0.0] * bins
    last: dict[str, tuple[float, int]] = {}
    for p in sorted(progress, key=lambda p: p.t):
        t_prev, d_prev = last.get(p.flow, (0.0, 0))
        delta = p.delivered - d_prev
        if delta > 0:
            start, end = (t_prev, p.t) if p.t > t_prev else (p.t - 1e-9, p.t)
            span = end - start
            first = max(0, int(start // interval))
            for i in range(first, min(bins, int(end // interval) + 1)):
                lo, hi = max(start, i * interval), min(end, (i + 1) * interval)
                if hi > lo:
                    totals[i] += delta * (hi - lo) / span
        if p.delivered >= d_prev:
            last[p.flow] = (p.t, p.delivered)
    return [((i + 1) * interval, totals[i] * 8 / interval) for i in range(bins)]


def capacity_series(
    fabric: Fabric,
    flows: Sequence[tuple[str, str]],
    marks: Sequence[FaultMark],
    duration: float,
    interval: float,
) -> list[tuple[float, float]]:
    """(time, capacity in b/s) at every bin end, given the faults."""
    bins = max(1, math.ceil(duration / interval - 1e-9))
    out = []
    for i in range(bins):
        t = (i + 1) * interval
        out.append((t, capacity_bps(fabric, flows, failed_links(fabric, marks, t - interval / 2))))
    return out


def capacity_integral(
    fabric: Fabric,
    flows: Sequence[tuple[str, str]],
    marks: Sequence[FaultMark],
    start: float,
    end: float,
) -> float:
    """The bits the flows' capacity allowed between ``start`` and ``end``: exact, piece by
    piece between the faults' times (not the sampling intervals', which at a slow emulated
    rate last seconds and would stretch the window by up to one of them)."""
    cuts = sorted({start, end, *(m.t for m in marks if start < m.t < end)})
    return sum(
        capacity_bps(fabric, flows, failed_links(fabric, marks, (a + b) / 2)) * (b - a)
        for a, b in zip(cuts, cuts[1:], strict=False)
    )


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile (0..1) by nearest rank, or None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]


def recovery(
    series: Sequence[tuple[float, float]],
    capacity: Sequence[tuple[float, float]],
    fault_t: float,
    interval: float,
    level: float = RECOVERY_LEVEL,
) -> float | None:
    """Seconds from ``fault_t`` until goodput is back to ``level`` of what survives.

    What survives is the capacity after the fault, scaled by the share of the capacity the
    transport reached just before the fault (a transport that filled 60% of the fabric before
    is asked for 60% of what survives, not more). The answer has the resolution of one
    sampling interval; None when it never recovers within the series.
    """
    before = [g for t, g in series if fault_t - 4 * interval <= t - interval and t <= fault_t]
    caps_before = [c for t, c in capacity if t <= fault_t]
    share = 1.0
    if before and caps_before and caps_before[-1] > 0:
        share = min(1.0, (sum(before) / len(before)) / caps_before[-1])
    for (t, g), (_, cap) in zip(series, capacity, strict=False):
        if t - interval < fault_t - 1e-9:
            continue
        target = level * cap * share
        if g >= target and target > 0:
            return max(0.0, t - fault_t)
    return None


def affected_labels(fabric: Fabric, target: str) -> set[str]:
    """Labels (``p0-s1``) of the paths that cross a failed link or one of the failed switches
    (``a, b``), and ``pN-ecmp`` for their planes (EVs the fabric hashes onto paths)."""
    labels: set[str] = set()
    hosts = [h.name for h in fabric.hosts]
    link = " <-> " in target
    nodes = set(target.split(" <-> ")) if link else set(target.split(", "))
    for src in hosts:
        for dst in hosts:
            if src == dst:
                continue
            for path in fabric.paths(src, dst):
                chain = [src, *(hop.switch for hop in path.hops), dst]
                pairs = {frozenset(pair) for pair in zip(chain, chain[1:], strict=False)}
                if (link and frozenset(nodes) in pairs) or (not link and nodes & set(chain)):
                    labels.add(path.label)
                    # STEV / UDP EVs are labelled by plane: ECMP may put any of them there
                    labels.add(f"p{path.plane}-ecmp")
    return labels


#: how long after a fault an EV going ASSUMED_BAD on an affected path counts as its failover,
#: in base RTTs (a time in seconds would shrink, in RTTs, as the link rate falls: 2 s, once
#: the window, is under two base RTTs on eight planes at 0.65 Mb/s)
DETECTION_RTTS = 20.0


def detection(
    fabric: Fabric,
    transitions: Sequence[Mapping[str, object]],
    mark: FaultMark,
    window: float,
) -> tuple[float | None, float | None, int]:
    """How fast senders stopped trusting the failed paths: (median, max, QPs) of the delay
    from the fault to each QP's first EV on an affected path going ASSUMED_BAD within
    ``window`` seconds."""
    labels = affected_labels(fabric, mark.target)
    first: dict[tuple[str, str], float] = {}
    for tr in transitions:
        t = float(tr.get("t", 0.0))  # type: ignore[arg-type]
        if not mark.t <= t <= mark.t + window:
            continue
        if str(tr.get("new", "")).upper() != "ASSUMED_BAD" or str(tr.get("path")) not in labels:
            continue
        key = (str(tr.get("host")), str(tr.get("qpn")))
        first[key] = min(first.get(key, math.inf), t - mark.t)
    delays = sorted(first.values())
    if not delays:
        return None, None, 0
    return percentile(delays, 0.5), delays[-1], len(delays)


# -- the summary ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Recovery:
    """How one fault (a link down, a switch killed) was recovered from."""

    t: float
    fault: str  # "down a <-> b", "kill t1-p0-s0"
    flows_active: bool  # the flows still ran after the fault
    recovery_s: float | None  # goodput back to RECOVERY_LEVEL of what survives
    recovery_real_s: float | None
    recovery_rtts: float | None
    ev_failover_p50_s: float | None  # fault to a QP's first EV on a failed path ASSUMED_BAD
    ev_failover_p50_real_s: float | None
    ev_failover_max_s: float | None
    ev_failover_p50_rtts: float | None
    ev_failover_qps: int


@dataclass(frozen=True)
class TransportMetrics:
    """The figures of one transport: one entry of ``metrics.json``'s ``transports`` (same
    keys as the fields, :meth:`as_json`) and one row of the summary table."""

    transport: str
    flows: int
    complete: bool
    delivered_bytes: int
    goodput_bps: float
    capacity_bps: float
    goodput_fraction: float
    message_completion_p50_s: float | None
    message_completion_p99_s: float | None
    flow_completion_s: dict[str, float]
    flow_completion_p50_s: float | None
    flow_completion_max_s: float | None
    rtos: float
    messages_checked: int | None
    messages_corrupt: int
    ev_retirements: int
    nacks: float
    host_totals: dict[str, float]
    switch_totals: dict[str, int]
    base_rtt_s: float
    base_rtt_real_s: float | None
    dilation: float
    nominal_rate_gbps: float
    agent_min_rtt_s: float | None
    recovery: tuple[Recovery, ...]
    planes_bytes: dict[str, int]
    # the verdict on the run's fidelity (experiments.fidelity.Verdict.as_json)
    fidelity: dict[str, Any] = field(default_factory=dict)

    @property
    def faithful(self) -> bool:
        """False when the machine fell behind during the phase (see experiments.fidelity)."""
        return bool(self.fidelity.get("faithful", True))

    def as_json(self) -> dict[str, Any]:
        """The ``metrics.json`` entry."""
        return {**asdict(self), "recovery": [asdict(r) for r in self.recovery]}


def summarise(fabric: Fabric, result: TransportResult, interval: float) -> TransportMetrics:
    """The figures of one transport for metrics.json and the summary table."""
    series = goodput_series(result.progress, result.duration, interval)
    capacity = capacity_series(fabric, result.flows, result.faults, result.duration, interval)
    done = [c for c in result.completions if c.end is not None]
    started = [c.start for c in result.completions]
    first = min(started) if started else 0.0
    flows_done: dict[str, float] = {}
    complete = True
    for src, dst in result.flows:
        name = flow_name(src, dst)
        mine = [c for c in result.completions if c.flow == name]
        if not mine or any(c.end is None for c in mine):
            complete = False
            continue
        flows_done[name] = max(c.end for c in mine if c.end is not None) - min(
            c.start for c in mine
        )
    last = max((c.end for c in done if c.end is not None), default=result.duration)
    end = last if complete else result.duration
    most: dict[str, int] = {}
    for p in result.progress:  # per flow, or per receiver ("rx:h0") for MRC agents
        most[p.flow] = max(most.get(p.flow, 0), p.delivered)
    delivered = sum(most.values())
    cap_integral = capacity_integral(fabric, result.flows, result.faults, first, end)
    latencies = [c.end - c.start for c in done if c.end is not None]
    recoveries = []
    # A data packet's RTT cannot be below the serialisation floor; an agent's smallest sample
    # may come from a small packet (a probe), so the larger of the two is the base RTT.
    base_rtt = max(fabric.topology.base_rtt, result.base_rtt_s or 0.0)
    for mark in result.faults:
        if mark.action in ("down", "kill"):
            active = mark.t < end - interval  # the flows still ran after the fault
            took = (
                recovery([x for x in series if x[0] <= end + interval], capacity, mark.t, interval)
                if active
                else None
            )
            rtt = base_rtt
            rtts = took / rtt if took is not None and rtt else None
            median, worst, qps = detection(
                fabric, result.ev_transitions, mark, DETECTION_RTTS * base_rtt
            )
            recoveries.append(
                Recovery(
                    t=mark.t,
                    fault=f"{mark.action} {mark.target}",
                    flows_active=active,
                    recovery_s=took,
                    recovery_real_s=real_time(fabric, took),
                    recovery_rtts=rtts,
                    ev_failover_p50_s=median,
                    ev_failover_p50_real_s=real_time(fabric, median),
                    ev_failover_max_s=worst,
                    ev_failover_p50_rtts=median / rtt if median is not None and rtt else None,
                    ev_failover_qps=qps,
                )
            )
    totals: dict[str, float] = {}
    for stats in result.hosts.values():
        for key, value in stats.items():
            totals[key] = totals.get(key, 0.0) + value
    switch_totals = {
        k: sum(sw.get(k, 0) for sw in result.switches.values())
        for k in ("trimmed", "ecn_marked", "drops")
    }
    return TransportMetrics(
        transport=result.kind,
        flows=len(result.flows),
        complete=complete,
        delivered_bytes=delivered,
        goodput_bps=delivered * 8 / max(end - first, 1e-9),
        capacity_bps=capacity_bps(fabric, result.flows),
        goodput_fraction=delivered * 8 / cap_integral if cap_integral else 0.0,
        message_completion_p50_s=percentile(latencies, 0.5),
        message_completion_p99_s=percentile(latencies, 0.99),
        flow_completion_s=flows_done,
        flow_completion_p50_s=percentile(list(flows_done.values()), 0.5),
        flow_completion_max_s=max(flows_done.values()) if flows_done else None,
        rtos=totals.get("rtos", 0.0),
        messages_checked=result.checked,
        messages_corrupt=result.corrupt,
        ev_retirements=sum(1 for tr in result.ev_transitions if tr.get("new") == "assumed_bad"),
        nacks=totals.get("nacks", 0.0),
        host_totals=totals,
        switch_totals=switch_totals,
        base_rtt_s=base_rtt,
        base_rtt_real_s=real_time(fabric, base_rtt),
        dilation=fabric.topology.dilation,
        nominal_rate_gbps=fabric.topology.nominal_rate_gbps,
        agent_min_rtt_s=result.base_rtt_s,
        recovery=tuple(recoveries),
        planes_bytes=dict(result.planes),
        fidelity=judge(result.fidelity, fabric.topology.frame_time).as_json(),
    )


def real_time(fabric: Fabric, seconds: float | None) -> float | None:
    """The real-fabric equivalent of ``seconds`` measured on the emulation: divided by the
    topology's time dilation (nominal link rate / emulated link rate)."""
    return None if seconds is None else seconds / fabric.topology.dilation


def format_real(seconds: float | None, nominal_rate_gbps: float) -> str:
    """``4.1 us at 100 Gb/s``: a real-fabric time in the unit that reads best."""
    if seconds is None:
        return "-"
    for unit, scale in (("ns", 1e-9), ("us", 1e-6), ("ms", 1e-3)):
        if seconds < 1000 * scale:
            text = f"{seconds / scale:.3g} {unit}"
            break
    else:
        text = f"{seconds:.3g} s"
    return f"{text} at {nominal_rate_gbps:g} Gb/s"


def format_seconds(value: float | None) -> str:
    """``4.1 s``, ``320 ms``, or ``-`` for None."""
    if value is None:
        return "-"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.1f} s"


def summary_rows(metrics: Mapping[str, TransportMetrics]) -> list[list[str]]:
    """Rows of the summary table: transport, goodput/capacity, completion, RTOs, recovery."""
    rows = []
    for name, m in metrics.items():
        rec_text = ev_text = "-"
        if m.recovery:
            first = m.recovery[0]
            took = first.recovery_s
            rec_text = "never" if took is None else format_seconds(took)
            if took is not None and first.recovery_real_s is not None:
                rec_text += f" = {format_real(first.recovery_real_s, m.nominal_rate_gbps)}"
            if not first.flows_active:
                rec_text = "done before"
            failover = first.ev_failover_p50_s
            if failover is not None:
                rtts = first.ev_failover_p50_rtts
                ev_text = f"{failover * 1000:.1f} ms"
                if first.ev_failover_p50_real_s is not None:
                    ev_text += (
                        f" = {format_real(first.ev_failover_p50_real_s, m.nominal_rate_gbps)}"
                    )
                ev_text += f" ({rtts:.1f} RTT)" if rtts else ""
        p50 = format_seconds(m.flow_completion_p50_s)
        worst = format_seconds(m.flow_completion_max_s) if m.complete else "incomplete"
        rows.append(
            [
                name,
                f"{m.goodput_fraction:.2f}",
                f"{m.goodput_bps / 1e6:.1f} Mb/s",
                f"{p50} / {worst}",
                f"{int(m.rtos)}",
                f"{int(m.nacks)}",
                str(m.switch_totals.get("trimmed", 0)),
                rec_text,
                ev_text,
                m.fidelity.get("verdict", "-"),
            ]
        )
    return rows


SUMMARY_COLUMNS = [
    "transport",
    "goodput/capacity",
    "goodput",
    "flow completion p50/max",
    "RTOs",
    "NACKs",
    "trims",
    "goodput recovery",
    "EV failover p50",
    "fidelity",
]
