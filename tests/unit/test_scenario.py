"""Scenario files: the shipped scenarios load, and bad input names the file and the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.scenario import (
    ScenarioError,
    load_scenario,
    parse_scenario,
    parse_size,
    permutation,
    shipped_scenario,
)

SHIPPED = ["demo", "incast", "flaps", "baselines"]


def base() -> dict[str, Any]:
    return {
        "name": "t",
        "topology": "small",
        "duration_s": 10,
        "transports": ["mrc"],
        "workloads": [{"kind": "permutation", "message_bytes": "64KiB", "total_bytes": "1MiB"}],
    }


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_scenarios_load(name: str) -> None:
    scenario = load_scenario(shipped_scenario(name))
    assert scenario.name == name
    assert scenario.flows()
    hosts = {h.name for h in scenario.fabric.hosts}
    for _, src, dst in scenario.flows():
        assert src in hosts and dst in hosts and src != dst
    for step in scenario.timeline():
        assert 0 <= step.t <= scenario.duration_s + 10


def test_permutation_crosses_racks_on_small_fabric() -> None:
    scenario = parse_scenario(base())
    rack = {h.name: h.rack for h in scenario.fabric.hosts}
    flows = scenario.workloads[0].flows()
    assert sorted(s for s, _ in flows) == sorted(d for _, d in flows) == ["h0", "h1", "h2", "h3"]
    assert all(rack[s] != rack[d] for s, d in flows)


@given(
    st.lists(st.text("abcdefgh", min_size=1, max_size=3), min_size=2, max_size=12, unique=True),
    st.integers(0, 1000),
)
@settings(max_examples=50, deadline=None)
def test_permutation_is_a_derangement(hosts: list[str], seed: int) -> None:
    pairs = permutation(hosts, seed)
    assert sorted(s for s, _ in pairs) == sorted(hosts)
    assert sorted(d for _, d in pairs) == sorted(hosts)
    assert all(s != d for s, d in pairs)
    assert permutation(hosts, seed) == pairs


def test_incast_and_all_to_all_flows() -> None:
    data = base()
    data["workloads"] = [
        {"kind": "incast", "receiver": "h0", "senders": 3},
        {"kind": "all-to-all", "hosts": ["h1", "h2", "h3"], "start_s": 1},
    ]
    scenario = parse_scenario(data)
    assert scenario.workloads[0].flows() == [("h1", "h0"), ("h2", "h0"), ("h3", "h0")]
    assert len(scenario.workloads[1].flows()) == 6


def test_overrides_change_the_topology() -> None:
    data = base() | {"link_rate_mbps": 20, "queue_depth": 16, "link_delay_us": 0}
    topo = parse_scenario(data).topology
    assert (topo.link_rate_mbps, topo.queue_depth, topo.link_delay_us) == (20.0, 16, 0.0)


def test_thresholds() -> None:
    scenario = parse_scenario(base() | {"trim_threshold": 2, "ecn_threshold": 6})
    assert (scenario.trim_threshold, scenario.ecn_threshold) == (2, 6)
    assert parse_scenario(base()).trim_threshold is None


def test_flap_expands_to_down_up_pairs() -> None:
    data = base()
    data["faults"] = [
        {
            "kind": "link_flap",
            "at_s": 1,
            "until_s": 7,
            "rate_per_min": 20,
            "down_s": 1,
            "link": ["t1-p0-s0", "t0-p0-r0"],
        }
    ]
    timeline = parse_scenario(data).timeline()
    assert [(s.t, s.action) for s in timeline] == [
        (1.0, "down"),
        (2.0, "up"),
        (4.0, "down"),
        (5.0, "up"),
    ]


def test_reboot_expands_to_kill_then_start() -> None:
    data = base()
    data["faults"] = [{"kind": "switch_reboot", "at_s": 2, "down_s": 1.5, "switch": "t1-p1-s0"}]
    assert [(s.t, s.action) for s in parse_scenario(data).timeline()] == [
        (2.0, "kill"),
        (3.5, "start"),
    ]


@pytest.mark.parametrize(
    "text, expected",
    [(4096, 4096), ("4096", 4096), ("64KiB", 65536), ("1.5MB", 1_500_000), ("2 MiB", 2 << 20)],
)
def test_sizes(text: object, expected: int) -> None:
    assert parse_size(text) == expected


BAD: list[tuple[str, Any, str]] = [
    ("duration_s", -1, "duration_s"),
    ("duration_s", "long", "duration_s"),
    ("bogus", 1, "bogus"),
    ("topology", "nowhere", "topology"),
    ("link_rate_mbps", 0, "link_rate_mbps"),
    ("transports", ["mrc", "quic"], "transports[1]"),
    ("transports", [], "transports"),
    ("transports", ["mrc", "mrc"], "transports"),
    ("transports", [{"transport": "mrc", "trimming": "yes"}], "transports[0].trimming"),
    ("workloads", [], "workloads"),
    ("workloads", [{"kind": "shuffle"}], "workloads[0].kind"),
    ("workloads", [{"kind": "permutation", "message_bytes": "lots"}], "workloads[0].message_bytes"),
    (
        "workloads",
        [{"kind": "permutation", "message_bytes": "1MiB", "total_bytes": "1KiB"}],
        "workloads[0].total_bytes",
    ),
    ("workloads", [{"kind": "permutation", "hosts": ["h0", "h9"]}], "workloads[0].hosts[1]"),
    ("workloads", [{"kind": "permutation", "start_s": 99}], "workloads[0].start_s"),
    (
        "workloads",
        [{"kind": "incast", "receiver": "h0", "senders": ["h0", "h1"]}],
        "workloads[0].senders",
    ),
    ("workloads", [{"kind": "incast", "receiver": "h0", "senders": 9}], "workloads[0].senders"),
    ("workloads", [{"kind": "permutation", "receiver": "h0"}], "workloads[0].receiver"),
    ("faults", [{"kind": "link_down", "at_s": 1, "link": ["h0", "t1-p0-s0"]}], "faults[0].link"),
    ("faults", [{"kind": "link_down", "at_s": 1, "link": "t0-p0-r0"}], "faults[0].link"),
    (
        "faults",
        [{"kind": "link_down", "at_s": 11, "link": ["t0-p0-r0", "t1-p0-s0"]}],
        "faults[0].at_s",
    ),
    ("faults", [{"kind": "switch_reboot", "at_s": 1, "switch": "t9-p0-s0"}], "faults[0].switch"),
    ("faults", [{"kind": "explode", "at_s": 1}], "faults[0].kind"),
    ("trim_threshold", 113, "trim_threshold"),  # above the queue depth (uet: 4 x 28 packets)
    ("ecn_threshold", -1, "ecn_threshold"),
    (
        "faults",
        [
            {
                "kind": "link_flap",
                "at_s": 1,
                "rate_per_min": 60,
                "down_s": 2,
                "link": ["t0-p0-r0", "t1-p0-s0"],
            }
        ],
        "faults[0].down_s",
    ),
    (
        "faults",
        [{"kind": "link_flap", "at_s": 1, "rate_per_min": 0, "link": ["t0-p0-r0", "t1-p0-s0"]}],
        "faults[0].rate_per_min",
    ),
]


@pytest.mark.parametrize("key, value, field", BAD, ids=[f"{b[2]}-{i}" for i, b in enumerate(BAD)])
def test_bad_fields_are_named(key: str, value: Any, field: str) -> None:
    data = base()
    data[key] = value
    with pytest.raises(ScenarioError) as info:
        parse_scenario(data, "bad.yaml")
    assert info.value.field == field
    assert str(info.value).startswith("bad.yaml: field ")


def test_missing_file_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="no such file"):
        load_scenario(tmp_path / "absent.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(ScenarioError, match=r"bad.yaml: .*line \d+"):
        load_scenario(bad)


def test_topology_file_relative_to_scenario(tmp_path: Path) -> None:
    topo = tmp_path / "tiny.yaml"
    topo.write_text(
        yaml.safe_dump({"planes": 1, "racks": 2, "spines_per_plane": 1, "hosts_per_rack": 1})
    )
    scenario_file = tmp_path / "s.yaml"
    scenario_file.write_text(yaml.safe_dump(base() | {"topology": "tiny.yaml"}))
    scenario = load_scenario(scenario_file)
    assert scenario.topology.planes == 1
    assert scenario.workloads[0].flows() == [("h0", "h1"), ("h1", "h0")]
