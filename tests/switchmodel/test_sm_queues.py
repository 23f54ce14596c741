"""The sans-IO traffic manager: shaping, bounded queues, strict priority, and the pipeline's use
of the depth it reports (trimming instead of dropping). Time is simulated: no clock, no sleep."""

from __future__ import annotations

import pytest
from dataplane.packets import mrc_frame
from support.fabric import small_fabric

from p4src.contract import DropReason
from switchmodel.pipeline import Forward, count_drop, egress, ingress
from switchmodel.queues import PortQueue
from switchmodel.tables import PipelineState, PortQos, next_hop
from targets.delayline import DelayLine

FABRIC = small_fabric()
DST = FABRIC.host("h0").nic(0).address


def drain(
    queue: PortQueue[int], start: float, end: float, step: float = 1e-4
) -> list[tuple[float, int]]:
    """Dequeue everything allowed between start and end, ticking by ``step``: (time, item)."""
    sent = []
    now = start
    while now <= end:
        while True:
            item = queue.dequeue(now)
            if item is None:
                break
            sent.append((now, item))
        now += step
    return sent


def test_shaper_limits_rate() -> None:
    rate = 10_000_000  # 10 Mbit/s
    queue: PortQueue[int] = PortQueue(priorities=1, depth=10_000, rate_bps=rate, burst_bits=12_000)
    for i in range(2000):
        assert queue.enqueue(i, 1250, 0) is not None  # 10,000 bits each
    sent = drain(queue, 0.0, 1.0)
    bits = len(sent) * 10_000
    # One second at 10 Mbit/s is 1000 packets of 10 kbit (plus the initial bucket).
    assert 995 <= len(sent) <= 1003, bits
    assert [item for _, item in sent] == list(range(len(sent)))  # FIFO order


def test_next_ready_says_when_tokens_allow() -> None:
    queue: PortQueue[int] = PortQueue(priorities=1, depth=10, rate_bps=8000, burst_bits=0)
    assert queue.next_ready(0.0) is None
    queue.enqueue(1, 100, 0)
    queue.enqueue(2, 100, 0)
    assert queue.next_ready(0.0) == 0.0
    assert queue.dequeue(0.0) == 1
    ready = queue.next_ready(0.0)
    assert ready == pytest.approx(0.1)  # 800 bits at 8000 bit/s
    assert queue.dequeue(0.05) is None
    assert queue.dequeue(ready) == 2


def test_unshaped_queue_sends_at_once() -> None:
    queue: PortQueue[int] = PortQueue(priorities=2, depth=4, rate_bps=0)
    for i in range(4):
        queue.enqueue(i, 9000, 0)
    assert [queue.dequeue(0.0) for _ in range(5)] == [0, 1, 2, 3, None]


def test_full_queue_refuses_and_depth_is_summed_over_priorities() -> None:
    queue: PortQueue[str] = PortQueue(priorities=2, depth=3, rate_bps=1000)
    observed = [queue.enqueue(f"low{i}", 100, 0) for i in range(4)]
    assert observed == [0, 1, 2, None]  # the fourth low-priority packet is refused
    # the high-priority FIFO has its own capacity; the depth it observes counts both
    assert queue.enqueue("high0", 100, 1) == 3
    assert queue.length == 4
    assert queue.depth_of(0) == 3 and queue.depth_of(1) == 1


def test_control_queues_hold_their_own_depth() -> None:
    """Headers, ACKs and NACKs are small: the queues above priority 0 hold
    ``control_depth`` packets (topologies.operating.header_queue_depth), the data queue
    ``depth``; a burst of headers beyond the data queue's depth is queued, not dropped."""
    q: PortQueue[str] = PortQueue(priorities=2, depth=4, control_depth=64)
    assert [q.enqueue(f"d{n}", 4210, 0) for n in range(5)][-1] is None  # the fifth data packet
    assert all(q.enqueue(f"h{n}", 114, 1) is not None for n in range(64))
    assert q.enqueue("h64", 114, 1) is None
    assert (q.depth_of(0), q.depth_of(1)) == (4, 64)
    assert PortQueue(depth=8).control_depth == 8  # one depth for every queue unless told
    with pytest.raises(ValueError, match="control queue depth 0"):
        PortQueue(depth=8, control_depth=0)


def test_high_priority_overtakes_low() -> None:
    queue: PortQueue[str] = PortQueue(priorities=2, depth=10, rate_bps=8000, burst_bits=0)
    for i in range(3):
        queue.enqueue(f"low{i}", 100, 0)
    assert queue.dequeue(0.0) == "low0"
    queue.enqueue("high", 100, 1)
    order = [item for _, item in drain(queue, 0.0, 1.0, step=0.01)]
    assert order == ["high", "low1", "low2"]


def test_push_front_restores_order_and_tokens() -> None:
    queue: PortQueue[str] = PortQueue(priorities=2, depth=10, rate_bps=8000, burst_bits=800)
    queue.enqueue("a", 100, 0)
    queue.enqueue("b", 100, 0)
    item = queue.dequeue(0.0)
    queue.push_front(item, 100, 0)  # type: ignore[arg-type]
    assert queue.dequeue(0.0) == "a"


