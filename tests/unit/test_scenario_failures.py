"""Failure kinds of scenario files (NIC, plane, operator EV states), the EV format of a
transport, the shipped failure scenarios, and how a phase carries the new faults out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from experiments.faults import EvAllow, EvFault, LinkFlap, NicDown, PlaneDown, SwitchReboot
from experiments.metrics import affected_labels
from experiments.runner import Phase
from experiments.scenario import ScenarioError, load_scenario, parse_scenario, shipped_scenario


def base(**extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": "t",
        "topology": "small",
        "duration_s": 10,
        "transports": ["mrc"],
        "workloads": [{"kind": "permutation", "message_bytes": "64KiB", "total_bytes": "1MiB"}],
    }
    out.update(extra)
    return out


@pytest.mark.parametrize("name", ["incident", "spraying", "plane"])
def test_failure_scenarios_load(name: str) -> None:
    scenario = load_scenario(shipped_scenario(name))
    assert scenario.faults and scenario.flows()


def test_incident_is_the_seeds_event() -> None:
    scenario = load_scenario(shipped_scenario("incident"))
    reboots = [f for f in scenario.faults if isinstance(f, SwitchReboot)]
    assert len(reboots) == 4 and all(f.switch and f.switch.startswith("t1-") for f in reboots)
    assert len({f.at_s for f in reboots}) == 3  # two of them at the same time
    flaps = [f for f in scenario.faults if isinstance(f, LinkFlap)]
    assert len(flaps) == 2 and {f.rate_per_min for f in flaps} == {6}
    assert [t.kind for t in scenario.transports] == ["mrc", "mptcp"]
    assert scenario.topology.name == "default"


def test_nic_plane_and_ev_faults_parse() -> None:
    faults = [
        {"kind": "nic_down", "at_s": 1, "host": "h1", "plane": 1},
        {"kind": "nic_up", "at_s": 2, "host": "h1", "plane": 1},
        {"kind": "plane_down", "at_s": 3, "plane": 0},
        {"kind": "plane_up", "at_s": 4, "plane": 0},
        {"kind": "ev_deny", "at_s": 5, "host": "h0", "peer": "h2", "path": "p0-s1"},
        {"kind": "ev_allow", "at_s": 6, "host": "h0", "peer": "h2", "ev": 7},
    ]
    s = parse_scenario(base(faults=faults))
    nic_down, nic_up, plane_down, plane_up, deny, allow = s.faults
    assert isinstance(nic_down, NicDown) and isinstance(plane_down, PlaneDown)
    assert isinstance(allow, EvAllow)
    assert nic_down.link == ("h1", "t0-p1-r0") and nic_down.events() == [(1, "down")]
    assert nic_up.events() == [(2, "up")]
    assert plane_down.switches == ("t1-p0-s0", "t1-p0-s1") and plane_down.events() == [(3, "kill")]
    assert plane_up.events() == [(4, "start")] and plane_up.target == "t1-p0-s0, t1-p0-s1"
    assert deny.events() == [(5, "deny")] and deny.target == "h0 -> h2 p0-s1"
    assert allow.events() == [(6, "allow")] and allow.ev == 7


@pytest.mark.parametrize(
    ("fault", "field", "words"),
    [
        ({"kind": "nic_down", "at_s": 1, "host": "h1", "plane": 2}, "faults[0].plane", "0..1"),
        ({"kind": "nic_down", "at_s": 1, "host": "h9", "plane": 0}, "faults[0].host", ""),
        ({"kind": "plane_down", "at_s": 1, "plane": 0, "host": "h0"}, "faults[0].host", "no such"),
        ({"kind": "ev_deny", "at_s": 1, "host": "h0", "peer": "h2", "path": "p7"}, "faults[0].path",
         "p0-s0"),
        ({"kind": "ev_deny", "at_s": 1, "host": "h0", "peer": "h0", "ev": 1}, "faults[0].peer",
         "another host"),
        ({"kind": "ev_deny", "at_s": 1, "host": "h0", "peer": "h2"}, "faults[0].path", "exactly"),
    ],
)  # fmt: skip
def test_bad_failure_faults_name_the_field(fault: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(ScenarioError) as err:
        parse_scenario(base(faults=[fault]))
    assert field in str(err.value) and words in str(err.value)


def test_transport_ev_format() -> None:
    s = parse_scenario(
        base(transports=[{"name": "a", "transport": "mrc", "ev_format": "STEV"}, "mrc"])
    )
    assert [t.ev_format for t in s.transports] == ["stev", "srv6"]
    srh = parse_scenario(base(transports=[{"transport": "mrc", "ev_format": "SRv6+SRH"}]))
    assert [t.ev_format for t in srh.transports] == ["srv6+srh"]
    with pytest.raises(ScenarioError, match="ev_format"):
        parse_scenario(base(transports=[{"transport": "mrc", "ev_format": "vxlan"}]))
    with pytest.raises(ScenarioError, match="kernel transport"):
        parse_scenario(base(transports=[{"transport": "mptcp", "ev_format": "stev"}]))


class Recorder:
    """Records what a phase asks of the testbed, and what faults ask of their target."""

    def __init__(self) -> None:
        self.calls: list[tuple[object, ...]] = []

    def link_down(self, a: str, b: str) -> None:
        self.calls.append(("down", a, b))

    def link_up(self, a: str, b: str) -> None:
        self.calls.append(("up", a, b))

    def kill_switch(self, name: str) -> None:
        self.calls.append(("kill", name))

    def start_switch(self, name: str) -> None:
        self.calls.append(("start", name))

    def kill_switches(self, names: Sequence[str]) -> None:
        self.calls.append(("kill", *names))

    def start_switches(self, names: Sequence[str]) -> None:
        self.calls.append(("start", *names))

    def set_ev_state(self, fault: EvFault, state: str) -> None:
        self.calls.append((state, fault.host, fault.peer))


def test_phase_carries_out_nic_and_plane_faults() -> None:
    s = parse_scenario(base(faults=[
        {"kind": "plane_down", "at_s": 1, "plane": 1},
        {"kind": "plane_up", "at_s": 2, "plane": 1},
        {"kind": "nic_down", "at_s": 3, "host": "h0", "plane": 0},
    ]))  # fmt: skip
    tb = Recorder()
    phase = Phase(tb, s, s.transports[0])  # type: ignore[arg-type]
    for step in s.timeline():
        phase.apply(step)
    assert tb.calls == [
        ("kill", "t1-p1-s0"), ("kill", "t1-p1-s1"), ("start", "t1-p1-s0"), ("start", "t1-p1-s1"),
        ("down", "h0", "t0-p0-r0"),
    ]  # fmt: skip
    marks = [(m.action, m.target) for m in phase.result.faults]
    assert marks[:2] == [("kill", "t1-p1-s0"), ("kill", "t1-p1-s1")]
    assert marks[-1] == ("down", "h0 <-> t0-p0-r0")
    phase.undo_faults()
    assert tb.calls[-1] == ("up", "h0", "t0-p0-r0")
    # What the end of the phase undid is on record as well.
    assert (phase.result.faults[-1].action, phase.result.faults[-1].target) == (
        "up",
        "h0 <-> t0-p0-r0",
    )


def test_plane_scenario_loses_a_plane_and_a_nic() -> None:
    scenario = load_scenario(shipped_scenario("plane"))
    kinds = [f.kind for f in scenario.faults]
    assert kinds == ["plane_down", "plane_up", "nic_down", "nic_up"]
    first = scenario.faults[0]
    assert isinstance(first, PlaneDown) and first.switches == ("t1-p1-s0", "t1-p1-s1")


def test_affected_labels_of_a_plane_and_of_ecmp_evs() -> None:
    fabric = load_scenario(shipped_scenario("spraying")).fabric
    labels = affected_labels(fabric, "t1-p1-s0, t1-p1-s1")
    assert {"p1-s0", "p1-s1", "p1-ecmp"} <= labels and not any(x.startswith("p0") for x in labels)
    assert "p0-ecmp" in affected_labels(fabric, "t0-p0-r0 <-> t1-p0-s0")


@pytest.mark.parametrize(
    "name", ["demo", "incast", "flaps", "baselines", "incident", "spraying", "plane"]
)
def test_faults_write_back_what_they_read(name: str) -> None:
    scenario = load_scenario(shipped_scenario(name))
    again = scenario.with_(faults=[f.as_dict() for f in scenario.faults])
    assert again == scenario and again.faults == scenario.faults


@pytest.mark.parametrize(
    ("fault", "applied", "undone"),
    [
        ({"kind": "link_down", "link": ["t0-p0-r0", "t1-p0-s0"]}, ("down", "t0-p0-r0", "t1-p0-s0"),
         ("up", "t0-p0-r0", "t1-p0-s0")),
        ({"kind": "link_up", "link": ["t0-p0-r0", "t1-p0-s0"]}, ("up", "t0-p0-r0", "t1-p0-s0"),
         ("down", "t0-p0-r0", "t1-p0-s0")),
        ({"kind": "nic_down", "host": "h1", "plane": 1}, ("down", "h1", "t0-p1-r0"),
         ("up", "h1", "t0-p1-r0")),
        ({"kind": "switch_reboot", "switch": "t1-p0-s1"}, ("kill", "t1-p0-s1"),
         ("start", "t1-p0-s1")),
        ({"kind": "plane_down", "plane": 1}, ("kill", "t1-p1-s0", "t1-p1-s1"),
         ("start", "t1-p1-s0", "t1-p1-s1")),
        ({"kind": "plane_up", "plane": 1}, ("start", "t1-p1-s0", "t1-p1-s1"),
         ("kill", "t1-p1-s0", "t1-p1-s1")),
        ({"kind": "ev_deny", "host": "h0", "peer": "h2", "ev": 3}, ("DENIED", "h0", "h2"),
         ("UNKNOWN", "h0", "h2")),
        ({"kind": "ev_allow", "host": "h0", "peer": "h2", "ev": 3}, ("UNKNOWN", "h0", "h2"),
         ("DENIED", "h0", "h2")),
    ],
)  # fmt: skip
def test_each_fault_kind_applies_and_undoes(
    fault: dict[str, Any], applied: tuple[str, ...], undone: tuple[str, ...]
) -> None:
    (parsed,) = parse_scenario(base(faults=[{"at_s": 1, **fault}])).faults
    assert type(parsed).kind == fault["kind"]
    target = Recorder()
    parsed.apply(target)
    parsed.undo(target)
    assert target.calls == [applied, undone]
    assert parsed.steps()[0].action == parsed.actions[0]
