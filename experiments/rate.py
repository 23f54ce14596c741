"""The emulated link rate a machine keeps faithful: the CPU budget and the rate it allows.

Time dilation holds while every switch and agent keeps up (:mod:`experiments.fidelity`). What
they need grows with the link rate: at rate R every host NIC that sends at line rate puts
``R / (frame bits)`` data frames a second into the fabric, each crossing its path's switches
and handled by the agents at both ends (its ACK with it). Given what a switch hop and an agent
packet cost on this machine (a :class:`Calibration`, measured by
:mod:`experiments.calibrate`), :func:`assess` says what a fabric and its workload need at a
rate (a :class:`Need`, in cores) against the :class:`Budget`, and :func:`choose_rate` picks the
highest rate within it. Everything here is a pure function of its arguments.

The demand of a workload (:func:`fabric_load`): its flows' distinct senders S and receivers
D; each sending NIC carries ``min(1, D/S)`` of the line rate and each receiving NIC
``min(1, S/D)`` (an incast is bounded by its receiver), on every plane. A data frame crosses
one switch within a rack and three between racks (leaf, spine, leaf). The busiest switch is a
leaf (what its rack's NICs send and receive on its plane) or a spine (the plane's traffic
between racks over its spines); the busiest agent is a host that sends and receives. Idle
switches and agents cost CPU too (their timers): the calibration measures it and the demand
counts it for every process of the fabric.

What a frame costs depends on how many a process handles: a switch or an agent that handles a
frame every few milliseconds wakes for each one, where a busier one serves several per wakeup.
Measured on the smallest fabric (2-core development machine, switch model), a hop cost 200 us
at 10 Mb/s, 355 at 2.5 and 473 at 1; an agent packet 272, 458 and 520. So the calibration
measures at two rates (a :class:`Point` each), and :meth:`Calibration.switch_hop_at` and
:meth:`Calibration.agent_packet_at` interpolate between them on the logarithm of a process's
frame rate, which fits the middle rate within 3 % (switch) and 8 % (agent, under). A fabric's
demand then uses its own processes' frame rates: the average switch and agent for the fabric,
the busiest for the busiest.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from experiments.fidelity import THRESHOLDS
from topologies import Fabric, Topology

WITHIN_RACK_HOPS = 1  # host, leaf, host
BETWEEN_RACK_HOPS = 3  # host, leaf, spine, leaf, host
MIN_RATE_MBPS = 0.4  # below this a base RTT is over two seconds (eight planes: 2.1 s at 0.47)
MAX_RATE_MBPS = 1000.0  # what the veths and tc shapers are trusted with


class RateError(ValueError):
    """No rate keeps this fabric faithful on this machine (even its idle processes are too
    much), or a calibration that cannot be used."""


class UnfaithfulRate(RuntimeError):
    """A scenario's fixed rate needs more CPU than the budget (``--strict`` refuses it)."""


@dataclass(frozen=True)
class Budget:
    """The CPU a fabric may use and stay faithful (a testbed choice; ``docs/experiments.md``).

    Below the fidelity thresholds (:data:`experiments.fidelity.THRESHOLDS`) with room for what
    the calibration's averages do not show: bursts of spraying and recovery, the runner's
    sampling, the controller's watch, and the rest of the machine."""

    #: the machine's cores the switches and agents may use together
    machine_share: float = 0.6
    #: of one core, for any one switch or agent at the line rate
    process_share: float = 0.6

    def __post_init__(self) -> None:
        if not 0 < self.machine_share < THRESHOLDS.machine_cpu:
            raise RateError(
                f"budget machine_share {self.machine_share}: expected a share above 0 and "
                f"below the fidelity threshold machine_cpu ({THRESHOLDS.machine_cpu})"
            )
        if not 0 < self.process_share < THRESHOLDS.thread_cpu:
            raise RateError(
                f"budget process_share {self.process_share}: expected a share above 0 and "
                f"below the fidelity threshold thread_cpu ({THRESHOLDS.thread_cpu})"
            )


