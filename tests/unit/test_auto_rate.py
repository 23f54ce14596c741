"""``link_rate_mbps: auto``: the scenario field, the rate chosen from given calibration figures
(pure functions of experiments.rate), the calibration cache, and the run's resolution of a
scenario's rate (experiments.calibrate). tests/integration/test_auto_rate.py calibrates for
real."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from experiments import calibrate as calibrate_module
from experiments.calibrate import cache_key, cached_calibration, resolve_rate, scenario_need
from experiments.faults import LinkFlap
from experiments.fidelity import THRESHOLDS
from experiments.rate import (
    BUDGET,
    EXTRAPOLATE_BELOW,
    MIN_RATE_MBPS,
    Budget,
    Calibration,
    Load,
    Measurement,
    Need,
    Point,
    RateError,
    UnfaithfulRate,
    assess,
    choose_rate,
    fabric_load,
    frame_rate,
    round_down,
)
from experiments.runner import UNFAITHFUL_EXIT, run_file
from experiments.scenario import (
    ScenarioError,
    load_scenario,
    parse_scenario,
    scale_times,
    shipped_scenario,
)
from topologies import Topology, load_topology
from topologies.config import shipped_topology

#: every shipped scenario
SHIPPED = ["baselines", "demo", "demo-mrc8", "flaps", "incast", "incident", "plane", "spraying", "training",
           "training-incident"]  # fmt: skip

#: figures of the order measured in a running fabric (benchmarks/fabric.py)
CAL = Calibration("model", switch_hop_s=150e-6, agent_packet_s=200e-6,
                  switch_idle_cores=0.01, agent_idle_cores=0.01)  # fmt: skip


def base(**changes: Any) -> dict[str, Any]:
    workload = {"kind": "permutation", "message_bytes": "64KiB", "total_bytes": "1MiB"}
    return {"name": "t", "topology": "small", "duration_s": 10, "transports": ["mrc"],
            "workloads": [workload], **changes}  # fmt: skip


# -- the scenario field --------------------------------------------------------------------------


def test_auto_stands_at_the_reference_rate_until_resolved() -> None:
    scenario = parse_scenario(base(link_rate_mbps="auto", reference_rate_mbps=10))
    assert scenario.auto_rate
    assert scenario.topology.link_rate_mbps == 10.0
    plain = parse_scenario(base(link_rate_mbps="auto"))
    assert plain.auto_rate and plain.topology.link_rate_mbps == 100.0  # small.yaml's rate
    assert not parse_scenario(base(link_rate_mbps=20)).auto_rate


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"link_rate_mbps": "fast"}, "link_rate_mbps"),
        ({"link_rate_mbps": "Auto"}, "link_rate_mbps"),
        ({"link_rate_mbps": 0}, "link_rate_mbps"),
        ({"link_rate_mbps": "auto", "reference_rate_mbps": -1}, "reference_rate_mbps"),
        ({"link_rate_mbps": "auto", "reference_rate_mbps": "10"}, "reference_rate_mbps"),
        ({"link_rate_mbps": 10, "reference_rate_mbps": 10}, "reference_rate_mbps"),
    ],
)
def test_bad_rates_name_the_field(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(base(**changes))
    assert info.value.field == field
    assert field in str(info.value)


def test_at_rate_scales_every_time_to_the_same_experiment() -> None:
    data = base(
        link_rate_mbps="auto", reference_rate_mbps=10, duration_s=12, sample_interval_s=0.1,
        workloads=[{"kind": "permutation", "total_bytes": "1MiB", "start_s": 0.5}],
        faults=[
            {"kind": "link_down", "at_s": 2.0, "link": ["t0-p0-r0", "t1-p0-s0"]},
            {"kind": "link_flap", "at_s": 3.0, "until_s": 9.0, "rate_per_min": 6,
             "down_s": 1.0, "link": ["t0-p1-r0", "t1-p1-s0"]},
        ],
    )  # fmt: skip
    slow = parse_scenario(data).at_rate(5)
    assert not slow.auto_rate
    assert slow.topology.link_rate_mbps == 5.0
    assert slow.duration_s == 24.0 and slow.sample_interval_s == pytest.approx(0.2)
    assert slow.workloads[0].start_s == 1.0
    down, flap = slow.faults
    assert down.at_s == 4.0
    assert isinstance(flap, LinkFlap)
    assert (flap.at_s, flap.until_s, flap.down_s, flap.rate_per_min) == (6.0, 18.0, 2.0, 3.0)
    # the same bytes over the same base RTTs: the real fabric's times are unchanged
    ratio = slow.topology.base_rtt / parse_scenario(data).topology.base_rtt
    assert ratio == pytest.approx(2.0)
    # faster: the sampling interval stays at least 50 ms
    assert parse_scenario(data).at_rate(100).sample_interval_s == 0.05


def test_scale_times_scales_a_jobs_times() -> None:
    raw = {"duration_s": 30, "job": {"start_s": 0.5, "compute_s": 0.5, "steps": 4}}
    scaled = scale_times(raw, 2.0)
    assert scaled["job"] == {"start_s": 1.0, "compute_s": 1.0, "steps": 4}
    assert scaled["duration_s"] == 60


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_scenarios_choose_their_rate(name: str) -> None:
    scenario = load_scenario(shipped_scenario(name))
    assert scenario.auto_rate, f"{name}: link_rate_mbps: auto is the shipped default"
    assert "reference_rate_mbps" in scenario.raw, f"{name}: its times need a reference rate"


# -- the rate from calibration figures -----------------------------------------------------------


def topology(name: str = "small") -> Any:
    return load_topology(shipped_topology(name))


def test_the_load_of_a_permutation_and_of_an_incast() -> None:
    small = topology()  # 2 planes, 2 racks of 2 hosts, 2 spines per plane
    perm = fabric_load(small, [("h0", "h2"), ("h2", "h1"), ("h1", "h3"), ("h3", "h0")])
    assert (perm.switches, perm.agents) == (8, 4)
    assert perm.frames == 8.0  # every NIC of every host at line rate
    assert perm.hops == 3.0
    assert perm.busiest_switch == 4.0  # a leaf: its two hosts sending and receiving
    assert perm.busiest_agent == 4.0  # sending and receiving on both planes
    incast = fabric_load(small, [("h1", "h0"), ("h2", "h0"), ("h3", "h0")])
    assert incast.frames == pytest.approx(2.0)  # the receiver's two NICs
    assert incast.hops == pytest.approx((1 + 3 + 3) / 3)
    assert incast.busiest_agent == pytest.approx(2.0)
    # no flows (a job's ranks): every host sends and receives
    assert fabric_load(small, []).frames == 8.0


def chosen_on_two_cores(calibration: Calibration, load: Load, fabric: Topology) -> Need:
    """The rate chosen for ``load``, checked to be the highest of the two-figure grid within
    the budget: faithful, and the next step up is not."""
    need = choose_rate(calibration, load, fabric, cores=2)
    assert need.faithful and need.rate_mbps == round_down(need.rate_mbps)
    step = 10 ** (len(str(int(need.rate_mbps))) - 2) if need.rate_mbps >= 10 else 0.1
    assert not assess(calibration, load, need.rate_mbps + step, fabric, cores=2).faithful
    return need


def test_the_chosen_rate_is_the_highest_within_the_budget() -> None:
    small = topology()
    load = fabric_load(small, [("h0", "h2"), ("h2", "h1"), ("h1", "h3"), ("h3", "h0")])
    need = chosen_on_two_cores(CAL, load, small)
    # by hand: idle 8 switches and 4 agents, then 8 NICs' frames over 3 hops and 2 ends
    per_frame = 3 * CAL.switch_hop_s + 2 * CAL.agent_packet_s
    frames = (BUDGET.machine_share * 2 - 8 * 0.01 - 4 * 0.01) / (8 * per_frame)
    exact = frames * (small.link_mtu + 14) * 8 / 1e6
    assert need.rate_mbps == round_down(exact)
    assert frame_rate(small, exact) == pytest.approx(frames)


def test_more_cores_or_a_bigger_fabric_move_the_rate() -> None:
    small, default = topology(), topology("default")
    flows = [("h0", "h2"), ("h2", "h1"), ("h1", "h3"), ("h3", "h0")]
    two = choose_rate(CAL, fabric_load(small, flows), small, cores=2).rate_mbps
    eight = choose_rate(CAL, fabric_load(small, flows), small, cores=8).rate_mbps
    wide = choose_rate(CAL, fabric_load(default, flows), default, cores=2).rate_mbps
    assert eight > two > wide
    # with cores to spare, one process's share of a core binds: the agent here
    need = choose_rate(CAL, fabric_load(small, flows), small, cores=64)
    assert need.agent_cores == pytest.approx(BUDGET.process_share, rel=0.05)


#: costs that rise where a process handles fewer frames, as measured (experiments.rate)
SLOPED = Calibration("model", switch_hop_s=200e-6, agent_packet_s=272e-6,
                     switch_idle_cores=0.005, agent_idle_cores=0.0, frames_per_s=583.0,
                     slow=Point(frames_per_s=58.0, switch_hop_s=473e-6, agent_packet_s=520e-6))  # fmt: skip


def test_a_frame_costs_more_where_a_process_handles_fewer() -> None:
    c = SLOPED
    # the two measured points, and the fast cost above the fast one
    assert c.switch_hop_at(583.0) == pytest.approx(200e-6)
    assert c.switch_hop_at(58.0) == pytest.approx(473e-6)
    assert c.switch_hop_at(5_000.0) == pytest.approx(200e-6)
    assert c.agent_packet_at(58.0) == pytest.approx(520e-6)
    # between them on the logarithm of the frame rate: the geometric middle halfway
    middle = (583.0 * 58.0) ** 0.5
    assert c.switch_hop_at(middle) == pytest.approx((200e-6 + 473e-6) / 2)
    # extrapolated below the slow point, down to EXTRAPOLATE_BELOW times lower, then flat
    assert c.switch_hop_at(29.0) > c.switch_hop_at(58.0)
    assert c.switch_hop_at(1.0) == c.switch_hop_at(58.0 / EXTRAPOLATE_BELOW)
    # a calibration of one point costs the same at every rate
    assert CAL.switch_hop_at(1.0) == CAL.switch_hop_at(1e6) == CAL.switch_hop_s
    # and the cache keeps the slow point
    assert Calibration.from_json(c.as_json()) == c


def test_the_rate_comes_from_each_process_s_own_frame_rate() -> None:
    small = topology()
    load = fabric_load(small, [("h0", "h2"), ("h2", "h1"), ("h1", "h3"), ("h3", "h0")])
    need = chosen_on_two_cores(SLOPED, load, small)
    # by hand at the chosen rate: the average switch and agent's frame rates set the costs
    f = frame_rate(small, need.rate_mbps)
    hops, ends = f * load.frames * load.hops, f * load.frames * 2
    expected = (8 * 0.005 + hops * SLOPED.switch_hop_at(hops / 8)
                + ends * SLOPED.agent_packet_at(ends / 4))  # fmt: skip
    assert need.fabric_cores == pytest.approx(expected)
    # dearer frames at low rates choose a lower rate than the fast costs alone would
    fast_only = Calibration("model", 200e-6, 272e-6, 0.005, 0.0)
    assert need.rate_mbps < choose_rate(fast_only, load, small, cores=2).rate_mbps


def test_no_rate_when_idle_processes_exceed_the_budget() -> None:
    busy = Calibration("bmv2", 1e-4, 1e-4, switch_idle_cores=0.2, agent_idle_cores=0.0)
    small = topology()
    with pytest.raises(RateError, match="needs 1.60 cores idle"):
        choose_rate(busy, fabric_load(small, []), small, cores=2)
    tiny = Calibration("model", 1.0, 1.0, 0.0, 0.0)  # a second a packet
    with pytest.raises(RateError, match=f"{MIN_RATE_MBPS:g} Mb/s"):
        choose_rate(tiny, fabric_load(small, []), small, cores=2)


def test_the_budget_stays_below_the_fidelity_thresholds() -> None:
    assert BUDGET.machine_share < THRESHOLDS.machine_cpu
    assert BUDGET.process_share < THRESHOLDS.thread_cpu
    with pytest.raises(RateError, match="machine_cpu"):
        Budget(machine_share=THRESHOLDS.machine_cpu)
    with pytest.raises(RateError, match="thread_cpu"):
        Budget(process_share=1.0)


@pytest.mark.parametrize("value, expected", [(4.37, 4.3), (12.7, 12), (0.987, 0.98), (250, 250)])
def test_round_down(value: float, expected: float) -> None:
    assert round_down(value) == expected


# -- the cache -----------------------------------------------------------------------------------


def counting(calls: list[str]) -> Callable[[str, Callable[[str], None]], Calibration]:
    def measure(target: str, say: Callable[[str], None]) -> Calibration:
        calls.append(target)
        return Calibration(target, 1e-4, 2e-4, 0.01, 0.0, Measurement(10.0, 100, 4.0, 1.0, 0.0))

    return measure


def test_the_cache_keeps_a_calibration_per_machine_target_and_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    first = cached_calibration("model", folder=tmp_path, measure=counting(calls))
    again = cached_calibration("model", folder=tmp_path, measure=counting(calls))
    assert calls == ["model"] and first == again
    entries = json.loads((tmp_path / "calibration.json").read_text())
    key = cache_key("model")
    assert list(entries) == [key]
    cpu, cores, target, version, measures = key.split("|")
    assert cpu and cores.endswith(" cores") and target == "model" and len(version) == 16
    assert measures == calibrate_module.MEASURES
    # a change of the code is another key: measured again, both kept
    monkeypatch.setattr(calibrate_module, "code_version", lambda target: "0" * 16)
    cached_calibration("model", folder=tmp_path, measure=counting(calls))
    assert calls == ["model", "model"]
    assert len(json.loads((tmp_path / "calibration.json").read_text())) == 2


def test_a_damaged_cache_entry_is_measured_again(tmp_path: Path) -> None:
    (tmp_path / "calibration.json").write_text(json.dumps({cache_key("model"): {"x": 1}}))
    calls: list[str] = []
    said: list[str] = []
    cached_calibration("model", said.append, folder=tmp_path, measure=counting(calls))
    assert calls == ["model"] and "measuring again" in said[0]
    (tmp_path / "calibration.json").write_text("not json")
    cached_calibration("model", folder=tmp_path, measure=counting(calls))
    assert calls == ["model", "model"]  # an unreadable file is no cache: written afresh
    assert list(json.loads((tmp_path / "calibration.json").read_text())) == [cache_key("model")]


def test_code_version_follows_the_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "host").mkdir()
    source = tmp_path / "host" / "agent.py"
    source.write_text("x = 1\n")
    monkeypatch.setattr(calibrate_module, "REPO", tmp_path)
    before = calibrate_module.code_version("model")
    source.write_text("x = 2\n")
    assert calibrate_module.code_version("model") != before


# -- the run's rate ------------------------------------------------------------------------------


def test_resolve_auto_prints_the_rate_and_headroom() -> None:
    scenario = load_scenario(shipped_scenario("demo"))
    said: list[str] = []
    resolved = resolve_rate(scenario, "model", said.append, calibration=CAL)
    chosen = scenario_need(scenario, CAL)[1]
    assert chosen is not None
    assert resolved.topology.link_rate_mbps == chosen.rate_mbps
    assert not resolved.auto_rate
    (line,) = said
    assert line.startswith(f"link rate auto: {chosen.rate_mbps:g} Mb/s on model (dilation ")
    assert "headroom" in line
    k = scenario.topology.link_rate_mbps / chosen.rate_mbps
    assert resolved.duration_s == pytest.approx(scenario.duration_s * k)


def test_a_fixed_rate_over_the_budget_warns_and_strict_refuses() -> None:
    fast = parse_scenario(base(link_rate_mbps=100))
    said: list[str] = []
    assert resolve_rate(fast, "model", said.append, calibration=CAL) is fast
    (line,) = said
    assert line.startswith("warning: link_rate_mbps 100 is not faithful on model here")
    assert "auto would choose" in line
    with pytest.raises(UnfaithfulRate, match="link_rate_mbps 100"):
        resolve_rate(fast, "model", said.append, strict=True, calibration=CAL)
    slow = parse_scenario(base(link_rate_mbps=1))
    quiet: list[str] = []
    assert resolve_rate(slow, "model", quiet.append, strict=True, calibration=CAL) is slow
    assert quiet == []


def test_the_sim_target_needs_no_calibration() -> None:
    scenario = load_scenario(shipped_scenario("demo"))
    assert resolve_rate(scenario, "sim", calibration=None) is scenario


def test_a_fixed_rate_replaces_auto() -> None:
    scenario = parse_scenario(base(link_rate_mbps="auto", reference_rate_mbps=10))
    fixed = scenario.with_(link_rate_mbps=5)
    assert not fixed.auto_rate and fixed.topology.link_rate_mbps == 5.0
    assert fixed.duration_s == scenario.duration_s  # with_ keeps the times as written
    assert "reference_rate_mbps" not in fixed.raw


def test_a_need_over_the_budget_says_by_how_much() -> None:
    small = topology()
    load = fabric_load(small, [])
    over = assess(CAL, load, 100.0, small, cores=2)
    assert not over.faithful and over.text().endswith("% over the budget")
    assert "headroom" in choose_rate(CAL, load, small, cores=2).text()


def test_strict_run_refuses_a_fixed_rate_over_the_budget_before_it_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    if os.geteuid() != 0:
        pytest.skip("mrc-testbed run needs root before it resolves the rate")
    monkeypatch.setenv("MRC_TESTBED_CACHE", str(tmp_path / "cache"))
    cached_calibration("model", measure=lambda target, say: CAL)
    path = tmp_path / "fast.yaml"
    path.write_text(json.dumps(base(link_rate_mbps=100)))  # JSON is YAML
    out = tmp_path / "results"
    assert run_file(path, "model", out, progress=False, strict=True) == UNFAITHFUL_EXIT
    assert "link_rate_mbps 100 is not faithful on model here" in capsys.readouterr().err
    assert not out.exists()  # refused before anything was brought up
