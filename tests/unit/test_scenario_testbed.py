"""Pieces of the testbed that need no root: target choice, topology file, kernel routes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support.fabric import small_fabric

from experiments.flows.kernel import host_commands, undo_commands
from experiments.testbed import write_topology
from topologies import Fabric, load_topology

mininet = pytest.importorskip("mininet.net", reason="Mininet's Python package is not installed")


@pytest.fixture(scope="module")
def fabric() -> Fabric:
    return small_fabric()


def test_choose_target() -> None:
    from targets.factory import TargetUnavailable, choose_target

    has_bmv2 = bool(shutil.which("simple_switch_grpc") and shutil.which("simple_switch_CLI"))
    assert choose_target("auto") == ("bmv2" if has_bmv2 else "model")
    assert choose_target("model") == "model"
    with pytest.raises(ValueError, match="expected one of auto, bmv2, model"):
        choose_target("ovs")
    if not has_bmv2:
        with pytest.raises(TargetUnavailable, match="simple_switch_grpc"):
            choose_target("bmv2")


def test_effective_topology_round_trips(tmp_path: Path, fabric: Fabric) -> None:
    changed = fabric.topology.with_(link={"rate_mbps": 10, "delay_us": 0})
    loaded = load_topology(write_topology(changed, tmp_path / "topology.yaml"))
    assert loaded.as_dict() == changed.as_dict()


def test_kernel_routes_follow_the_fabric_paths(fabric: Fabric) -> None:
    cmds = host_commands(fabric, "h0", mptcp=False)
    h0 = fabric.host("h0")
    for nic in h0.nics:
        assert f"ip -6 addr add {nic.address}/128 dev {nic.intf} nodad" in cmds
    for peer in ("h1", "h2", "h3"):
        for plane in range(fabric.topology.planes):
            path = next(p for p in fabric.paths("h0", peer) if p.plane == plane)
            nic = h0.nic(plane)
            dst = fabric.host(peer).nic(plane).address
            route = [c for c in cmds if c.startswith(f"ip -6 route replace {dst}/128 ")]
            assert len(route) == 1
            assert f"encap seg6 mode inline segs {path.carrier} dev {nic.intf}" in route[0]
            assert (
                f"ip -6 neigh replace {path.carrier} lladdr {nic.gateway_mac} "
                f"dev {nic.intf} nud permanent"
            ) in cmds
    assert not any("mptcp" in c for c in cmds)


def test_mptcp_announces_the_other_planes(fabric: Fabric) -> None:
    cmds = host_commands(fabric, "h2", mptcp=True)
    h2 = fabric.host("h2")
    signals = [c for c in cmds if c.startswith("ip mptcp endpoint add")]
    assert signals == [
        f"ip mptcp endpoint add {nic.address} dev {nic.intf} signal" for nic in h2.nics[1:]
    ]
    undo = undo_commands(fabric, "h2")
    assert "ip mptcp endpoint flush" in undo
    assert all(f"net.ipv6.conf.{nic.intf}.disable_ipv6=1" in " ".join(undo) for nic in h2.nics)


def test_path_summary_of_an_agent_reply() -> None:
    from experiments.mncli import summarise_paths

    reply = {
        "h2": {
            "qpn": 256,
            "paths": {"p0-s0": {"plane": 0, "evs": 32, "states": {"good": 30, "assumed_bad": 2}}},
            "evs": [],
        }
    }
    assert summarise_paths(reply) == {"h2": {"p0-s0": {"good": 30, "assumed_bad": 2}}}
    assert summarise_paths("nonsense") == {}
