"""A phase's per-host statistics (``hosts/TRANSPORT.json``): counts as differences over the
phase, states as they stand at its end (:func:`experiments.flows.mrc.phase_host_stats`)."""

from __future__ import annotations

from experiments.flows.mrc import is_state, numbers, phase_host_stats


def agent_stats(nacks: int, cwnd: float, srtt: float, good: int, rtt_count: int) -> dict:
    return {
        "time": 10.0,
        "core": {
            "nacks_received": nacks,
            "retransmits": {"rto": 0, "nack": nacks},
            "dilation": 1000.0,
            "rtt_protocol": {"count": rtt_count, "min": 4e-6, "p50": 8e-6},
            "qps": {"256": {"cwnd": cwnd, "srtt": srtt, "evs": {"good": good, "assumed_bad": 0}}},
        },
    }


def test_counts_are_differences_and_states_stand_as_they_are() -> None:
    before = numbers(agent_stats(nacks=3, cwnd=340_000.0, srtt=0.0, good=128, rtt_count=0))
    after = agent_stats(nacks=47, cwnd=65_000.0, srtt=5e-6, good=120, rtt_count=69)
    stats, _ = phase_host_stats("h1", after, before, 0.0)
    assert stats["core.nacks_received"] == 44 and stats["nacks"] == 44
    assert stats["core.retransmits.nack"] == 44
    # a window that shrank over the phase is the window, not a negative difference
    assert stats["core.qps.256.cwnd"] == 65_000.0
    assert stats["core.qps.256.srtt"] == 5e-6
    assert stats["core.qps.256.evs.good"] == 120
    assert stats["core.dilation"] == 1000.0
    assert stats["core.rtt_protocol.p50"] == 8e-6


def test_state_names() -> None:
    assert is_state("core.qps.256.cwnd") and is_state("core.rtt_protocol.min")
    assert is_state("fidelity.loop_gap.max") and is_state("core.dilation")
    assert not is_state("core.nacks_received") and not is_state("core.retransmits.rto")
    assert not is_state("planes.0.tx_frames")
