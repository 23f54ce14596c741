"""An OCP MRC API program on the running fabric: ``mrc-testbed exec`` into two Mininet hosts in
different racks, the example's ping-pong and sweep across the switches, every byte checked, also
while a leaf-spine link on their paths fails mid-transfer.

The small fabric on the switch model (eight ``mrc-switch`` processes, tables pushed, four
agents), its state file in a temporary folder; skipped, saying why, where a fabric cannot be
built (root, Mininet, a fabric already running) or the OCP headers are absent.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.fabric import small_fabric

from topologies import load_topology
from topologies.config import shipped_topology

ROOT = Path(__file__).resolve().parents[2]
MRC_H_PATH = Path(os.environ.get("MRC_H_PATH", str(ROOT.parent / "shared" / "ocp-mrc")))

pytestmark = pytest.mark.netns


def skip_reason() -> str | None:
    """Why the small fabric cannot be built here, or None."""
    if os.geteuid() != 0:
        return "needs root (Mininet, network namespaces, AF_PACKET)"
    if shutil.which("mnexec") is None:
        return "needs Mininet (mnexec not on PATH; apt install mininet)"
    fabric = small_fabric()
    for switch in fabric.switches:
        for port in switch.ports:
            if Path(f"/sys/class/net/{port.intf}").exists():
                return f"a fabric is already running here (interface {port.intf} exists)"
    return None


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The small fabric, up, with the example built; yields its :class:`Testbed`."""
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    if not (MRC_H_PATH / "mrc.h").is_file():
        pytest.skip(f"no OCP MRC API headers at {MRC_H_PATH} (set MRC_H_PATH)")
    from experiments.testbed import Testbed

    subprocess.run(
        ["make", "-C", str(ROOT / "capi"), f"MRC_H_PATH={MRC_H_PATH}"],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    topology = load_topology(shipped_topology("small")).with_(link={"rate_mbps": 20, "delay_us": 0})
    state = tmp_path_factory.mktemp("testbed") / "state.json"
    tb = Testbed(topology, "model", state_path=state)
    try:
        tb.up()
        yield tb
    finally:
        tb.down()


def start_pair(tb: Any, rendezvous: Path, *args: str) -> dict[str, subprocess.Popen[str]]:
    """The example on h0 (rack 0) and h2 (rack 1) through ``mrc-testbed exec``."""
    example = str(ROOT / "build" / "capi" / "mrc_pingpong")
    return {
        me: subprocess.Popen(
            [
                sys.executable,
                "-m",
                "experiments.cli",
                "exec",
                me,
                "--",
                example,
                "-n",
                me,
                "-p",
                peer,
                "-r",
                str(rendezvous),
                *args,
            ],
            cwd=ROOT,
            env=tb.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
        for me, peer in (("h0", "h2"), ("h2", "h0"))
    }


def finish(procs: dict[str, subprocess.Popen[str]], outs: dict[str, str]) -> None:
    """Wait for both ends; each must have checked every byte."""
    for me, proc in procs.items():
        outs[me] = outs.get(me, "") + proc.communicate(timeout=260)[0]
    for me, proc in procs.items():
        assert proc.returncode == 0, f"{me}:\n{outs[me]}"
        assert f"{me}: done, every byte checked" in outs[me], outs[me]


def test_example_across_the_fabric(running: Any, tmp_path: Path) -> None:
    procs = start_pair(running, tmp_path, "-i", "10", "-s", "131072", "-t", "200")
    outs: dict[str, str] = {}
    finish(procs, outs)
    assert outs["h0"].count("every byte checked by h2") == 6  # 4 KiB .. 128 KiB


def test_example_survives_a_link_failure_mid_transfer(running: Any, tmp_path: Path) -> None:
    """h0's leaf loses its link to plane 0's first spine while the sweep moves 8 MiB; the
    agents fail the EVs of that link over and the example still checks every byte."""
    procs = start_pair(running, tmp_path, "-i", "5", "-s", "1048576", "-v", "1048576", "-t", "200")
    outs: dict[str, str] = {}
    stdout = procs["h0"].stdout
    assert stdout is not None
    lines: list[str] = []
    seen = threading.Event()

    def read() -> None:
        for line in stdout:
            lines.append(line)
            if "sweep" in line:
                seen.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    link = ("t0-p0-r0", "t1-p0-s0")
    assert seen.wait(120), "".join(lines)
    running.link_down(*link)
    before = sum("every byte checked by h2" in line for line in lines)
    try:
        procs["h0"].wait(timeout=260)
    finally:
        running.link_up(*link)
    reader.join(timeout=10)
    outs["h0"] = "".join(lines)
    finish(procs, outs)
    assert outs["h0"].count("every byte checked by h2") == 9, outs["h0"]  # 4 KiB .. 1 MiB
    assert before < 9, "the link failed only after the transfer"
    # h0 found the failure itself: EVs through plane 0's first spine left GOOD.
    from host.agent.control_client import ControlClient

    with ControlClient(running.control_path("h0"), timeout=10.0) as client:
        events = client.request("ev-events")["events"]
    retired = [e for e in events if e["old"] == "good" and e["new"] == "assumed_bad"]
    assert retired, events
    assert {e["path"] for e in retired} == {"p0-s0"}, [
        (e["path"], e["reason"], round(e["time"], 4), e["ev"]) for e in events
    ]  # and no path where nothing failed
