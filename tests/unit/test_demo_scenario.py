"""The shipped demos (the small fabric's and the eight planes') are sized so that each transport runs through the failure and the repair:
even at the full capacity the fault leaves, a flow cannot finish before the link has been back
for a second (the time MRC takes to probe its retired EVs back to GOOD), and it can finish
within the run. tests/integration/test_demo.py runs it."""

from __future__ import annotations

import pytest

from experiments.metrics import FaultMark, capacity_series
from experiments.scenario import load_scenario, shipped_scenario

PROBE_BACK_S = 1.0  # after the repair, the EVs are GOOD again within about 0.5 s (measured)


def ideal_end(path_name: str = "demo") -> tuple[float, float, float]:
    """When the demo's flows would end at the full capacity the fault leaves (each flow its
    equal share), the time of the repair, and the run's duration."""
    scenario = load_scenario(shipped_scenario(path_name))
    (workload,) = scenario.workloads
    at = {f["kind"]: f for f in scenario.raw["faults"]}  # one link_down, one link_up
    target = " <-> ".join(at["link_down"]["link"])
    repaired = float(at["link_up"]["at_s"])
    marks = [FaultMark(at["link_down"]["at_s"], "down", target), FaultMark(repaired, "up", target)]
    flows = [(s, d) for _, s, d in scenario.flows()]
    step = 0.01
    bits = 0.0
    for t, capacity in capacity_series(scenario.fabric, flows, marks, scenario.duration_s, step):
        if t > workload.start_s:
            bits += capacity / len(flows) * step
        if bits >= workload.total_bytes * 8:
            return t, repaired, scenario.duration_s
    return float("inf"), repaired, scenario.duration_s


@pytest.mark.parametrize("name", ["demo", "demo-mrc8"])
def test_the_demo_runs_through_the_failure_and_the_repair(name: str) -> None:
    end, repaired, duration = ideal_end(name)
    assert end >= repaired + PROBE_BACK_S, (end, repaired)
    assert end <= duration - 2.0, (end, duration)  # with room for MRC's own overheads


def test_the_capacity_of_a_window_is_integrated_exactly_between_the_faults() -> None:
    # a window of 2.3 s with a link down for 0.5 s of it: what the sampling grid (here 10 s
    # bins, as a slow auto rate scales them) cannot resolve, the integral does
    from experiments.metrics import capacity_bps, capacity_integral, failed_links

    scenario = load_scenario(shipped_scenario("demo"))
    flows = [(s, d) for _, s, d in scenario.flows()]
    fabric = scenario.fabric
    target = " <-> ".join(scenario.raw["faults"][0]["link"])
    marks = [FaultMark(1.0, "down", target), FaultMark(1.5, "up", target)]
    full = capacity_bps(fabric, flows)
    degraded = capacity_bps(fabric, flows, failed_links(fabric, marks, 1.2))
    assert degraded < full
    got = capacity_integral(fabric, flows, marks, 0.2, 2.5)
    assert got == pytest.approx(full * 1.8 + degraded * 0.5)
    assert capacity_integral(fabric, flows, [], 0.2, 2.5) == pytest.approx(full * 2.3)
