"""Priority classes, checked by behaviour: what overtakes a queue on a shaped port.

Neither BMv2 nor switchmodel says which queue a frame went through, so priority is checked the
way a host would see it. The burst cases of ``cases.py`` run on ``shaped_target`` (the output
port shaped to :data:`cases.SHAPED_RATE_BPS`): ordinary packets sent back to back queue up
there, and a control packet (DSCP 48) or a trimmed header (DSCP 12) sent behind them must leave
before the last of them, while the ordinary packets keep their order. Frames that wait for
departures (``Send.after``) are sent once that many frames have left the port. Every frame must
leave exactly as expected (bytes), and the counters must move as the case says. Only the order
of departures is asserted, never a time.
"""

from __future__ import annotations

import pytest
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether

from p4src.contract import DROPS, PORT_IN, PORT_OUT, DropReason

from .cases import Burst, burst_cases
from .packets import describe
from .target import DataplaneTarget, counter_deltas

OUT_TIMEOUT = 3.0  # longest wait for the next frame of a burst (the queue drains in ~0.3 s)
QUIET = 0.1  # how long every port must stay silent after the burst
COUNTER_WAIT = 3.0


def _flow_label(frame: bytes) -> int | None:
    packet = Ether(frame)
    return int(packet[IPv6].fl) if packet.haslayer(IPv6) else None


@pytest.mark.parametrize("burst", burst_cases(), ids=str)
def test_priority_by_overtaking(shaped_target: DataplaneTarget, burst: Burst) -> None:
    target = shaped_target
    target.install([entry.to_proto(target.p4info) for entry in burst.entries])
    target.drain()
    wanted = burst.expected_counters()
    before = {name: target.counters(name) for name in sorted({n for n, _ in wanted})}
    label_of = {send.out: send.label for send in burst.sends}
    by_flow = {_flow_label(send.out): send for send in burst.sends}
    waiting = list(burst.sends)
    left: list[str] = []  # labels, in the order their frames left the output port

    def send_due() -> None:
        while waiting and waiting[0].after <= len(left):
            target.send(burst.in_port, waiting.pop(0).frame)

    send_due()
    while len(left) < len(burst.sends):
        got = target.expect(burst.out_port, OUT_TIMEOUT)
        missing = [s.label for s in burst.sends if s.label not in left]
        assert got is not None, (
            f"{burst.name}: after {left} nothing more left port {burst.out_port}; "
            f"still expected {missing}"
        )
        label = label_of.get(got)
        if label is None:
            meant = by_flow.get(_flow_label(got))
            expected = describe(meant.out) if meant is not None else f"one of {missing}"
            pytest.fail(
                f"{burst.name} ({burst.intent}): after {left}, a wrong frame left port "
                f"{burst.out_port}\nexpected:\n{expected}\ngot ({len(got)} bytes):\n{describe(got)}"
            )
        assert label not in left, f"{burst.name}: {label} left twice (after {left})"
        left.append(label)
        send_due()

    order = f"{burst.name} ({burst.intent}): frames left in the order {left}"
    fifo = burst.fifo()
    assert [label for label in left if label in fifo] == fifo, f"{order}: low class out of order"
    for first, then in burst.overtakes:
        assert left.index(first) < left.index(then), f"{order}: {first} did not overtake {then}"

    assert counter_deltas(target, before, wanted, COUNTER_WAIT) == wanted, burst.intent
    for port in target.ports:
        extra = target.expect(port, QUIET)
        assert extra is None, (
            f"{burst.name}: unexpected frame out of port {port}:\n{describe(extra)}"
        )


#: ordinary frames sent back to back into the shaped port: more than a bounded queue holds
#: (BMv2 and switchmodel: 64 packets a priority queue) while it drains at 500 kb/s
OVERFLOW = 120


def test_a_full_queue_drops_where_each_target_says(shaped_target: DataplaneTarget) -> None:
    """What a target does when a queue is full, as its counters show it.

    switchmodel and the sim drop at the queue and count QUEUE_FULL. BMv2 loses the frames
    before ingress: while the queue is full its ingress waits for room and stops reading, so
    the program counts (``port_in``) only about as many frames as leave, and no counter sees
    the rest. The in-process pipeline's queues have no bound.
    """
    target = shaped_target
    burst = burst_cases()[0]  # its tables: through the spine, no trimming, no ECN
    target.install([entry.to_proto(target.p4info) for entry in burst.entries])
    target.drain()
    frames = [s.frame for s in burst.sends if s.label.startswith("data")]
    names = (PORT_IN, PORT_OUT, DROPS)
    before = {name: target.counters(name) for name in names}
    for i in range(OVERFLOW):
        target.send(burst.in_port, frames[i % len(frames)])
    left = 0
    while target.expect(burst.out_port, OUT_TIMEOUT) is not None:
        left += 1
    full = (DROPS, DropReason.QUEUE_FULL)
    out = (PORT_OUT, burst.out_port)
    arrived = (PORT_IN, burst.in_port)
    if target.name == "bmv2":
        # ingress saw only some of the frames (the others were lost before it), and nearly
        # all it saw left: the queue's losses are out of the program's sight
        assert left < OVERFLOW, f"bmv2: all {OVERFLOW} frames left a queue of 64"
        seen = counter_deltas(target, before, {arrived: left, out: left}, COUNTER_WAIT)
        assert seen[out] == left, f"bmv2: {left} frames left, port_out counted {seen[out]}"
        assert left <= seen[arrived] <= left + 2 < OVERFLOW, (
            f"bmv2: {OVERFLOW} frames sent, {seen[arrived]} reached ingress, {left} left"
        )
        return
    if target.name == "model":
        assert left < OVERFLOW, f"model: all {OVERFLOW} frames left a queue of 64"
        wanted = {arrived: OVERFLOW, out: left, full: OVERFLOW - left}
    else:
        wanted = {arrived: OVERFLOW, out: OVERFLOW, full: 0}
    assert counter_deltas(target, before, wanted, COUNTER_WAIT) == wanted, (
        f"{target.name}: {left} of {OVERFLOW} frames left"
    )
