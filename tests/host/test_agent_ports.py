"""Two agents back to back in network namespaces (root): a NIC whose link goes down has its
plane's EVs retired at once (no loss, no timeout) and the peer told by a port status update;
it comes back through probes; EV probes through the ep-probe command."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from support.fabric import SMALL_TOPOLOGY
from support.hostnet import agents_running, intact_write, skip_without_netns

from experiments.hostnets import BackToBack
from host.agent.control_client import ControlClient, ControlError
from topologies import Fabric

pytestmark = pytest.mark.netns

skip_without_netns()


@pytest.fixture(scope="module")
def net(fabric: Fabric, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BackToBack]:
    work = tmp_path_factory.mktemp("ports")
    yield from agents_running(
        BackToBack(fabric, SMALL_TOPOLOGY, ("h0", "h1"), prefix="ap", workdir=work)
    )


def wait_for(check: Any, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError("timed out")


def plane_states(client: ControlClient, peer: str, label: str) -> dict[str, int]:
    return dict(client.paths(peer)["paths"][peer]["paths"][label]["states"])


def test_nic_down_retires_the_plane_at_once_and_tells_the_peer(net: BackToBack) -> None:
    with net.client("h0") as h0, net.client("h1") as h1:
        # the hosts talk first: a host tells the peers it talks to
        region = h1.register("before", 1 << 16)
        t = h0.transfer("h1", region["addr"], region["rkey"], 1 << 16, seed=40)
        assert h0.wait([t["transfer"]], timeout=60)["failed"] == []
        since0 = h0.ev_events()["last"]
        since1 = h1.ev_events()["last"]
        net.run("h0", ["ip", "link", "set", "h0-p0", "down"])
        try:
            events = wait_for(
                lambda: [e for e in h0.ev_events(since0)["events"] if e["reason"] == "port_down"]
            )
            # no transfer runs: the link state alone retired the plane, nothing was lost
            assert {e["plane"] for e in events} == {0} and {e["new"] for e in events} == {
                "assumed_bad"
            }
            assert plane_states(h0, "h1", "p0") == {"assumed_bad": 64}
            assert plane_states(h0, "h1", "p1") == {"good": 64}
            # the peer heard it through plane 1 and stopped using our plane 0 as well
            peer = wait_for(
                lambda: [
                    e for e in h1.ev_events(since1)["events"] if e["reason"] == "peer_port_down"
                ]
            )
            assert {e["plane"] for e in peer} == {0}
            assert h0.stats()["stats"]["core"]["rtos"] == 0
            # data still moves, on plane 1
            intact_write(h0, h1, "h1", "ports", 1 << 20, seed=41, timeout=60)
        finally:
            net.run("h0", ["ip", "link", "set", "h0-p0", "up"])
        # back through probes, on both sides
        wait_for(lambda: plane_states(h0, "h1", "p0") == {"good": 64}, timeout=20)
        wait_for(lambda: plane_states(h1, "h0", "p0") == {"good": 64}, timeout=20)
        reasons = [e["reason"] for e in h0.ev_events(since0)["events"]]
        assert "port_up" in reasons and "probe_reply" in reasons


def test_ev_probes_through_the_control_interface(net: BackToBack, fabric: Fabric) -> None:
    with net.client("h0") as h0:
        reply = h0.request(
            "ep-probe",
            requests=[
                {"req_id": 1, "peer": "h1", "plane": 0, "ev": 0x12345, "format": "stev"},
                {"req_id": 2, "peer": "h1", "plane": 1, "ev": 7, "format": "udp"},
                {"req_id": 3, "sgid": str(fabric.host("h0").nic(1).address),
                 "dgid": str(fabric.host("h1").nic(1).address), "ev": 9},
            ],
            dscp=46,
            timeout_ns=20_000_000,
        )  # fmt: skip
        assert reply["complete"], reply
        by_id = {r["req_id"]: r for r in reply["responses"]}
        assert set(by_id) == {1, 2, 3}
        assert by_id[1]["port"] == 1 and by_id[2]["port"] == 2
        assert all(r["rtt"] > 0 and r["adj_svc_time"] for r in by_id.values())
        with pytest.raises(ControlError) as err:
            h0.request("ep-probe", requests=[{"req_id": 1, "peer": "h9", "ev": 1}])
        assert err.value.field == "requests[0].peer"


def test_command_line_probe_format_and_events(net: BackToBack) -> None:
    def cli(*args: str) -> dict[str, Any]:
        done = subprocess.run(
            [sys.executable, "-m", "host.agent.cli", *args, "--control", str(net.control("h0"))],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        reply: dict[str, Any] = json.loads(done.stdout)
        return reply

    probed = cli("probe", "--peer", "h1", "--plane", "1", "0x1234", "0x5678")
    assert probed["complete"] and [r["port"] for r in probed["responses"]] == [2, 2]
    assert cli("ev-format", "stev", "--fields", "16", "16")["fields"] == [16, 16]
    assert cli("ev-format")["format"] == "stev"
    assert cli("ev-format", "srv6")["format"] == "srv6"
    profiles = cli("ev-profiles")["profiles"]
    assert any(p["qps"] == ["h1/mrc", "h1/no-trim-nack"] for p in profiles.values())
    assert "events" in cli("ev-events", "--since", "0")
