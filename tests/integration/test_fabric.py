"""MRC over the emulated fabric: transfers, link failure, incast trimming, switch reboot.

Every test uses the shared small fabric (switchmodel target) of conftest.py and leaves it as it
found it. Waits are bounded (they fail naming what did not happen), never timed assertions.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from .conftest import Wait, agent, core_stats, path_states

pytestmark = [pytest.mark.mininet, pytest.mark.slow]


def plane_tx_bytes(testbed: Any, host: str) -> dict[int, int]:
    node = testbed.host(host)
    return {
        nic.plane: int(node.cmd(f"cat /sys/class/net/{nic.intf}/statistics/tx_bytes"))
        for nic in testbed.fabric.host(host).nics
    }


def start_transfer(
    testbed: Any, src: str, dst: str, size: int, seed: int, region: str
) -> tuple[Any, int]:
    with agent(testbed, dst) as rx:
        mr = rx.register(region, size)
    c = agent(testbed, src)
    tx = c.__enter__()
    reply = tx.transfer(dst, mr["addr"], mr["rkey"], size, seed=seed)
    return (c, tx), int(reply["transfer"])


def placed_an_eighth(testbed: Any, dst: str, size: int) -> Callable[[], bool]:
    """A condition for ``wait``: ``dst`` has placed an eighth of ``size`` more bytes than now
    (call it before the transfer starts)."""
    placed0 = core_stats(testbed, dst)["payload_bytes_placed"]
    return lambda: core_stats(testbed, dst)["payload_bytes_placed"] > placed0 + size // 8


def finish_transfer(handle: Any, transfer: int, timeout: float = 90.0) -> dict[str, Any]:
    c, tx = handle
    try:
        reply: dict[str, Any] = tx.wait([transfer], timeout=timeout)
    finally:
        c.__exit__(None, None, None)
    return reply


def test_transfer_between_racks_arrives_intact_on_every_plane(testbed: Any) -> None:
    fabric = testbed.fabric
    src, dst = "h0", "h2"
    assert fabric.host(src).rack != fabric.host(dst).rack
    before = plane_tx_bytes(testbed, src)
    size = 2 << 20
    handle, transfer = start_transfer(testbed, src, dst, size, seed=7, region="intact")
    assert finish_transfer(handle, transfer)["complete"]
    with agent(testbed, dst) as rx:
        assert rx.verify("intact", size=size, seed=7)["match"]
    after = plane_tx_bytes(testbed, src)
    for plane in range(fabric.topology.planes):
        # Every plane carried a real share of the data, not just a probe or two.
        assert after[plane] - before[plane] > size // (4 * fabric.topology.planes), plane


def test_link_failure_mid_transfer(testbed: Any, wait: Wait) -> None:
    src, dst = "h1", "h3"
    link = ("t0-p0-r0", "t1-p0-s0")  # h1 sits in rack 0: its p0-s0 paths cross this link
    size = 6 << 20
    going = placed_an_eighth(testbed, dst, size)
    handle, transfer = start_transfer(testbed, src, dst, size, seed=11, region="failover")
    try:
        wait(going, 30, "the transfer to get going")
        testbed.link_down(*link)
        wait(
            lambda: path_states(testbed, src, dst)["p0-s0"].get("assumed_bad", 0) > 0,
            30,
            "EVs on the failed path p0-s0 to go ASSUMED_BAD",
        )
        reply = finish_transfer(handle, transfer)
        assert reply["complete"]
        states = path_states(testbed, src, dst)
        assert states["p0-s0"].get("good", 0) == 0 or states["p0-s0"].get("assumed_bad", 0) > 0
        # Paths that avoid the failed link stay usable.
        assert states["p1-s0"].get("good", 0) > 0
    finally:
        testbed.link_up(*link)
    with agent(testbed, dst) as rx:
        assert rx.verify("failover", size=size, seed=11)["match"]
    wait(
        lambda: path_states(testbed, src, dst)["p0-s0"].get("assumed_bad", 0) == 0,
        60,
        "the probes to bring the repaired path p0-s0 back to GOOD",
    )
    assert path_states(testbed, src, dst)["p0-s0"].get("good", 0) > 0


def test_incast_trims_and_nacks_without_rto(testbed: Any) -> None:
    receiver, senders = "h0", ["h1", "h2", "h3"]
    size = 3 << 20
    # Trim early on the receiver's ports (before ECN marks slow the senders down), so the
    # incast exercises trimming, not only congestion control.
    for nic in testbed.fabric.host(receiver).nics:
        testbed.set_qos(nic.switch, trim=2, ecn=8, port=nic.switch_port)
    try:
        check_incast(testbed, receiver, senders, size)
    finally:
        testbed.reset_qos()


def check_incast(testbed: Any, receiver: str, senders: list[str], size: int) -> None:
    from experiments.runner import counter_rows

    def trimmed() -> int:
        return sum(c["trimmed"] for c in counter_rows(testbed.control.counters()).values())

    trims_before = trimmed()
    before = {h: core_stats(testbed, h) for h in senders}
    handles = [
        start_transfer(testbed, s, receiver, size, seed=20 + i, region=f"incast{i}")
        for i, s in enumerate(senders)
    ]
    replies: list[dict[str, Any]] = [{}] * len(handles)

    def finish(i: int) -> None:
        replies[i] = finish_transfer(*handles[i])

    threads = [threading.Thread(target=finish, args=(i,)) for i in range(len(handles))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(r.get("complete") for r in replies), replies
    with agent(testbed, receiver) as rx:
        for i in range(len(senders)):
            assert rx.verify(f"incast{i}", size=size, seed=20 + i)["match"]
    trims = trimmed() - trims_before
    after = {h: core_stats(testbed, h) for h in senders}
    nacks = sum(after[h]["nacks_received"] - before[h]["nacks_received"] for h in senders)
    rtos = sum(after[h]["rtos"] - before[h]["rtos"] for h in senders)
    assert trims > 0, "the receiver's leaf should have trimmed under a 3:1 incast"
    assert nacks > 0, "the senders should have received NACKs for trimmed packets"
    assert rtos == 0


def test_switch_reboot_is_restored_by_watch(testbed: Any, wait: Wait) -> None:
    src, dst = "h2", "h0"
    spine = "t1-p1-s0"
    size = 6 << 20
    going = placed_an_eighth(testbed, dst, size)
    handle, transfer = start_transfer(testbed, src, dst, size, seed=31, region="reboot")
    try:
        wait(going, 30, "the transfer to get going")
        testbed.kill_switch(spine)
        testbed.start_switch(spine)

        def in_sync() -> bool:  # False until watch has re-installed everything
            return bool(testbed.control.in_sync(spine))

        wait(in_sync, 30, f"mrc-ctl watch to re-install the tables of {spine}")
        assert finish_transfer(handle, transfer)["complete"]
    finally:
        if not testbed.switch(spine).process.alive:
            testbed.start_switch(spine)
    with agent(testbed, dst) as rx:
        assert rx.verify("reboot", size=size, seed=31)["match"]
