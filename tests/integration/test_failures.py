"""Failures as MRC sees them, on the emulated small fabric: an EV profile shared by two QPs (one
finds a failed path, the other never sends on it), STEV EVs spread by the switches' ECMP over
every uplink and recovering from a link failure, a host NIC going down retiring its plane's EVs
without a timeout, and an EV DENIED from the mrc-host command line carrying nothing.

Every test leaves the shared fabric as it found it (links up, EV format SRv6, EVs GOOD)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from .conftest import Wait, agent, all_good, core_stats, path_states, transfer

pytestmark = [pytest.mark.mininet, pytest.mark.slow]
FAILED = ("t0-p0-r0", "t1-p0-s0")  # rack 0's plane-0 uplink to spine 0


def tx_bytes(intf: str) -> int:
    """Bytes a switch interface (root namespace) sent."""
    with open(f"/sys/class/net/{intf}/statistics/tx_bytes") as f:
        return int(f.read())


def uplinks(testbed: Any, leaf: str) -> list[str]:
    return [p.intf for p in testbed.fabric.uplinks(leaf)]


def test_a_shared_profile_keeps_the_other_qp_off_a_failed_path(testbed: Any, wait: Wait) -> None:
    with agent(testbed, "h0") as c:
        profiles = c.request("ev-profiles")["profiles"]
    shared = [p for p in profiles.values() if p["qps"] == ["h2/mrc", "h2/no-trim-nack"]]
    assert len(shared) == 1
    testbed.link_down(*FAILED)
    try:
        # the no-trim-nack QP finds the failure (it loses packets on p0-s0)...
        transfer(testbed, "h0", "h2", 2 << 20, seed=51, policy="no-trim-nack")
        assert path_states(testbed, "h0", "h2", "no-trim-nack")["p0-s0"].get("assumed_bad")
        # ...and the mrc QP, which has never sent a packet, already avoids it
        assert path_states(testbed, "h0", "h2", "mrc")["p0-s0"].get("assumed_bad")
        before = core_stats(testbed, "h0")
        transfer(testbed, "h0", "h2", 2 << 20, seed=52, policy="mrc")
        after = core_stats(testbed, "h0")
        # nothing sent into the failure: no retransmission for a loss (SACK gap, lateness, ACK
        # timeout). Retransmissions of trimmed packets (NACKs) are congestion at the receiver's
        # 1-BDP queues, not the failed link, and are not losses.
        lost = {k: v for k, v in after["retransmits"].items() if k != "nack"}
        assert lost == {k: v for k, v in before["retransmits"].items() if k != "nack"}
        assert after["rtos"] == before["rtos"]
    finally:
        testbed.link_up(*FAILED)
    wait(all_good(testbed, "h0", "h2"), 60, "probes to reinstate p0-s0")


@contextmanager
def ev_format(testbed: Any, name: str) -> Iterator[None]:
    """Every agent sends with EV format ``name`` inside the block, SRv6 again after it."""
    hosts = [h.name for h in testbed.fabric.hosts]
    for host in hosts:
        with agent(testbed, host) as c:
            assert c.ev_format(name)["format"] == name
    try:
        yield
    finally:
        for host in hosts:
            with agent(testbed, host) as c:
                c.ev_format("srv6")


def every_uplink_carries_a_share(testbed: Any, size: int, seed: int) -> None:
    """A transfer of ``size`` bytes h0 -> h2 puts a real share on every uplink of rack 0: at
    least an eighth of an even share, which probes alone never reach. Shares are uneven by
    design: MRC steers by each path's congestion feedback, and a path the module's previous
    test failed and probes reinstated (p0-s0) ramps back up under that steering."""
    leaves = [f"t0-p{p}-r0" for p in range(testbed.fabric.topology.planes)]
    ports = [intf for leaf in leaves for intf in uplinks(testbed, leaf)]
    before = {intf: tx_bytes(intf) for intf in ports}
    transfer(testbed, "h0", "h2", size, seed=seed)
    sent = {intf: tx_bytes(intf) - before[intf] for intf in ports}
    for intf, n in sent.items():
        assert n > size // (8 * len(ports)), (intf, sent)


def test_stev_spraying_uses_every_uplink_and_survives_a_link_failure(
    testbed: Any, wait: Wait
) -> None:
    size = 4 << 20
    with ev_format(testbed, "stev"):
        # ECMP puts a real share on every uplink
        every_uplink_carries_a_share(testbed, size, seed=61)
        assert {s for table in path_states(testbed, "h0", "h2").values() for s in table} == {"good"}
        # a link failure: only the EVs the hash put on it are retired, one by one
        testbed.link_down(*FAILED)
        try:
            transfer(testbed, "h0", "h2", size, seed=62)
            table = path_states(testbed, "h0", "h2")
            assert table["p0-ecmp"].get("assumed_bad", 0) > 0
            assert table["p0-ecmp"].get("good", 0) > 0  # the other spine's EVs
            assert set(table["p1-ecmp"]) == {"good"}
        finally:
            testbed.link_up(*FAILED)
        wait(all_good(testbed, "h0", "h2"), 60, "probes to reinstate the retired EVs")


def test_srv6_with_an_srh_crosses_every_spine_and_survives_a_link_failure(
    testbed: Any, wait: Wait
) -> None:
    """SRV6 EVs with an SRH: the spine performs End on the reduced SRH, the data arrives intact
    over every spine, and a failed link retires its path's EVs only."""
    size = 4 << 20
    with ev_format(testbed, "srv6+srh"):
        # every path (spine) of every plane carries its share
        every_uplink_carries_a_share(testbed, size, seed=65)
        # connectionless probes with the same reduced SRH, one per path, all answered
        paths = testbed.fabric.paths("h0", "h2")
        requests = [
            {"req_id": i + 1, "peer": "h2", "plane": p.plane, "format": "srv6+srh",
             "ev": str(p.srh_carrier), "segment": str(p.srh_segment)}
            for i, p in enumerate(paths)
        ]  # fmt: skip
        with agent(testbed, "h0") as c:
            probed = c.request("ep-probe", requests=requests, timeout_ns=50_000_000)
        assert probed["complete"], probed
        assert sorted(r["req_id"] for r in probed["responses"]) == list(range(1, len(paths) + 1))
        testbed.link_down(*FAILED)
        try:
            # the failed path's probe goes unanswered (2 s of the emulation), the others not
            wait_ns = int(2.0 / testbed.fabric.topology.dilation * 1e9)
            with agent(testbed, "h0") as c:
                probed = c.request("ep-probe", requests=requests, timeout_ns=wait_ns)
            answered = {paths[r["req_id"] - 1].label for r in probed["responses"]}
            assert not probed["complete"]
            assert answered == {p.label for p in paths} - {"p0-s0"}, probed
            transfer(testbed, "h0", "h2", size, seed=66)
            table = path_states(testbed, "h0", "h2")
            assert table["p0-s0"].get("assumed_bad", 0) > 0
            others = {s for label, t in table.items() if label != "p0-s0" for s in t}
            assert others == {"good"}, table
        finally:
            testbed.link_up(*FAILED)
        wait(all_good(testbed, "h0", "h2"), 60, "probes to reinstate p0-s0")


