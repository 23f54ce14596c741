"""``link_rate_mbps: auto`` on a real calibration: the smallest fabric boots on the switch
model, its switches and agents are measured under traffic, the figures are cached, and the
shipped demo resolves to a rate within the budget (tests/unit/test_auto_rate.py checks the
choice from given figures)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.calibrate import cache_key, cached_calibration, resolve_rate
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
    entries = json.loads((tmp_path / "calibration.json").read_text())
    assert list(entries) == [cache_key("model")]
    assert cached_calibration("model", said.append, folder=tmp_path) == calibration
    assert len(said) == 1  # the second came from the cache

    demo = load_scenario(shipped_scenario("demo"))
    lines: list[str] = []
    resolved = resolve_rate(demo, "model", lines.append, calibration=calibration)
    rate = resolved.topology.link_rate_mbps
    assert MIN_RATE_MBPS <= rate <= MAX_RATE_MBPS
    assert not resolved.auto_rate
    (line,) = lines
    assert line.startswith(f"link rate auto: {rate:g} Mb/s on model") and "headroom" in line
