"""An OCP MRC API program on the running fabric: ``mrc-testbed exec`` into two Mininet hosts in
different racks, the example's ping-pong and sweep across the switches, every byte checked.

The small fabric on the switch model (eight ``mrc-switch`` processes, tables pushed, four
agents), its state file in a temporary folder; skipped, saying why, where a fabric cannot be
built (root, Mininet, a fabric already running) or the OCP headers are absent.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from topologies import Fabric, load_topology
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
    fabric = Fabric(load_topology(shipped_topology("small")))
    for switch in fabric.switches:
        for port in switch.ports:
            if Path(f"/sys/class/net/{port.intf}").exists():
                return f"a fabric is already running here (interface {port.intf} exists)"
    return None


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The small fabric, up; yields its state file."""
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    if not (MRC_H_PATH / "mrc.h").is_file():
        pytest.skip(f"no OCP MRC API headers at {MRC_H_PATH} (set MRC_H_PATH)")
    from experiments.testbed import Testbed

    topology = load_topology(shipped_topology("small")).with_(link={"rate_mbps": 20, "delay_us": 0})
    state = tmp_path_factory.mktemp("testbed") / "state.json"
    tb = Testbed(topology, "model", state_path=state)
    try:
        tb.up()
        yield state
    finally:
        tb.down()


def test_example_across_the_fabric(running: Path, tmp_path: Path) -> None:
    subprocess.run(
        ["make", "-C", str(ROOT / "capi"), f"MRC_H_PATH={MRC_H_PATH}"],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    env = dict(os.environ, MRC_TESTBED_STATE=str(running))
    example = str(ROOT / "build" / "capi" / "mrc_pingpong")
    args = ["-r", str(tmp_path), "-i", "10", "-s", "131072", "-t", "200"]
    procs = {
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
                *args,
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
        for me, peer in (("h0", "h2"), ("h2", "h0"))
    }
    outs = {me: p.communicate(timeout=260)[0] for me, p in procs.items()}
    for me, proc in procs.items():
        assert proc.returncode == 0, f"{me}:\n{outs[me]}"
        assert f"{me}: done, every byte checked" in outs[me]
    assert outs["h0"].count("every byte checked by h2") == 6  # 4 KiB .. 128 KiB