BUDGET = Budget()


@dataclass(frozen=True)
class Measurement:
    """How a :class:`Calibration` was measured: the link rate (Mb/s), the data frames
    delivered, the seconds of traffic, the one-minute load average and the unix time."""

    rate_mbps: float
    packets: int
    seconds: float
    load: float
    at: float


#: how far below the slow point's frame rate its cost is extrapolated (a frame rate this many
#: times lower costs what it costs there): the log's growth is not measured beyond
EXTRAPOLATE_BELOW = 4.0


@dataclass(frozen=True)
class Point:
    """What a switch hop and an agent packet cost where each switch and agent handles
    ``frames_per_s`` data frames a second (both directions)."""

    frames_per_s: float
    switch_hop_s: float
    agent_packet_s: float


def _cost(fast: float, fast_f: float, slow: float, slow_f: float, f: float) -> float:
    """The cost at frame rate ``f`` on the line through (ln fast_f, fast) and (ln slow_f,
    slow): the fast cost above ``fast_f``, extrapolated at most :data:`EXTRAPOLATE_BELOW`
    times below ``slow_f``."""
    if f >= fast_f or slow_f >= fast_f:
        return fast
    f = max(f, slow_f / EXTRAPOLATE_BELOW)
    return max(fast, fast + (slow - fast) * math.log(fast_f / f) / math.log(fast_f / slow_f))


