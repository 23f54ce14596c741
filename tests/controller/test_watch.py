"""How often ``mrc-ctl watch`` looks at a switch: a fabric of any size gets a bounded number of
table reads a second, and an unreachable switch is tried again soon whatever the interval
(tests/controller/test_push.py runs the watch against live switches)."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from controller.p4info import P4Info
from controller.push import PushOptions, SwitchAddress
from controller.watch import MIN_INTERVAL_S, READS_PER_S, RETRY_S, SwitchWatch, default_interval


def test_the_interval_grows_with_the_fabric_so_reads_a_second_stay_bounded() -> None:
    assert default_interval(1) == default_interval(4) == MIN_INTERVAL_S
    for switches in (8, 16, 32, 64):
        interval = default_interval(switches)
        assert switches / interval == pytest.approx(READS_PER_S)
    assert default_interval(32) == 4.0  # MRC's eight planes


def test_an_unreachable_switch_is_retried_at_the_retry_pace_not_the_interval() -> None:
    with socket.socket() as probe:  # a loopback port nothing serves
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    watch = SwitchWatch(
        SwitchAddress("t0-p0-r0", f"127.0.0.1:{port}", 1),
        P4Info.load(),
        lambda: {},
        PushOptions(timeout=0.2),
    )
    stop = threading.Event()
    thread = threading.Thread(target=watch.run, args=(stop, 60.0))
    thread.start()
    try:
        deadline = time.monotonic() + 10 * RETRY_S
        while watch.checks < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        watch.wake.set()
        thread.join(timeout=10)
    assert watch.reachable is False
    assert watch.checks >= 3  # within seconds, where the 60 s interval would have allowed one
