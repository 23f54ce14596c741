"""``mrc-testbed topo``: tables, paths, scale and errors as a user sees them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from topologies.config import shipped_topology


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "experiments.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[2],
    )


def test_show_lists_nodes_ports_and_addresses() -> None:
    result = run("topo", "show", str(shipped_topology("small")))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "8 switches" in out and "4 hosts x 2 NICs" in out
    assert "t1-p1-s1" in out and "h3-p1" in out
    assert "fcbb:bb00:1c03::" in out  # h3's NIC on plane 1
    assert "t0-p0-r0-eth3" in out


def test_paths_prints_every_carrier() -> None:
    result = run("topo", "paths", str(shipped_topology("default")), "h0", "h3")
    assert result.returncode == 0, result.stderr
    assert "8 paths h0 -> h3" in result.stdout
    assert "fcbb:bb00:3801:3401:3c03::" in result.stdout  # plane 3, spine 1


def test_scale_headline() -> None:
    result = run("topo", "scale", "--radix", "512", "--planes", "8")
    assert result.returncode == 0, result.stderr
    assert "131,072 hosts in two tiers" in result.stdout
    assert "needs 4 tiers" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("topo", "show", "/nonexistent/x.yaml"), "no such file"),
        (("topo", "paths", "SMALL", "h0", "h9"), "no host 'h9'"),
        (("topo", "scale", "--radix", "7", "--planes", "1"), "even number"),
    ],
)
def test_errors_are_one_line(args: tuple[str, ...], message: str) -> None:
    args = tuple(str(shipped_topology("small")) if a == "SMALL" else a for a in args)
    result = run(*args)
    assert result.returncode == 1
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
