"""Metrics, results folder and plots from synthetic records (no fabric needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.metrics import (
    DETECTION_RTTS,
    Completion,
    FaultMark,
    Progress,
    TransportResult,
    capacity_bps,
    detection,
    failed_links,
    goodput_series,
    percentile,
    recovery,
)
from experiments.results import ResultsError, render, write_raw
from topologies import Fabric, load_topology
from topologies.config import shipped_topology


@pytest.fixture(scope="module")
def fabric() -> Fabric:
    return Fabric(
        load_topology(shipped_topology("small")).with_(link={"rate_mbps": 20, "delay_us": 0})
    )


PERMUTATION = [("h0", "h2"), ("h1", "h3"), ("h2", "h1"), ("h3", "h0")]


def test_capacity_of_a_permutation(fabric: Fabric) -> None:
    assert capacity_bps(fabric, PERMUTATION) == pytest.approx(4 * 2 * 20e6)
    down = {frozenset(("t0-p0-r0", "t1-p0-s0"))}
    # Plane 0 of rack 0 keeps one of two spine links: four sub-flows share it two by two.
    assert capacity_bps(fabric, PERMUTATION, down) == pytest.approx(6 * 20e6)


def test_base_rtt_is_four_full_frames_and_acks(fabric: Fabric) -> None:
    frame = fabric.topology.link_mtu + 14
    assert fabric.topology.base_rtt == pytest.approx(4 * (frame + 128) * 8 / 20e6)


def test_capacity_of_an_incast_is_the_receiver(fabric: Fabric) -> None:
    assert capacity_bps(fabric, [("h1", "h0"), ("h2", "h0"), ("h3", "h0")]) == pytest.approx(40e6)


def test_switch_kill_fails_its_links(fabric: Fabric) -> None:
    marks = [FaultMark(1.0, "kill", "t1-p1-s0"), FaultMark(2.0, "start", "t1-p1-s0")]
    assert len(failed_links(fabric, marks, 1.5)) == 2
    assert failed_links(fabric, marks, 2.5) == set()


def test_goodput_series_bins_deltas() -> None:
    progress = [Progress(0.5, "a", 1000), Progress(1.0, "a", 3000), Progress(1.0, "b", 500)]
    series = goodput_series(progress, 1.0, 0.5)
    # Flow b's only sample spreads its 500 bytes over both bins.
    assert series == [(0.5, pytest.approx(1250 * 8 / 0.5)), (1.0, pytest.approx(2250 * 8 / 0.5))]
    # A late sample spreads its bytes over the bins since the previous one.
    spread = goodput_series([Progress(1.0, "a", 2000)], 1.0, 0.5)
    assert spread == [(0.5, 1000 * 8 / 0.5), (1.0, 1000 * 8 / 0.5)]


def test_recovery_and_percentile() -> None:
    series = [(t / 10, 100.0 if t < 30 or t >= 36 else 10.0) for t in range(1, 60)]
    capacity = [(t, 100.0) for t, _ in series]
    took = recovery(series, capacity, 3.0, 0.1)
    assert took is not None and took == pytest.approx(0.6, abs=1e-6)
    assert recovery([(t, 0.0) for t, _ in series], capacity, 3.0, 0.1) is None
    assert percentile([3, 1, 2, 4], 0.5) == 2 and percentile([], 0.5) is None


def test_recovery_is_relative_to_the_share_used_before() -> None:
    # Half the capacity before; the fault takes the capacity from 100 to 80; 40 is enough.
    series = [(t / 10, 50.0 if t <= 30 else (0.0 if t < 35 else 40.0)) for t in range(1, 60)]
    capacity = [(t, 100.0 if t <= 3.0 else 80.0) for t, _ in series]
    took = recovery(series, capacity, 3.0, 0.1)
    assert took is not None and took == pytest.approx(0.5, abs=1e-6)


def synthetic(name: str, rate_bps: float, fault: bool) -> TransportResult:
    r = TransportResult(name=name, kind="mrc", duration=4.0, flows=PERMUTATION, base_rtt_s=0.01)
    per_flow = rate_bps / 4
    for flow_index, (s, d) in enumerate(PERMUTATION):
        flow = f"{s}->{d}"
        for k in range(1, 41):
            t = k * 0.1
            r.progress.append(Progress(t, flow, int(per_flow / 8 * t)))
        for m in range(4):
            r.completions.append(
                Completion(flow, m, 1 << 20, m * 0.9, m * 0.9 + 0.8 + 0.01 * flow_index)
            )
    if fault:
        r.faults += [
            FaultMark(1.0, "down", "t0-p0-r0 <-> t1-p0-s0"),
            FaultMark(2.0, "up", "t0-p0-r0 <-> t1-p0-s0"),
        ]
    r.ev_states = [
        {
            "t": k * 0.5,
            "GOOD": 128 - (32 if 1 <= k * 0.5 < 2 else 0),
            "ASSUMED_BAD": 32 if 1 <= k * 0.5 < 2 else 0,
        }
        for k in range(9)
    ]
    r.ev_transitions = (
        [
            {
                "t": 1.004,
                "host": "h0",
                "qpn": 256,
                "ev": 3,
                "path": "p0-s0",
                "old": "GOOD",
                "new": "ASSUMED_BAD",
                "reason": "rto",
            },
            {
                "t": 1.010,
                "host": "h2",
                "qpn": 258,
                "ev": 9,
                "path": "p0-s0",
                "old": "GOOD",
                "new": "ASSUMED_BAD",
                "reason": "rto",
            },
            {
                "t": 1.002,
                "host": "h1",
                "qpn": 257,
                "ev": 5,
                "path": "p1-s1",
                "old": "GOOD",
                "new": "ASSUMED_BAD",
                "reason": "rto",
            },
        ]
        if fault
        else []
    )
    r.switches = {
        "t0-p0-r0": {"trimmed": 12, "ecn_marked": 40, "drops": 0},
        "t1-p0-s0": {"trimmed": 0, "ecn_marked": 3, "drops": 1},
    }
    r.hosts = {"h0": {"rtos": 0, "nacks": 5}, "h1": {"rtos": 1, "nacks": 7}}
    return r


def test_results_folder_round_trip(tmp_path: Path, fabric: Fabric) -> None:
    results = [synthetic("mrc", 140e6, True), synthetic("single-path", 40e6, True)]
    write_raw(tmp_path, {"name": "synthetic"}, fabric.topology.as_dict(), 0.1, results)
    metrics = render(tmp_path)
    for name in (
        "goodput.png",
        "completion_cdf.png",
        "ev_states.png",
        "switches.png",
        "metrics.json",
        "summary.md",
        "goodput.csv",
    ):
        assert (tmp_path / name).stat().st_size > 0, name
    saved = json.loads((tmp_path / "metrics.json").read_text())["transports"]
    assert saved["mrc"]["complete"] is True
    assert saved["mrc"]["goodput_fraction"] > saved["single-path"]["goodput_fraction"]
    assert saved["mrc"]["switch_totals"]["trimmed"] == 12
    assert saved["mrc"]["rtos"] == 1 and saved["mrc"]["nacks"] == 12
    first = metrics["mrc"].recovery[0]
    assert first.fault == "down t0-p0-r0 <-> t1-p0-s0"
    # Only the EVs of paths through the failed link count (p1-s1 does not cross it).
    assert first.ev_failover_qps == 2
    assert first.ev_failover_max_s == pytest.approx(0.010)
    assert first.ev_failover_p50_rtts == pytest.approx(0.4)
    # metrics.json holds the record's fields under the same names.
    assert saved == json.loads(json.dumps({k: m.as_json() for k, m in metrics.items()}))
    summary = (tmp_path / "summary.md").read_text()
    assert "| mrc |" in summary and "| single-path |" in summary
    # Re-rendering gives the same figures.
    assert render(tmp_path, plots=False) == metrics


def test_not_a_results_folder(tmp_path: Path) -> None:
    with pytest.raises(ResultsError, match="not a results folder"):
        render(tmp_path / "absent")
    with pytest.raises(ResultsError, match="run.json"):
        render(tmp_path)


def test_failover_is_looked_for_within_base_rtts_not_seconds(fabric: Fabric) -> None:
    """At a low rate a base RTT is seconds long: a failover 1.7 base RTTs after the fault is
    found whatever the RTT, one after DETECTION_RTTS is not."""
    mark = FaultMark(30.0, "down", "t0-p0-r0 <-> t1-p0-s0")
    for rtt in (0.01, 1.45):
        bad = [
            {"t": mark.t + after * rtt, "host": host, "qpn": 256, "path": "p0-s0",
             "new": "ASSUMED_BAD"}
            for after, host in ((1.7, "h0"), (DETECTION_RTTS + 1, "h1"))
        ]  # fmt: skip
        found = detection(fabric, bad, mark, DETECTION_RTTS * rtt)
        assert found == (pytest.approx(1.7 * rtt), pytest.approx(1.7 * rtt), 1)
