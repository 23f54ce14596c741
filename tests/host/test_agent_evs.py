"""The agent's EV controls without root: EV formats (ev-format), EV profiles shared by the QPs of
the failover policies (ev-profiles), operator states through set-ev reaching every QP of a
profile, and EV events naming the profile (ev-events)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from host.agent.control import ControlServer
from topologies import Fabric


@pytest.fixture
def agent_server(fabric: Fabric, tmp_path: Path) -> Iterator[tuple[Any, Any]]:
    from host.agent.agent import Agent, AgentOptions
    from host.agent.commands import Commands

    agent = Agent(fabric, AgentOptions(host="h0", control=tmp_path / "h0.sock", ev_count=8))
    server = ControlServer(tmp_path / "h0.sock", Commands(agent).handle)

    def ask(cmd: str, **fields: Any) -> dict[str, Any]:
        reply, _ = server.dispatch(json.dumps({"cmd": cmd, **fields}).encode())
        assert isinstance(reply, dict)
        return reply

    yield agent, ask
    server.close()


def test_failover_qps_of_a_peer_share_one_profile(agent_server: tuple[Any, Any]) -> None:
    agent, ask = agent_server
    mrc, other = agent.qps[("h2", "mrc")], agent.qps[("h2", "no-trim-nack")]
    assert mrc.ev_profile is other.ev_profile
    assert agent.qps[("h2", "single-path")].ev_profile is not mrc.ev_profile
    assert agent.qps[("h1", "mrc")].ev_profile is not mrc.ev_profile
    profiles = ask("ev-profiles")["profiles"]
    shared = profiles[str(mrc.ev_profile.profile_id)]
    assert shared["qps"] == ["h2/mrc", "h2/no-trim-nack"] and shared["format"] == "srv6"
    # DENY from the control interface: the other QP of the profile stops using the path too
    reply = ask("set-ev", peer="h2", path="p0-s1", state="DENIED")
    assert reply["ok"] and reply["evs"] == 2
    denied = {s.ev for s in other.ev_table.slots if s.state.value == "denied"}
    assert len(denied) == 2 and {s.path.label for s in other.ev_table.slots if s.ev in denied} == {
        "p0-s1"
    }
    events = ask("ev-events")
    assert [e["new"] for e in events["events"]] == ["denied", "denied"]
    assert {e["profile"] for e in events["events"]} == {mrc.ev_profile.profile_id}
    assert ask("ev-events", since=events["last"])["events"] == []
    assert ask("set-ev", peer="h2", path="p0-s1", state="UNKNOWN")["ok"]
    assert ask("ev-events", since=events["last"])["events"][0]["old"] == "denied"


def test_ev_format_rebuilds_the_qps(agent_server: tuple[Any, Any]) -> None:
    agent, ask = agent_server
    numbers = {key: qp.qpn for key, qp in agent.qps.items()}
    assert ask("ev-format") == {"ok": True, "format": "srv6", "fields": [128]}
    reply = ask("ev-format", format="STEV", fields=[8, 4, 4])
    assert reply == {"ok": True, "format": "stev", "fields": [8, 4, 4]}
    assert {key: qp.qpn for key, qp in agent.qps.items()} == numbers
    qp = agent.qps[("h2", "mrc")]
    dst = {s.dst for s in qp.ev_table.slots}
    assert dst == {agent.fabric.host("h2").nic(p).address for p in (0, 1)}
    assert {s.label for s in qp.ev_table.slots} == {"p0-ecmp", "p1-ecmp"}
    paths = ask("paths", peer="h2")["paths"]["h2"]["paths"]
    assert set(paths) == {"p0-ecmp", "p1-ecmp"}
    bad = ask("ev-format", format="stev", fields=[20, 20])
    assert not bad["ok"] and bad["field"] == "fields" and "at most 32 bits" in bad["error"]
    bad = ask("ev-format", format="vxlan")
    assert not bad["ok"] and bad["field"] == "format"
    assert ask("ev-format", format="udp")["fields"] == [16]


def test_ev_format_srv6_with_an_srh(agent_server: tuple[Any, Any]) -> None:
    agent, ask = agent_server
    reply = ask("ev-format", format="SRV6+SRH")
    assert reply == {"ok": True, "format": "srv6+srh", "fields": [128, 128]}
    qp = agent.qps[("h2", "mrc")]
    paths = agent.fabric.paths(agent.host.name, "h2")
    assert {(s.dst, s.srh) for s in qp.ev_table.slots} == {
        (p.srh_carrier, p.srh_segment) for p in paths
    }
    assert all(len(s.prefix) == 58 + 24 for s in qp.ev_table.slots)
    assert ask("ev-format", format="srv6+srh", fields=[128, 96])["fields"] == [128, 96]
    bad = ask("ev-format", format="srv6", fields=[128, 96])
    assert not bad["ok"] and bad["field"] == "fields" and "up to 256" in bad["error"]
    assert ask("ev-format", format="srv6")["format"] == "srv6"
    assert all(s.srh is None for s in agent.qps[("h2", "mrc")].ev_table.slots)
