"""The experiment runner end to end: a scenario with MRC and kernel baselines and a fault."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from experiments.runner import run_scenario
from experiments.scenario import parse_scenario

from .conftest import agent

pytestmark = [pytest.mark.mininet, pytest.mark.slow]


def test_scenario_writes_a_complete_results_folder(testbed: Any, tmp_path: Path) -> None:
    scenario = parse_scenario(
        {
            "name": "it",
            "topology": "small",
            "link_rate_mbps": 20,
            "link_delay_us": 0,
            "duration_s": 20,
            "transports": ["mrc", "tcp", "mptcp"],
            "workloads": [
                {
                    "kind": "permutation",
                    "message_bytes": "256KiB",
                    "total_bytes": "6MiB",
                    "start_s": 0.2,
                }
            ],
            # Early enough that every transport is still sending when they happen.
            "faults": [
                {"kind": "link_down", "at_s": 0.5, "link": ["t0-p0-r0", "t1-p0-s0"]},
                {"kind": "link_up", "at_s": 1.0, "link": ["t0-p0-r0", "t1-p0-s0"]},
                {"kind": "switch_reboot", "at_s": 1.2, "down_s": 0.3, "switch": "t1-p1-s1"},
            ],
        }
    )
    lines: list[str] = []
    metrics = run_scenario(scenario, tmp_path, testbed=testbed, progress=False, show=lines.append)
    for name in (
        "metrics.json",
        "summary.md",
        "goodput.csv",
        "goodput.png",
        "ev_states.png",
        "completion_cdf.png",
        "switches.png",
        "scenario.yaml",
        "hosts/mrc.json",
    ):
        assert (tmp_path / name).stat().st_size > 0, name
    saved = json.loads((tmp_path / "metrics.json").read_text())["transports"]
    assert saved == json.loads(json.dumps({k: m.as_json() for k, m in metrics.items()}))
    for name in ("mrc", "tcp", "mptcp"):
        m = saved[name]
        assert m["complete"], (name, lines)
        assert m["delivered_bytes"] >= 4 * (6 << 20), name
        assert [r["fault"] for r in m["recovery"]] == [
            "down t0-p0-r0 <-> t1-p0-s0",
            "kill t1-p1-s1",
        ]
    # every MRC message was checked at its receiver, byte for byte
    assert (saved["mrc"]["messages_checked"], saved["mrc"]["messages_corrupt"]) == (4 * 24, 0)
    assert saved["tcp"]["messages_checked"] is None  # the kernel's flows are not checked here
    faults = (tmp_path / "faults.csv").read_text().splitlines()
    for name in ("mrc", "tcp", "mptcp"):
        actions = [line.split(",")[2] for line in faults if line.startswith(name + ",")]
        assert actions == ["down", "up", "kill", "start"], (name, actions)
    # MRC sprays over both planes, kernel TCP keeps to one, MPTCP opens a subflow per plane.
    for name, planes_used in (("mrc", 2), ("tcp", 1), ("mptcp", 2)):
        sent = saved[name]["planes_bytes"]
        busy = [p for p, n in sent.items() if n > (6 << 20) // 4]
        assert len(busy) == planes_used, (name, sent)
    # The fabric is back to normal afterwards: every agent answers, every switch is in sync.
    assert all(sw.process.alive for sw in testbed.switches())
    assert testbed.control.in_sync("t1-p1-s1")

    for host in testbed.fabric.hosts:
        with agent(testbed, host.name) as c:
            assert c.info()["ok"]
