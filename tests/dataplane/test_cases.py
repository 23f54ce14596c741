"""Every case of the case table against every target: exact frames out, or the counted drop."""

from __future__ import annotations

import time

import pytest

from .cases import Case, all_cases
from .packets import describe
from .target import DataplaneTarget

OUT_TIMEOUT = 3.0  # longest wait for an expected frame
QUIET = 0.1  # how long a port must stay silent after the case
COUNTER_WAIT = 3.0  # longest wait for the counters to reach the expected values


def counter_deltas(
    target: DataplaneTarget,
    before: dict[str, dict[int, tuple[int, int]]],
    wanted: dict[tuple[str, int], int],
) -> dict[tuple[str, int], int]:
    """Packet deltas of the ``wanted`` cells, once they reached their values (bounded wait)."""
    deadline = time.monotonic() + COUNTER_WAIT
    while True:
        now = {name: target.counters(name) for name in before}
        deltas = {
            (name, index): now[name].get(index, (0, 0))[0] - before[name].get(index, (0, 0))[0]
            for name, index in wanted
        }
        if all(deltas[k] >= v for k, v in wanted.items()) or time.monotonic() > deadline:
            return deltas
        time.sleep(0.05)


@pytest.mark.parametrize("case", all_cases(), ids=str)
def test_case(target: DataplaneTarget, case: Case) -> None:
    target.install([entry.build(target.p4info) for entry in case.entries])
    target.drain()
    wanted = case.expected_counters()
    before = {name: target.counters(name) for name in sorted({n for n, _ in wanted})}

    target.send(case.in_port, case.frame)

    for port, frame in case.out:
        got = target.expect(port, OUT_TIMEOUT)
        assert got is not None, (
            f"{case.name} ({case.intent}): nothing left port {port}; expected\n{describe(frame)}"
        )
        assert got == frame, (
            f"{case.name} ({case.intent}): wrong frame out of port {port}\n"
            f"expected ({len(frame)} bytes):\n{describe(frame)}\ngot ({len(got)} bytes):\n{describe(got)}"
        )
        if case.priority is not None:
            priority = target.priority_of_last(port)
            if priority is not None:
                assert priority == case.priority, f"{case.name}: priority class {priority}"

    assert counter_deltas(target, before, wanted) == wanted, case.intent
    for port in target.ports:
        extra = target.expect(port, QUIET)
        assert extra is None, (
            f"{case.name}: unexpected frame out of port {port}:\n{describe(extra)}"
        )
