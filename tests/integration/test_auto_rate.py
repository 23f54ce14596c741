"""``link_rate_mbps: auto`` on a real calibration: the smallest fabric boots on the switch
model, its switches and agents are measured under traffic at two rates, the figures are
cached, and the shipped demo resolves to a rate within the budget
(tests/unit/test_auto_rate.py checks the choice from given figures)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.calibrate import (
    CALIBRATION_RATE_MBPS,
    CALIBRATION_SLOW_RATE_MBPS,
    cache_key,
    cached_calibration,
    resolve_rate,
)
from experiments.rate import MAX_RATE_MBPS, MIN_RATE_MBPS
from experiments.scenario import load_scenario, shipped_scenario

pytestmark = [pytest.mark.mininet, pytest.mark.slow]


def test_auto_resolves_to_a_rate_on_a_real_calibration(fabric_free: None, tmp_path: Path) -> None:
    said: list[str] = []
    calibration = cached_calibration("model", said.append, folder=tmp_path)
    assert said and said[0].startswith("calibrating model")
    # every figure measured: CPU per hop and per packet, from thousands of frames
    assert calibration.switch_hop_s > 0 and calibration.agent_packet_s > 0
    assert calibration.measured is not None
    assert calibration.measured.packets > 1000 and calibration.measured.seconds > 0
    # and again at the slow rate, where each process handles fewer frames
    slow = calibration.slow
    assert slow is not None and 0 < slow.frames_per_s < calibration.frames_per_s
    assert slow.switch_hop_s > 0 and slow.agent_packet_s > 0
    assert [line.split(":")[0].strip() for line in said[1:]] == [
        f"at {CALIBRATION_RATE_MBPS:g} Mb/s",
        f"at {CALIBRATION_SLOW_RATE_MBPS:g} Mb/s",
    ]
    entries = json.loads((tmp_path / "calibration.json").read_text())
    assert list(entries) == [cache_key("model")]
    told = len(said)
    assert cached_calibration("model", said.append, folder=tmp_path) == calibration
    assert len(said) == told  # the second came from the cache, measuring nothing

    demo = load_scenario(shipped_scenario("demo"))
    lines: list[str] = []
    resolved = resolve_rate(demo, "model", lines.append, calibration=calibration)
    rate = resolved.topology.link_rate_mbps
    assert MIN_RATE_MBPS <= rate <= MAX_RATE_MBPS
    assert not resolved.auto_rate
    (line,) = lines
    assert line.startswith(f"link rate auto: {rate:g} Mb/s on model") and "headroom" in line
