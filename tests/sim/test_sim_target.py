"""``mrc-testbed run --target sim``: a scenario in simulated time writes the emulation's results.

No root, no fabric: the shipped demo (its fault, both transports; smaller flows so that the
test is quick) runs on the in-memory network and must leave every file a results folder holds
(the layout ``experiments.results`` documents, which the emulated runs write), with the
emulation's metrics; one seed gives identical runs; kernel baselines are skipped, saying so;
a training job runs its steps through its faults.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

import experiments.results
from controller.qos import default_qos
from experiments.cli import build_parser
from experiments.runner import run_scenario
from experiments.scenario import Scenario, load_scenario, parse_scenario, shipped_scenario
from experiments.sim_target import SimTargetError, build_network
from targets.factory import SIM_TARGET, TARGETS, choose_target

#: files a results folder holds only when the scenario has a training job
JOB_FILES = {"steps.jsonl", "steps.png"}


def results_layout(transports: list[str]) -> set[str]:
    """Every file the results folder's documented layout lists (experiments.results): what an
    emulated run writes, for a scenario without a job."""
    doc = experiments.results.__doc__ or ""
    names = set(re.findall(r"\b([\w/]+\.(?:csv|json|jsonl|yaml|md|png))\b", doc))
    names -= JOB_FILES
    per_transport = {n for n in names if "TRANSPORT" in n}
    names -= per_transport
    for template in per_transport:
        names |= {template.replace("TRANSPORT", t) for t in transports}
    return names


def small_demo(**changes: Any) -> Scenario:
    """The shipped demo with 6 MiB flows (its fault still falls mid-transfer)."""
    demo = load_scenario(shipped_scenario("demo"))
    workloads = [{**demo.raw["workloads"][0], "total_bytes": "6MiB"}]
    return demo.with_(workloads=workloads, duration_s=8, **changes)


def files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


def test_sim_is_a_target_of_run_not_a_switch_target() -> None:
    assert SIM_TARGET in TARGETS
    args = build_parser().parse_args(["run", "demo", "--target", "sim", "--seed", "4"])
    assert (args.target, args.seed) == ("sim", 4)
    with pytest.raises(SystemExit):  # 'up' boots switches: sim is not one of its targets
        build_parser().parse_args(["up", "--target", "sim"])
    with pytest.raises(ValueError, match="mrc-testbed run --target sim"):
        choose_target("sim")


def test_sim_demo_writes_the_emulations_results_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines: list[str] = []
    metrics = run_scenario(small_demo(), tmp_path, SIM_TARGET, show=lines.append, progress=False)
    assert files(tmp_path) == results_layout(["mrc", "single-path"]), lines
    # everything said goes to ``show``, the summary table too (a benchmark collects it)
    assert capsys.readouterr().out == ""
    table = next(line for line in lines if "goodput/capacity" in line)
    assert "single-path" in table
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["operating_point"]["latency_by"] == "sim"
    mrc = metrics["mrc"]
    assert mrc.complete and mrc.messages_corrupt == 0
    assert mrc.messages_checked == 4 * 24  # every message checked at its receiver
    assert [r.fault for r in mrc.recovery] == ["down t0-p0-r0 <-> t1-p0-s0"]
    # MRC retired the failed link's EVs and sprayed over both planes
    assert mrc.recovery[0].ev_failover_qps > 0
    assert all(n > 0 for n in mrc.planes_bytes.values()) and len(mrc.planes_bytes) == 2
    assert not metrics["single-path"].complete  # stuck behind the failed link, as emulated
    faults = (tmp_path / "faults.csv").read_text().splitlines()[1:]
    assert [line.split(",")[2] for line in faults if line.startswith("mrc,")] == ["down", "up"]


def test_one_seed_gives_identical_metrics(tmp_path: Path) -> None:
    scenario = small_demo(transports=["mrc"])
    outs = [tmp_path / "a", tmp_path / "b"]
    for out in outs:
        run_scenario(scenario, out, SIM_TARGET, show=lambda _: None, progress=False, seed=3)
    a, b = ((out / "metrics.json").read_text() for out in outs)
    assert a == b
    for name in ("progress.csv", "completions.csv", "ev_transitions.csv", "ports.csv"):
        assert (outs[0] / name).read_text() == (outs[1] / name).read_text(), name


def test_kernel_baselines_are_skipped_naming_the_transport(tmp_path: Path) -> None:
    lines: list[str] = []
    metrics = run_scenario(
        small_demo(transports=["mrc", "mptcp"]), tmp_path, SIM_TARGET, show=lines.append,
        progress=False,
    )  # fmt: skip
    assert list(metrics) == ["mrc"]
    assert any("mptcp: kernel MPTCP runs only in emulation" in line for line in lines), lines
    with pytest.raises(SimTargetError, match="no transport runs on the sim target"):
        run_scenario(
            small_demo(transports=["tcp"]), tmp_path / "tcp", SIM_TARGET, show=lambda _: None,
            progress=False,
        )  # fmt: skip


def test_the_switches_run_the_emulated_operating_point() -> None:
    """The controller's thresholds for the topology, the scenario's overrides and a transport
    without trimming, as the emulated switches get them."""
    demo = small_demo()
    net = build_network(demo, demo.transports[0], seed=1)
    topology = demo.topology
    port = net._ports[("t0-p0-r0", 1)]
    queue = topology.bdp_queue
    assert port.depth == topology.queue_depth
    assert port.trim_at == queue.packets  # uet: trim when the 1-BDP data queue is full
    assert (port.ecn_at, port.ecn_full) == (max(1, queue.ecn_low), queue.ecn_high)
    # RED's slope as the controller installs it (rounded to 1/65536 per packet)
    slope = default_qos(topology).action_params(topology.queue_depth)["ecn_slope"]
    assert port.ecn_step == slope / 65536
    incast = load_scenario(shipped_scenario("incast"))
    on, off = incast.transports
    port = build_network(incast, on, seed=1)._ports[("t0-p0-r0", 1)]
    assert (port.depth, port.trim_at, port.ecn_at, port.ecn_full) == (8, 4, 2, None)
    assert build_network(incast, off, seed=1)._ports[("t0-p0-r0", 1)].trim_at is None


def test_every_fault_kind_acts_in_simulated_time(tmp_path: Path) -> None:
    """Flaps, a switch reboot, a plane, a NIC's cable and the operator's EV states act at
    their times, are recorded as the emulation records them, and MRC rides them out."""
    scenario = small_demo().with_(
        name="faults",
        transports=["mrc"],
        workloads=[
            {"kind": "incast", "receiver": "h0", "senders": ["h2"], "message_bytes": "256KiB",
             "total_bytes": "4MiB", "start_s": 0.2},
        ],
        faults=[
            {"kind": "link_flap", "at_s": 0.5, "until_s": 1.4, "rate_per_min": 120,
             "down_s": 0.2, "link": ["t0-p0-r1", "t1-p0-s1"]},
            {"kind": "ev_deny", "at_s": 0.6, "host": "h2", "peer": "h0", "path": "p0-s0"},
            {"kind": "switch_reboot", "at_s": 0.8, "down_s": 0.3, "switch": "t1-p1-s0"},
            {"kind": "ev_allow", "at_s": 1.2, "host": "h2", "peer": "h0", "path": "p0-s0"},
            {"kind": "plane_down", "at_s": 1.5, "plane": 1},
            {"kind": "plane_up", "at_s": 1.8, "plane": 1},
            {"kind": "nic_down", "at_s": 2.0, "host": "h0", "plane": 0},
            {"kind": "nic_up", "at_s": 2.3, "host": "h0", "plane": 0},
        ],
    )  # fmt: skip
    metrics = run_scenario(scenario, tmp_path, SIM_TARGET, show=lambda _: None, progress=False)
    assert metrics["mrc"].complete and metrics["mrc"].messages_corrupt == 0
    rows = (tmp_path / "faults.csv").read_text().splitlines()[1:]
    actions = [(float(r.split(",")[1]), r.split(",", 2)[2]) for r in rows]
    assert actions == [
        (0.5, "down,t0-p0-r1 <-> t1-p0-s1"),
        (0.6, "deny,h2 -> h0 p0-s0"),
        (0.7, "up,t0-p0-r1 <-> t1-p0-s1"),
        (0.8, "kill,t1-p1-s0"),
        (1.0, "down,t0-p0-r1 <-> t1-p0-s1"),
        (1.1, "start,t1-p1-s0"),
        (1.2, "up,t0-p0-r1 <-> t1-p0-s1"),  # the flap's steps come first at one time
        (1.2, "allow,h2 -> h0 p0-s0"),
        (1.5, "kill,t1-p1-s0"),
        (1.5, "kill,t1-p1-s1"),
        (1.8, "start,t1-p1-s0"),
        (1.8, "start,t1-p1-s1"),
        (2.0, "down,h0 <-> t0-p0-r0"),
        (2.3, "up,h0 <-> t0-p0-r0"),
    ]
    reasons = {
        (r.split(",")[2], r.split(",")[8])
        for r in (tmp_path / "ev_transitions.csv").read_text().splitlines()[1:]
    }
    assert ("h2", "operator") in reasons  # the operator's DENIED
    assert ("h0", "port_down") in reasons  # h0's core saw its NIC's link go down


def test_a_training_job_runs_its_steps_through_the_faults(tmp_path: Path) -> None:
    """A scenario's job on the sim target: every step recorded against its fault-free baseline,
    the faults acting between the network's events and marked on the steps they overlap, and
    the job's files (steps.jsonl, steps.png) in the results folder."""
    scenario = parse_scenario(
        {
            "name": "sim-job",
            "topology": "small",
            "link_rate_mbps": 10,
            "duration_s": 20,
            "sample_interval_s": 0.5,
            "baseline": True,
            "transports": ["mrc"],
            "job": {
                "steps": 4,
                "compute_s": 0.2,
                "start_s": 0.2,
                "collectives": [{"kind": "all-reduce", "size": "1MiB"}],
            },
            "faults": [
                {"kind": "switch_reboot", "at_s": 1.0, "down_s": 1.0, "switch": "t1-p0-s0"},
            ],
        }
    )
    metrics = run_scenario(scenario, tmp_path, SIM_TARGET, show=lambda _: None, progress=False)
    assert list(metrics) == ["mrc-baseline", "mrc"]
    assert files(tmp_path) >= JOB_FILES
    steps = [json.loads(line) for line in (tmp_path / "steps.jsonl").read_text().splitlines()]
    by = {name: [s for s in steps if s["transport"] == name] for name in metrics}
    for name, records in by.items():
        assert [s["step"] for s in records] == [0, 1, 2, 3], name
        assert all(s["time_s"] and s["time_s"] > 0.2 for s in records), name  # compute + comm
    assert not any(s["faults"] for s in by["mrc-baseline"])
    hit = [s for s in by["mrc"] if s["faults"]]
    assert hit and all(s["faults"] == ["t1-p0-s0"] for s in hit)
    assert sum(s["evs_retired"] for s in hit) > 0  # the reboot retired the spine's EVs
    faults = (tmp_path / "faults.csv").read_text().splitlines()[1:]
    assert [line.split(",")[2] for line in faults if line.startswith("mrc,")] == ["kill", "start"]