def test_nic_down_retires_its_plane_without_a_timeout(testbed: Any, wait: Wait) -> None:
    transfer(testbed, "h0", "h2", 1 << 16, seed=70)  # h0 tells the peers it talks to
    with agent(testbed, "h0") as c:
        since = c.ev_events()["last"]
    rtos = core_stats(testbed, "h0")["rtos"]
    testbed.link_down("h0", "t0-p0-r0")
    try:
        wait(
            lambda: all(
                set(s) == {"assumed_bad"}
                for label, s in path_states(testbed, "h0", "h2").items()
                if label.startswith("p0")
            ),
            10,
            "h0's plane-0 EVs to be retired by the port status",
        )
        with agent(testbed, "h0") as c:
            reasons = {e["reason"] for e in c.ev_events(since)["events"]}
        assert "port_down" in reasons and not reasons & {"rto", "sack", "late"}
        # the peer was told: h2 stops sending to h0's plane-0 NIC
        wait(
            lambda: all(
                s.get("assumed_bad")
                for label, s in path_states(testbed, "h2", "h0").items()
                if label.startswith("p0")
            ),
            10,
            "h2 to retire its EVs towards h0's plane 0",
        )
        transfer(testbed, "h0", "h2", 1 << 20, seed=71)
        assert core_stats(testbed, "h0")["rtos"] == rtos
    finally:
        testbed.link_up("h0", "t0-p0-r0")
    wait(all_good(testbed, "h0", "h2"), 60, "h0's plane 0 to come back through probes")
    wait(all_good(testbed, "h2", "h0"), 60, "h2's EVs towards h0's plane 0 to come back")


def test_an_ev_denied_from_the_command_line_carries_nothing(testbed: Any, wait: Wait) -> None:
    def cli(*args: str) -> None:
        done = subprocess.run(
            [sys.executable, "-m", "host.agent.cli", "set-ev", "--control",
             str(testbed.control_path("h0")), "--peer", "h2", *args],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr

    cli("--path", "p1-s1", "DENIED")
    try:
        assert path_states(testbed, "h0", "h2")["p1-s1"] == {"denied": 32}
        up = uplinks(testbed, "t0-p1-r0")
        before = {intf: tx_bytes(intf) for intf in up}
        size = 2 << 20
        transfer(testbed, "h0", "h2", size, seed=81)
        sent = {intf: tx_bytes(intf) - before[intf] for intf in up}
        assert sent[up[1]] < 4096, sent  # spine 1 of plane 1: not one data packet
        assert sent[up[0]] > size // 8, sent
    finally:
        cli("--path", "p1-s1", "UNKNOWN")
    wait(all_good(testbed, "h0", "h2"), 60, "p1-s1 to be probed back to GOOD")
