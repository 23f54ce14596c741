"""Every case of the case table against every target: exact frames out, or the counted drop.

Priority classes are not visible in a single frame; they are checked by order under a queue in
``test_priority.py``.
"""

from __future__ import annotations

import pytest

from .cases import Case, all_cases
from .packets import describe
from .target import DataplaneTarget, counter_deltas

OUT_TIMEOUT = 3.0  # longest wait for an expected frame
QUIET = 0.1  # how long a port must stay silent after the case
COUNTER_WAIT = 3.0  # longest wait for the counters to reach the expected values


@pytest.mark.parametrize("case", all_cases(), ids=str)
def test_case(target: DataplaneTarget, case: Case) -> None:
    case.install(target)
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

    assert counter_deltas(target, before, wanted, COUNTER_WAIT) == wanted, case.intent
    for port in target.ports:
        extra = target.expect(port, QUIET)
        assert extra is None, (
            f"{case.name}: unexpected frame out of port {port}:\n{describe(extra)}"
        )
