"""The C ring all-reduce (``capi/examples/mrc_allreduce.c``) on the four hosts of the small
fabric: ``mrc-testbed exec`` runs one rank on every host, the ranks write WRITE_IMMs to their
ring neighbours across the switches, and each checks the reduced values of every iteration.

The fabric is the one of ``test_ocp_fabric.py`` (the switch model, needs root and Mininet; the
same reasons to skip).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_ocp_fabric import ROOT, running  # noqa: F401 -- the fabric fixture

pytestmark = [pytest.mark.netns, pytest.mark.mininet, pytest.mark.slow]

RANKS = ("h0", "h1", "h2", "h3")


def test_ring_allreduce_on_four_hosts(running: Any, tmp_path: Path) -> None:  # noqa: F811
    example = str(ROOT / "build" / "capi" / "mrc_allreduce")
    count, iters = 65536, 3  # 256 KiB of floats per rank, 64 KiB chunks
    ring = ",".join(RANKS)
    options = ["-H", ring, "-r", str(tmp_path), "-c", str(count), "-i", str(iters), "-t", "200"]
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
    for host, proc in procs.items():
        assert proc.returncode == 0, f"{host}:\n{outs[host]}"
        assert f"{host}: done, reduced values checked" in outs[host], outs[host]
        lines = [line for line in outs[host].splitlines() if "allreduce 262144 B" in line]
        assert len(lines) == iters, outs[host]
        assert all("busbw" in line for line in lines)
