"""Pictures of the fabric: ``topo draw`` for the shipped topologies and ``fabric.png`` of a
results folder, with per-port counters (links coloured) and without (an older folder)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.fabric import small_fabric

from experiments import cli
from experiments.fabric_plot import LinkLoad, failed_links, link_key, link_loads
from experiments.metrics import FaultMark, TransportResult
from experiments.results import load_raw, render, write_raw
from topologies import Fabric, load_topology
from topologies.config import shipped_topology

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("name", ["small", "default", "mrc8"])
def test_topo_draw_png_and_svg(
    tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    fabric = Fabric(load_topology(shipped_topology(name)))
    png, svg = tmp_path / f"{name}.png", tmp_path / f"{name}.svg"
    assert cli.main(["topo", "draw", name, "--out", str(png)]) == 0
    assert str(png) in capsys.readouterr().out
    assert cli.main(["topo", "draw", str(shipped_topology(name)), "--out", str(svg)]) == 0
    assert png.read_bytes()[:8] == PNG_MAGIC and png.stat().st_size > 20_000
    text = svg.read_text()
    for switch in fabric.switches:
        assert switch.name in text, switch.name
    for host in fabric.hosts:
        for nic in host.nics:
            assert nic.intf in text, nic.intf


def test_topo_draw_refuses_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["topo", "draw", "small", "--out", str(tmp_path / "f.jpg")]) == 2
    assert "f.jpg: expected a file name ending in .png or .svg" in capsys.readouterr().err
    assert cli.main(["topo", "draw", "no-such-fabric"]) == 1
    assert "no-such-fabric: no such file" in capsys.readouterr().err


def _result(fabric: Fabric, with_ports: bool) -> TransportResult:
    r = TransportResult(name="mrc", kind="mrc", duration=2.0, flows=[("h0", "h2")])
    r.faults = [FaultMark(0.5, "down", "t0-p0-r0 <-> t1-p0-s0")]
    r.switches = {"t0-p0-r0": {"trimmed": 3, "ecn_marked": 7, "drops": 0}}
    if with_ports:
        rate_bytes = fabric.topology.link_rate_mbps * 1e6 / 8
        # t0-p0-r0 port 4 (to t1-p0-s1) busy half the run; port 1 (to h0) receives a quarter
        r.ports = {
            "t0-p0-r0": {
                "tx/4": int(rate_bytes * 2.0 * 0.5),
                "rx/4": 0,
                "rx/1": int(rate_bytes * 0.5),
            },
        }
    return r


def test_link_loads_from_port_counters() -> None:
    fabric = small_fabric()
    r = _result(fabric, True)
    loads = link_loads(fabric, r.ports, failed_links([(m.action, m.target) for m in r.faults]), 2.0)
    assert loads[link_key("t0-p0-r0", "t1-p0-s1")].utilisation == pytest.approx(0.5)
    assert loads[link_key("h0", "t0-p0-r0")].utilisation == pytest.approx(0.25)
    assert loads[link_key("t0-p0-r0", "t1-p0-s0")].failed
    assert loads[link_key("t0-p1-r0", "t1-p1-s0")] == LinkLoad(None, False)


@pytest.mark.parametrize("with_ports", [True, False], ids=["port-counters", "older-folder"])
def test_results_folder_gets_fabric_png(tmp_path: Path, with_ports: bool) -> None:
    fabric = small_fabric()
    write_raw(
        tmp_path,
        {"name": "pictures"},
        fabric.topology.as_dict(),
        0.1,
        [_result(fabric, with_ports)],
    )
    if not with_ports:
        (tmp_path / "ports.csv").unlink()  # as a folder written before ports were recorded
    render(tmp_path)
    picture = tmp_path / "fabric.png"
    assert picture.read_bytes()[:8] == PNG_MAGIC and picture.stat().st_size > 20_000
    _, _, results = load_raw(tmp_path)
    assert bool(results[0].ports) is with_ports