def test_bad_configuration_is_named() -> None:
    with pytest.raises(ValueError, match="queue depth 0"):
        PortQueue(depth=0)
    with pytest.raises(ValueError, match="rate -1"):
        PortQueue(rate_bps=-1)


def _switch(trim_threshold: int | None) -> PipelineState:
    state = PipelineState()
    state.ipv6_lpm.insert(int(DST), 48, next_hop(2, b"\x02" * 6, b"\x04" * 6))
    if trim_threshold is not None:
        state.port_qos.entries[2] = PortQos.fixed(trim_threshold, trim_threshold)
    return state


def _offer(state: PipelineState, queue: PortQueue[tuple[bytearray, int, int]], frames: int) -> None:
    """Ingress + enqueue ``frames`` data packets at once, then let egress record one depth."""
    frame = mrc_frame(DST, payload=b"\x00" * 1000)
    for _ in range(frames):
        verdict = ingress(frame, 1, state)
        assert isinstance(verdict, Forward)
        depth = queue.length
        if (
            queue.enqueue((verdict.frame, len(frame), depth), len(verdict.frame), verdict.priority)
            is None
        ):
            count_drop(state, DropReason.QUEUE_FULL, len(frame))


def test_congested_port_without_thresholds_drops_queue_full() -> None:
    state = _switch(None)
    queue: PortQueue[tuple[bytearray, int, int]] = PortQueue(2, depth=8, rate_bps=1_000_000)
    _offer(state, queue, 20)
    assert state.counters.drops.packets[DropReason.QUEUE_FULL] == 12
    assert state.counters.trimmed.packets[2] == 0


def test_congested_port_with_thresholds_trims_instead() -> None:
    state = _switch(4)
    queue: PortQueue[tuple[bytearray, int, int]] = PortQueue(2, depth=8, rate_bps=1_000_000)
    # ingress counts what it queues for data (port_arrivals), so a burst sees itself build up:
    # depths 0..3 are queued whole, the next two are trimmed (and go to the control queue)
    _offer(state, queue, 6)
    assert state.counters.trimmed.packets[2] == 2
    assert state.port_arrivals[2] == 4 and state.port_qdepth[2] == 0
    # each departure records the depth it leaves behind and clears the arrivals
    now = 0.0
    sent = 0
    while sent < 5:
        item = queue.dequeue(now)
        if item is not None:
            priority = 1 if len(item[0]) < 200 else 0  # trimmed headers leave first
            egress(state, 2, priority, queue.depth_of(priority), item[1])
            sent += 1
        now += 0.001
    assert (state.port_qdepth[2], state.port_arrivals[2]) == (1, 0)
    _offer(state, queue, 13)
    trimmed = state.counters.trimmed.packets[2] - 2
    assert trimmed == 10  # depths 1, 2, 3 queued whole; 4 and more trimmed
    assert queue.depth_of(1) == 8 and state.counters.drops.packets[DropReason.QUEUE_FULL] == 2
    high = [queue.dequeue(now + 10) for _ in range(3)]
    assert all(item is not None and len(item[0]) < 200 for item in high)  # headers only, first


def test_delay_line_releases_in_order_no_earlier_than_the_latency() -> None:
    line: DelayLine[str] = DelayLine(0.001)
    assert line.next_due() is None and line.pop(5.0) is None
    line.put("a", 1.0)
    line.put("b", 1.0005)
    assert len(line) == 2
    assert line.next_due() == pytest.approx(1.001)
    assert line.pop(1.0009) is None  # not before the latency
    assert line.pop(1.001) == "a"
    assert line.pop(1.0012) is None and line.next_due() == pytest.approx(1.0015)
    assert line.pop(1.1) == "b"
    line.put("c", 2.0)
    got = line.pop(2.001)
    assert got == "c"
    line.put_back(got, 2.001)  # a send that would block: it stays first, due at once
    line.put("d", 2.001)
    assert (line.pop(2.001), line.pop(2.0015), line.pop(2.002)) == ("c", None, "d")
    with pytest.raises(ValueError, match="latency -1"):
        DelayLine(-1)


def test_delay_line_adds_each_frames_serialisation() -> None:
    # 1 Mb/s, a line standing for two links: a 1,250-byte frame waits 2 x 10 ms on top of the
    # latency, an ACK of 125 bytes 2 x 1 ms; in order all the same (a cable is a FIFO)
    line: DelayLine[bytes] = DelayLine(0.1, 2 * 8 / 1e6)
    line.put(bytes(1250), 0.0)
    line.put(bytes(125), 0.0)
    assert line.next_due() == pytest.approx(0.12)
    assert line.pop(0.1199) is None
    assert len(line.pop(0.1201) or b"") == 1250 and len(line.pop(0.1201) or b"") == 125
    with pytest.raises(ValueError, match="serialisation -1"):
        DelayLine(0.1, -1)
