"""The switches' operating point: queues and thresholds from the fabric's BDP, in real units,
the per-link latency dilated for the emulation, and the testbed-2026 profile beside it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.fabric import small_fabric

from controller.qos import default_qos, operating_point
from experiments.scenario import parse_scenario
from targets.factory import port_latencies
from topologies import load_topology
from topologies.config import shipped_topology
from topologies.operating import (
    HEADER_QUEUE_BYTES_FACTOR,
    LEGACY_PROFILE,
    UET_PROFILE,
    BdpQueue,
    bdp_packets,
    bdp_queue,
    header_queue_depth,
    unloaded_rtt,
)

SCENARIOS = Path(__file__).resolve().parents[2] / "experiments" / "scenarios"


def test_reference_arithmetic() -> None:
    # 4 links of 1 us each way, a 4,286-byte frame and a 64-byte ACK on each at 100 Gb/s:
    # 2 x 4 us + 4 x 4,350 x 8 / 100e9 s = 8 us + 1.392 us
    rtt = unloaded_rtt(links=4, hop_latency=1e-6, switch_latency=0.0, switches=3,
                       rate_bps=100e9, frame_bytes=4286)  # fmt: skip
    assert rtt == pytest.approx(9.392e-6)
    # 9.392 us x 100 Gb/s / 8 = 117,400 B = 27.39 frames of 4,286 B -> 28
    assert bdp_packets(rtt, 100e9, 4286) == 28
    # RED from ceil(0.2 x 28) = ceil(5.6) = 6 to ceil(0.8 x 28) = ceil(22.4) = 23
    assert bdp_queue(28) == BdpQueue(packets=28, ecn_low=6, ecn_high=23)
    # a queue shorter than the BDP caps both thresholds
    assert bdp_queue(28, packets=4) == BdpQueue(packets=4, ecn_low=4, ecn_high=4)
    # an exact BDP: 10 -> 2 and 8
    assert bdp_queue(10) == BdpQueue(packets=10, ecn_low=2, ecn_high=8)


@pytest.mark.parametrize("name", ["small", "default"])
def test_shipped_fabrics_run_at_uets_operating_point(name: str) -> None:
    topo = load_topology(shipped_topology(name))
    assert topo.profile == UET_PROFILE
    # 1 us per link in the real fabric at 100 Gb/s; the emulation runs 1,000 times slower
    # (100 Mb/s), so every link delays by 1 ms
    assert topo.hop_latency_us == 1.0
    assert topo.dilation == 1000.0
    assert topo.link_delay_us == pytest.approx(1000.0)
    # the frame: MTU 4,096 + 190 bytes of headers (SRH of 4 segments) = 4,286 B, as above
    assert topo.link_mtu + 14 == 4286
    assert topo.real_base_rtt == pytest.approx(9.392e-6)
    # a 1-BDP data queue trimming when full, in priority queues of four times that (room for
    # the trimmed headers, ACKs and NACKs of the high-priority queue)
    assert (topo.bdp_packets, topo.bdp_queue.packets, topo.queue_depth) == (28, 28, 112)
    qos = default_qos(topo)
    assert (qos.trim_mode, qos.trim, qos.ecn_mode, qos.ecn, qos.ecn_max) == (
        "threshold", 28, "red", 6, 23,
    )  # fmt: skip
    # in packets, the BDP does not depend on the dilation: at 10 Mb/s the delay is 10 ms
    slower = topo.with_(link={"rate_mbps": 10})
    assert slower.link_delay_us == pytest.approx(10_000.0)
    assert (slower.bdp_packets, slower.queue_depth) == (28, 112)


def test_legacy_profile_keeps_the_earlier_settings() -> None:
    topo = load_topology(shipped_topology("small")).with_(profile=LEGACY_PROFILE)
    assert (topo.queue_depth, topo.link_delay_us) == (64, 50.0)
    qos = default_qos(topo)
    assert (qos.trim_mode, qos.trim, qos.ecn_mode, qos.ecn) == ("threshold", 32, "threshold", 16)
    # 50 us emulated at dilation 1,000 is 50 ns per link: a BDP of 6 packets
    assert topo.hop_latency_us == pytest.approx(0.05)
    assert topo.bdp_packets == 6
    point = operating_point(topo)
    assert point["profile"] == LEGACY_PROFILE and point["qos"] == {"trim": 32, "ecn": 16}
    # what a file gives wins over either profile
    given = topo.with_(link={"delay_us": 0}, switch={"queue_depth": 16})
    assert (given.link_delay_us, given.queue_depth) == (0.0, 16)
    assert given.with_(profile=UET_PROFILE).queue_depth == 16


def test_scenario_selects_the_profile() -> None:
    base = {
        "name": "p",
        "topology": "small",
        "duration_s": 2,
        "workloads": [{"kind": "permutation", "message_bytes": 1024, "total_bytes": 4096}],
    }
    assert parse_scenario(base, base=SCENARIOS).topology.profile == UET_PROFILE
    legacy = parse_scenario({**base, "stack_profile": LEGACY_PROFILE}, base=SCENARIOS)
    assert (legacy.stack_profile, legacy.topology.profile) == (LEGACY_PROFILE, LEGACY_PROFILE)
    assert legacy.topology.queue_depth == 64
    mixed = parse_scenario({**base, "fabric_profile": LEGACY_PROFILE}, base=SCENARIOS)
    assert (mixed.stack_profile, mixed.topology.profile) == (UET_PROFILE, LEGACY_PROFILE)
    # the real latency follows a changed rate (dilated), an emulated delay stays as given
    slow = parse_scenario({**base, "link_rate_mbps": 10, "link_latency_us": 2}, base=SCENARIOS)
    assert slow.topology.link_delay_us == pytest.approx(20_000.0)
    fixed = parse_scenario({**base, "link_rate_mbps": 10, "link_delay_us": 0}, base=SCENARIOS)
    assert fixed.topology.link_delay_us == 0.0


def test_switch_delay_lines_give_every_path_its_links_latency() -> None:
    fabric = small_fabric()
    delay = fabric.topology.link_delay_us
    leaf = port_latencies(fabric, "t0-p0-r0", delay)
    spine = port_latencies(fabric, "t1-p0-s0", delay)
    hosts = {p.number for p in fabric.switch("t0-p0-r0").ports if p.peer_port == 0}
    assert hosts and all(leaf[n] == 2 * delay for n in hosts)
    assert all(leaf[n] == delay for n in leaf if n not in hosts)
    assert set(spine.values()) == {delay}
    # host -> leaf -> spine -> leaf -> host: the first leaf's uplink, the spine, the last
    # leaf's host port (two links' worth) = four links, as netem on every link end gives
    assert delay + delay + 2 * delay == 4 * delay


def test_a_run_records_its_operating_point(tmp_path: Path) -> None:
    from test_scenario_results import synthetic

    from experiments.results import render, write_raw

    topo = load_topology(shipped_topology("small"))
    point = {**operating_point(topo), "latency_by": "switch"}
    write_raw(tmp_path, {"name": "p"}, topo.as_dict(), 0.1, [synthetic("mrc", 140e6, False)],
              operating_point=point)  # fmt: skip
    render(tmp_path, plots=False)
    assert json.loads((tmp_path / "run.json").read_text())["operating_point"] == point
    assert json.loads((tmp_path / "metrics.json").read_text())["operating_point"] == point
    summary = (tmp_path / "summary.md").read_text()
    assert "operating point uet: BDP 28 packets, queues of 112, trim 28, ECN RED 6..23" in summary
    assert "1 us per link (1000 us emulated), applied by switch" in summary


def test_header_queue_holds_the_reference_s_bytes_in_control_size_packets() -> None:
    """The high-priority queue of a port counted in packets holds as many control-size
    packets as fit in twice the data queue's bytes (the reference's composite queue)."""
    depth, frame, header = 8, 4286, 128
    held = header_queue_depth(depth, frame, header)
    assert (held - 1) * header < HEADER_QUEUE_BYTES_FACTOR * depth * frame <= held * header
    assert held == 536
    assert header_queue_depth(8, 50, 128) == 8  # never fewer than the data queue's packets
    with pytest.raises(ValueError, match="expected positive"):
        header_queue_depth(0, frame, header)
