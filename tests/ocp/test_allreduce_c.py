"""Ring all-reduces on the four hosts of the small fabric, on both switch targets.

- The C program (``capi/examples/mrc_allreduce.c``): ``mrc-testbed exec`` runs one rank on every
  host, named by host name; the ranks swap their QP details over TCP on the management network,
  write WRITE_IMMs to their ring neighbours across the switches, and each checks the reduced
  values of every iteration.
- A scenario's job through the agents (``experiments.flows.collective.CollectiveFlows``): every
  step ends, with nccl-tests' bandwidths, in ``steps.jsonl``.

The fabric is the one of ``test_mrc_bw_fabric.py`` (the switch model, then BMv2, each with its
management network; needs root and Mininet, the same reasons to skip).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_mrc_bw_fabric import running  # noqa: F401 -- the fabric fixture
from test_ocp_fabric import ROOT

from experiments.mgmtnet import addresses

pytestmark = [pytest.mark.netns, pytest.mark.mininet, pytest.mark.slow]

RANKS = ("h0", "h1", "h2", "h3")


def test_ring_allreduce_on_four_hosts(running: Any) -> None:  # noqa: F811
    example = str(ROOT / "build" / "capi" / "mrc_allreduce")
    count, iters = 65536, 3  # 256 KiB of floats per rank, 64 KiB chunks
    ring = ",".join(RANKS)
    options = ["-H", ring, "-c", str(count), "-i", str(iters), "-t", "200"]
    out = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True}
    procs = {
        host: subprocess.Popen(
            [
                sys.executable,
                "-m",
                "experiments.cli",
                "exec",
                host,
                "--",
                example,
                "-n",
                host,
                *options,
            ],
            cwd=ROOT,
            env=running.env(),
            **out,
        )  # fmt: skip
        for host in RANKS
    }
    outs = {host: proc.communicate(timeout=260)[0] for host, proc in procs.items()}
    mgmt = {a.host: str(a.ipv4) for a in addresses(h.name for h in running.fabric.hosts)}
    for rank, (host, proc) in enumerate(procs.items()):
        assert proc.returncode == 0, f"{host}:\n{outs[host]}"
        assert f"{host}: done, reduced values checked" in outs[host], outs[host]
        # the right neighbour reached by its name, at its management address
        right = RANKS[(rank + 1) % len(RANKS)]
        assert f"writes to {right} ({mgmt[right]}, QP" in outs[host], outs[host]
        lines = [line for line in outs[host].splitlines() if "allreduce 262144 B" in line]
        assert len(lines) == iters, outs[host]
        assert all("busbw" in line for line in lines)


def test_a_job_through_the_agents(running: Any, tmp_path: Path) -> None:  # noqa: F811
    from experiments.jobs.steps import BASELINE_SUFFIX
    from experiments.results import load_jobs, load_raw
    from experiments.runner import run_scenario
    from experiments.scenario import parse_scenario

    scenario = parse_scenario(
        {
            "topology": "small",
            "duration_s": 60,
            "baseline": True,
            # steps of at least 0.2 s from 0.5 s: the job is still running at 0.7 s
            "job": {
                "steps": 3,
                "start_s": 0.5,
                "compute_s": 0.2,
                "collectives": [{"kind": "all-reduce", "size": "256KiB"}],
            },
            "faults": [{"kind": "link_down", "at_s": 0.7, "link": ["t0-p0-r0", "t1-p0-s0"]}],
        }
    )
    run_scenario(scenario, tmp_path, testbed=running, progress=False, show=lambda _m: None)
    _, _, results = load_raw(tmp_path)
    assert [r.name for r in results] == ["mrc" + BASELINE_SUFFIX, "mrc"]
    for r in results:
        assert [s.step for s in r.steps] == [0, 1, 2], r.name
        for step in r.steps:
            assert step.end is not None and len(step.collectives) == 1
            assert step.collectives[0].busbw is not None and step.collectives[0].busbw > 0
    assert any(s.faults for s in results[1].steps)  # the link stayed down from 0.7 s
    assert not any(s.faults for s in results[0].steps)
    jobs = load_jobs(tmp_path)
    assert jobs["mrc"].baseline_mean_s == jobs["mrc" + BASELINE_SUFFIX].step_mean_s
