"""Counters of one context and the statistics dict ``Context.stats()`` returns."""

from __future__ import annotations

import collections
from typing import Any

RTT_SAMPLES = 4096
EV_TRANSITIONS = 16384  # the newest EV state changes kept (all are counted)


class RecentLog(collections.deque[dict[str, Any]]):
    """The newest ``maxlen`` entries of a log, and how many were ever appended (``total``):
    a long run's memory stays bounded, and a reader sees what was left out."""

    def __init__(self, maxlen: int) -> None:
        super().__init__(maxlen=maxlen)
        self.total = 0

    def append(self, entry: dict[str, Any]) -> None:
        self.total += 1
        super().append(entry)


class Stats:
    """Plain counters, incremented in place by the core (cheap on the hot path)."""

    def __init__(self) -> None:
        self.packets_sent = 0
        self.bytes_sent = 0
        self.packets_received = 0
        self.bytes_received = 0
        self.data_packets_sent = 0
        self.new_data_packets_sent = 0  # of those, first transmissions (a PSN given out)
        self.data_packets_received = 0
        self.payload_bytes_placed = 0
        self.acks_sent = 0
        self.acks_received = 0
        self.stale_acks = 0  # ACKs overtaken by later ones (their SACK bitmaps still count)
        self.nacks_sent = 0
        self.nacks_received = 0
        self.trims_seen = 0
        self.last_hop_trims_seen = 0  # NACKs of packets trimmed by the receiver's own leaf
        self.last_hop_losses = 0  # losses not held against their path: the leaf was trimming
        self.ecn_marked_seen = 0
        self.rtos = 0
        self.tail_loss_probes = 0  # packets re-sent by tail-loss probes
        self.messages_sent = 0
        self.messages_completed = 0
        self.messages_received = 0
        self.probes_sent = 0
        self.probe_replies_sent = 0
        self.probe_replies_received = 0
        self.probes_timed_out = 0
        self.retire_suppressed = 0  # retirements refused by ev_min_active
        self.ep_requests_sent = 0  # endpoint requests: EV probes, port status updates
        self.ep_requests_answered = 0
        self.ep_responses_received = 0
        self.port_retransmits = 0  # in flight on a plane whose port (or the peer's) went down
        self.retransmits: dict[str, int] = {"nack": 0, "sack": 0, "rto": 0}
        self.drops: collections.Counter[str] = collections.Counter()
        self.ev_transitions = RecentLog(EV_TRANSITIONS)
        self.rtt: collections.deque[float] = collections.deque(maxlen=RTT_SAMPLES)

    def rtt_summary(self) -> dict[str, float]:
        """count, min, mean, max, p50, p99 of the recent RTT samples (seconds)."""
        samples = sorted(self.rtt)
        if not samples:
            return {"count": 0}
        n = len(samples)
        return {
            "count": n,
            "min": samples[0],
            "mean": sum(samples) / n,
            "max": samples[-1],
            "p50": samples[n // 2],
            "p99": samples[min(n - 1, (n * 99) // 100)],
        }

    def as_dict(self) -> dict[str, Any]:
        """Everything, JSON-ready."""
        out: dict[str, Any] = {
            k: v for k, v in vars(self).items() if isinstance(v, int) and not isinstance(v, bool)
        }
        out["retransmits"] = dict(self.retransmits)
        out["drops"] = dict(self.drops)
        out["ev_transitions"] = list(self.ev_transitions)
        out["ev_transitions_total"] = self.ev_transitions.total
        out["rtt"] = self.rtt_summary()
        return out
