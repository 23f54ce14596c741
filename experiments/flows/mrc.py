"""MRC flows: the workload as transfers of the host agents, through their control sockets.

Every flow is one thread that keeps :func:`window` messages in flight: ``transfer`` (an RDMA
write into a region the receiver registered) and ``wait`` on the oldest. Progress is the
receivers' placed payload bytes (agent statistics); EV states are counted at the senders
(``paths``). After the run every completed message is checked at its receiver against what was
sent (``verify``), and the agents' statistics of the phase are recorded.
"""

from __future__ import annotations

import math
import threading
from typing import Any

from experiments.flows.base import Flows, PhaseView
from experiments.metrics import Completion, Progress, flow_name
from experiments.results import EV_STATES, TRANSITION_FIELDS
from topologies import Topology

WINDOW = 2  # messages in flight per flow, at least
#: base RTTs of sending a flow's queue covers beyond one message: the RTT under NSCC's queueing
#: (up to about 1.5 base RTTs), and the recovery of a message's last packet lost where a path
#: failed (found after LATE_FACTOR x its path's RTT, resent in one more: docs/host-stack.md)
QUEUE_RTTS = 4
PLACED = "core.payload_bytes_placed"  # agent statistic: payload bytes written into regions


def window(topology: Topology, message_bytes: int) -> int:
    """Messages a flow keeps in flight: :data:`WINDOW`, and enough more that the host's NICs
    stay busy while the oldest message's last ACK comes back, also when that ACK is late. A
    flow that waits on its oldest message before posting the next is bounded at
    ``n T / (T + RTT)`` of its host's rate (``T`` one message's time at every plane's rate):
    two 256 KiB messages held an eight-plane host at 0.44 of its capacity, whatever MRC did,
    and a queue that covered one base RTT ran dry whenever a message's last packet waited in
    a queue or was lost on a failing path (the incident read 0.90 of capacity in the sim
    instead of 0.92). As an application keeps its send queue full (perftest posts 128 work
    requests), the queue covers :data:`QUEUE_RTTS` base RTTs."""
    host_bps = topology.planes * topology.link_rate_mbps * 1e6
    message_time = max(1, message_bytes) * 8 / host_bps
    return max(WINDOW, 2 + math.ceil(QUEUE_RTTS * topology.base_rtt / message_time))


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


#: The parts of an agent's statistics that are states, not counts: a QP's window, RTT estimates
#: and EV states, the RTT distribution, the dilation, the clock, the fidelity summaries. A phase
#: reports them as they stand at its end (the agents restart before each phase, so a
#: distribution covers the phase); a difference from the phase's start would be meaningless (a
#: window that shrank would read negative).
STATE_PARTS = frozenset(
    {"qps", "dilation", "ports_up", "rtt_protocol", "clock", "fidelity", "paced_waiting",
     "time", "uptime"}
)  # fmt: skip


def is_state(name: str) -> bool:
    """True for a flattened statistic (``core.qps.256.cwnd``) that is a state, not a count."""
    return not STATE_PARTS.isdisjoint(name.split("."))


def phase_host_stats(
    host: str, raw: Any, before: dict[str, float], t0: float
) -> tuple[dict[str, float], list[dict[str, object]]]:
    """One host's statistics over a phase from its agent's ``stats`` (``raw``, the core's under
    ``core``): every count as a delta from ``before`` and every state (:func:`is_state`) as it
    stands, with ``rtos``, ``nacks``,
    ``trims_seen`` and the RTT (``rtt_min_s``, ``rtt_p50_s``); and its EV transitions, their
    times ``t`` from ``t0``."""
    core = raw.get("core", {}) if isinstance(raw, dict) else {}
    core = core if isinstance(core, dict) else {}
    transitions: list[dict[str, object]] = [
        {
            "t": round(float(tr["time"]) - t0, 6),
            "host": host,
            **{k: tr.get(k, "") for k in TRANSITION_FIELDS if k not in ("t", "host")},
        }
        for tr in core.get("ev_transitions", [])
        if isinstance(tr, dict) and "time" in tr
    ]
    stats = {k: v if is_state(k) else v - before.get(k, 0.0) for k, v in numbers(raw).items()}
    stats["rtos"] = stats.get("core.rtos", 0.0)
    stats["nacks"] = stats.get("core.nacks_received", 0.0)
    stats["trims_seen"] = stats.get("core.trims_seen", 0.0)
    rtt = core.get("rtt", {})
    if isinstance(rtt, dict) and rtt.get("count") and rtt.get("min"):
        stats["rtt_min_s"] = float(rtt["min"])
        stats["rtt_p50_s"] = float(rtt.get("p50", 0.0))
    return stats, transitions


class MrcFlows(Flows):
    """The workload's flows as MRC transfers through the agents' control sockets."""

    def __init__(self, phase: PhaseView) -> None:
        super().__init__(phase)
        self.regions: dict[int, dict[str, Any]] = {}
        self.done: set[int] = set()
        self.receivers = sorted({d for _, _, d in self.flows})
        self.senders = sorted({s for _, s, _ in self.flows})
        self.peers: dict[str, list[str]] = {}
        for _, src, dst in self.flows:
            if dst not in self.peers.setdefault(src, []):
                self.peers[src].append(dst)
        self.stats_before: dict[str, dict[str, float]] = {}
        #: the sampler's connections, kept from one sample to the next (an agent pays for a
        #: connection's accept and teardown as much as for a brief request)
        self._sampling: dict[str, Any] = {}

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
        sizes = workload.message_sizes()
        count = len(sizes)
        in_flight = window(phase.scenario.topology, workload.message_bytes)
        posted: list[tuple[int, int, float, int]] = []  # message, transfer id, start, size
        nxt = 0
        try:
            with self.client(src) as c:
                while (nxt < count or posted) and not phase.stop.is_set():
                    while nxt < count and len(posted) < in_flight:
                        offset, size = nxt * workload.message_bytes, sizes[nxt]
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
                phase.result.completions.append(
                    Completion(name, message, sizes[message], phase.now(), None)
                )
        if not posted and nxt >= count:
            self.done.add(i)

    def _sampler(self, host: str) -> Any:
        client = self._sampling.get(host)
        if client is None:
            client = self._sampling[host] = self.client(host, timeout=2.0)
        return client

    def _sampler_failed(self, host: str) -> None:
        client = self._sampling.pop(host, None)
        if client is not None:
            client.close()

    def sample(self) -> None:
        """Delivered bytes at every receiver (the core's counters alone) and EV states at
        every sender, each agent asked over one connection kept between samples."""
        phase = self.phase
        for host in self.receivers:
            asked = phase.now()
            try:
                stats = numbers(self._sampler(host).stats(counters=True).get("stats", {}))
            except Exception:
                self._sampler_failed(host)
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
                c = self._sampler(src)
                for dst in peers:
                    reply = c.request("paths", peer=dst, policy=policy)
                    table = reply["paths"][dst]["paths"]
                    for entry in table.values():
                        for state, n in entry.get("states", {}).items():
                            if state.upper() in counts:
                                counts[state.upper()] += int(n)
            except Exception:
                self._sampler_failed(src)
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
            stats, transitions = phase_host_stats(
                host.name, raw, self.stats_before.get(host.name, {}), self.phase.t0
            )
            self.phase.result.ev_transitions += transitions
            if "rtt_min_s" in stats:
                rtts.append(stats["rtt_min_s"])
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
        """Close the sampler's connections (the next phase restarts the agents)."""
        for host in list(self._sampling):
            self._sampler_failed(host)