@dataclass(frozen=True)
class Calibration:
    """What one switch target and the agent cost on one machine, in CPU-seconds (user +
    system, so the figures do not depend on how busy the rest of the machine is)."""

    target: str
    #: CPU-seconds per switch hop of a data frame (its ACK's hop included)
    switch_hop_s: float
    #: CPU-seconds per data frame at each end, sender or receiver (its ACK included)
    agent_packet_s: float
    #: cores one switch process uses with no traffic
    switch_idle_cores: float
    #: cores one agent uses with no traffic
    agent_idle_cores: float
    #: None: given, not measured (a test's figures)
    measured: Measurement | None = None
    #: data frames a second each process handled where ``switch_hop_s`` and
    #: ``agent_packet_s`` were measured (0: unknown, the costs are taken at every rate)
    frames_per_s: float = 0.0
    #: the same measured at a lower rate (None: the costs are taken at every rate)
    slow: Point | None = None

    def switch_hop_at(self, frames_per_s: float) -> float:
        """CPU-seconds per switch hop where a switch handles ``frames_per_s`` frames a
        second (see the module's docstring)."""
        if self.slow is None or self.frames_per_s <= 0:
            return self.switch_hop_s
        return _cost(self.switch_hop_s, self.frames_per_s, self.slow.switch_hop_s,
                     self.slow.frames_per_s, frames_per_s)  # fmt: skip

    def agent_packet_at(self, frames_per_s: float) -> float:
        """CPU-seconds per agent packet where an agent handles ``frames_per_s`` frames a
        second."""
        if self.slow is None or self.frames_per_s <= 0:
            return self.agent_packet_s
        return _cost(self.agent_packet_s, self.frames_per_s, self.slow.agent_packet_s,
                     self.slow.frames_per_s, frames_per_s)  # fmt: skip

    def as_json(self) -> dict[str, Any]:
        """The cache entry."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Calibration:
        """A cache entry back (:class:`RateError` when it is not one)."""
        fields = dict(data)
        measured = fields.pop("measured", None)
        slow = fields.pop("slow", None)
        try:
            how = Measurement(**measured) if measured is not None else None
            point = Point(**slow) if slow is not None else None
            calibration = cls(**fields, measured=how, slow=point)
            costs: tuple[float, ...] = (calibration.switch_hop_s, calibration.agent_packet_s)
            if point is not None:
                costs += (point.switch_hop_s, point.agent_packet_s, point.frames_per_s)
            idle = (calibration.switch_idle_cores, calibration.agent_idle_cores)
            usable = min(costs) > 0 and min(idle) >= 0
        except TypeError as exc:
            raise RateError(f"calibration {dict(data)}: expected its fields ({exc})") from None
        if not usable:
            raise RateError(f"calibration {dict(data)}: expected positive CPU figures")
        return calibration


@dataclass(frozen=True)
class Load:
    """What a fabric and its workload ask of the machine, per data frame a second that one NIC
    sends at line rate (multiply by the frame rate of a link)."""

    switches: int
    agents: int
    #: data frames a second in the whole fabric, all planes
    frames: float
    #: switch hops a data frame makes, on average over the flows
    hops: float
    #: data frames a second through the busiest switch
    busiest_switch: float
    #: data frames a second the busiest agent sends and receives
    busiest_agent: float


def fabric_load(topology: Topology, flows: Sequence[tuple[str, str]]) -> Load:
    """The demand of ``flows`` (source, destination host names) on ``topology`` (see the
    module's docstring); with no flows, every host sends to and receives from another."""
    rack_of = {h.name: h.rack for h in Fabric(topology).hosts}
    if not flows:
        names = list(rack_of)
        flows = [(a, names[(i + 1) % len(names)]) for i, a in enumerate(names)]
    senders = {s for s, _ in flows}
    receivers = {d for _, d in flows}
    send = min(1.0, len(receivers) / len(senders))  # of the line rate, per sending NIC
    receive = min(1.0, len(senders) / len(receivers))
    hops = [WITHIN_RACK_HOPS if rack_of[s] == rack_of[d] else BETWEEN_RACK_HOPS for s, d in flows]
    between = sum(h == BETWEEN_RACK_HOPS for h in hops) / len(hops)
    leaves = [
        sum(send for h in senders if rack_of[h] == r)
        + sum(receive for h in receivers if rack_of[h] == r)
        for r in range(topology.racks)
    ]
    spine = len(senders) * send * between / topology.spines_per_plane
    agent = max(
        (send if h in senders else 0.0) + (receive if h in receivers else 0.0)
        for h in senders | receivers
    )
    planes = topology.planes
    return Load(
        switches=planes * topology.racks + planes * topology.spines_per_plane,
        agents=topology.hosts,
        frames=len(senders) * send * planes,
        hops=sum(hops) / len(hops),
        busiest_switch=max(*leaves, spine),
        busiest_agent=agent * planes,
    )


def frame_rate(topology: Topology, rate_mbps: float) -> float:
    """Full-size data frames a second one link carries at ``rate_mbps``."""
    return rate_mbps * 1e6 / ((topology.link_mtu + 14) * 8)


@dataclass(frozen=True)
class Need:
    """What a fabric needs at one rate against the budget (cores)."""

    rate_mbps: float
    cores: int
    fabric_cores: float  # every switch and agent together
    budget_cores: float  # the budget's share of the machine's cores
    switch_cores: float  # the busiest switch
    agent_cores: float  # the busiest agent
    process_budget: float  # the budget's share of one core

    @property
    def usage(self) -> float:
        """The largest share of its budget a figure takes (above 1: not faithful here)."""
        return max(
            self.fabric_cores / self.budget_cores,
            self.switch_cores / self.process_budget,
            self.agent_cores / self.process_budget,
        )

    @property
    def headroom(self) -> float:
        """The share of the tightest budget left unused."""
        return 1.0 - self.usage

    @property
    def faithful(self) -> bool:
        """Within the budget on every count."""
        return self.usage <= 1.0

    def text(self) -> str:
        """One line: what the fabric needs beside the budget, and the headroom."""
        return (
            f"at line rate its switches and agents need {self.fabric_cores:.2f} cores of the "
            f"{self.budget_cores:.2f} budgeted ({self.budget_cores / self.cores * 100:.0f} % of "
            f"{self.cores}), the busiest switch {self.switch_cores:.2f} and agent "
            f"{self.agent_cores:.2f} of the {self.process_budget:.2f} of a core budgeted to each; "
            + (
                f"headroom {self.headroom * 100:.0f} % of the budget"
                if self.faithful
                else f"{-self.headroom * 100:.0f} % over the budget"
            )
        )


def assess(
    calibration: Calibration, load: Load, rate_mbps: float, topology: Topology, cores: int,
    budget: Budget = BUDGET,
) -> Need:  # fmt: skip
    """What ``load`` needs at ``rate_mbps`` with the calibrated costs, on ``cores`` cores:
    each cost taken at the frame rate of the process it stands for (the fabric's average
    switch and agent, its busiest switch and agent)."""
    f = frame_rate(topology, rate_mbps)
    c = calibration
    switch_frames = f * load.frames * load.hops  # frame hops a second, every switch together
    agent_frames = f * load.frames * 2  # frames a second, every agent together
    fabric = (
        load.switches * c.switch_idle_cores
        + load.agents * c.agent_idle_cores
        + switch_frames * c.switch_hop_at(switch_frames / load.switches)
        + agent_frames * c.agent_packet_at(agent_frames / load.agents)
    )
    busiest_switch = f * load.busiest_switch
    busiest_agent = f * load.busiest_agent
    return Need(
        rate_mbps=rate_mbps,
        cores=cores,
        fabric_cores=fabric,
        budget_cores=budget.machine_share * cores,
        switch_cores=c.switch_idle_cores + busiest_switch * c.switch_hop_at(busiest_switch),
        agent_cores=c.agent_idle_cores + busiest_agent * c.agent_packet_at(busiest_agent),
        process_budget=budget.process_share,
    )


def round_down(rate_mbps: float) -> float:
    """A rate floored to two significant figures (4.37 -> 4.3, 12.7 -> 12): runs on one
    machine land on the same rate whatever the calibration's noise in the third figure."""
    scale = 10 ** (math.floor(math.log10(rate_mbps)) - 1)
    return round(math.floor(rate_mbps / scale + 1e-9) * scale, 6)


def choose_rate(
    calibration: Calibration, load: Load, topology: Topology, cores: int,
    budget: Budget = BUDGET,
) -> Need:  # fmt: skip
    """The highest rate (two significant figures, within :data:`MIN_RATE_MBPS` and
    :data:`MAX_RATE_MBPS`) at which ``load`` stays within ``budget``, and what it needs there.
    :class:`RateError` when even :data:`MIN_RATE_MBPS` is over the budget. What a fabric
    needs grows with the rate (more frames, each no dearer), so the highest is found by
    bisection."""

    def need(rate: float) -> Need:
        return assess(calibration, load, rate, topology, cores, budget)

    lowest = need(MIN_RATE_MBPS)
    if not lowest.faithful:
        idle = need(0.0)
        name, cap, at0, at = max(
            ("the fabric", idle.budget_cores, idle.fabric_cores, lowest.fabric_cores),
            ("its busiest switch", budget.process_share, idle.switch_cores, lowest.switch_cores),
            ("its busiest agent", budget.process_share, idle.agent_cores, lowest.agent_cores),
            key=lambda limit: limit[3] / limit[1],
        )
        raise RateError(
            f"no link rate of at least {MIN_RATE_MBPS:g} Mb/s keeps {topology.name} faithful "
            f"on {calibration.target} here: {name} needs {at0:.2f} cores idle and {at:.2f} at "
            f"{MIN_RATE_MBPS:g} Mb/s, of a budget of {cap:.2f}"
        )
    highest = need(MAX_RATE_MBPS)
    if highest.faithful:
        return highest
    low, high = MIN_RATE_MBPS, MAX_RATE_MBPS
    while high - low > 1e-4 * low:
        middle = math.sqrt(low * high)
        low, high = (middle, high) if need(middle).faithful else (low, middle)
    return need(max(MIN_RATE_MBPS, round_down(low)))


__all__ = [
    "BUDGET",
    "Budget",
    "Calibration",
    "Load",
    "Measurement",
    "Need",
    "Point",
    "RateError",
    "UnfaithfulRate",
    "assess",
    "choose_rate",
    "fabric_load",
    "frame_rate",
    "round_down",
]
