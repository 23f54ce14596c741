"""The NIC wire of the host agent: data frames leave at the link rate, control frames first."""

from __future__ import annotations

import pytest

from host.agent.pacing import CATCH_UP, EARLY, PREAMBLE_AND_GAP, NicWire, is_control
from host.transport import wire
from p4src.contract import ETHERTYPE_IPV6

RATE = 10e6  # b/s
FRAME = 4096 + 200


def frame(dscp: int, size: int = FRAME) -> bytearray:
    out = bytearray(size)
    out[12:14] = ETHERTYPE_IPV6.to_bytes(2, "big")
    tc = dscp << 2
    out[14] = 0x60 | tc >> 4
    out[15] = (tc & 0x0F) << 4
    return out


def test_control_frames_are_recognised_by_their_dscp() -> None:
    assert is_control(frame(wire.DSCP_CONTROL, 100))
    assert not is_control(frame(wire.DSCP_TRIMMABLE))
    assert not is_control(frame(wire.DSCP_DEFAULT))
    assert not is_control(b"\x00" * 10)


def test_a_burst_leaves_at_the_link_rate_in_order() -> None:
    nic = NicWire(RATE, FRAME)
    burst = [frame(wire.DSCP_TRIMMABLE) for _ in range(10)]
    for n, f in enumerate(burst):
        f[-1] = n
    sent = [f for f in burst if nic.offer(f, 0.0)]
    assert len(sent) == 1 and nic.held == 9
    frame_time = (FRAME + PREAMBLE_AND_GAP) * 8 / RATE
    out = list(sent)
    t = 0.0
    while nic.waiting:
        due = nic.next_release()
        assert due is not None and due >= t
        t = due
        out += nic.release(t)
    assert [f[-1] for f in out] == list(range(10))
    # ten frames take ten frame times on the wire; the last leaves half a frame time before
    # the ninth is done
    assert nic.free_at == pytest.approx(10 * frame_time)
    assert t == pytest.approx(8.5 * frame_time)


def test_control_frames_jump_the_line_and_take_wire_time() -> None:
    nic = NicWire(RATE, FRAME)
    for _ in range(3):
        nic.offer(frame(wire.DSCP_TRIMMABLE), 0.0)
    busy = nic.free_at
    ack = frame(wire.DSCP_CONTROL, 128)
    assert nic.offer(ack, 0.0)  # ahead of the two waiting data frames
    assert nic.free_at == pytest.approx(busy + (128 + PREAMBLE_AND_GAP) * 8 / RATE)
    assert len(nic.waiting) == 2
    assert nic.release(0.0) == []


def test_a_late_loop_catches_up_a_little() -> None:
    nic = NicWire(RATE, FRAME)
    frame_time = (FRAME + PREAMBLE_AND_GAP) * 8 / RATE
    for _ in range(20):
        nic.offer(frame(wire.DSCP_TRIMMABLE), 0.0)
    # the loop wakes up long after the first frame was done: the frames that should have
    # left since go back to back, but the wire catches up at most CATCH_UP frame times
    late = (CATCH_UP + 3) * frame_time
    out = nic.release(late)
    caught_up = int(CATCH_UP + EARLY) + 1  # the wire time in hand, plus the early allowance
    assert len(out) == caught_up
    assert nic.free_at == pytest.approx(late - CATCH_UP * frame_time + caught_up * frame_time)


def test_an_idle_wire_starts_when_a_frame_comes_and_keeps_the_link_rate() -> None:
    nic = NicWire(RATE, FRAME)
    frame_time = (FRAME + PREAMBLE_AND_GAP) * 8 / RATE
    assert nic.offer(frame(wire.DSCP_TRIMMABLE), 0.0)
    # the wire was idle from one frame time on: an ACK's burst three frame times later
    # starts then, one frame at a time, not back to back on the idle time
    now = 4 * frame_time
    sent = [nic.offer(frame(wire.DSCP_TRIMMABLE), now) for _ in range(4)]
    assert sent == [True, False, False, False]
    assert nic.free_at == pytest.approx(5 * frame_time)
    assert nic.next_release() == pytest.approx((5 - EARLY) * frame_time)


def test_frames_handed_over_after_a_late_backlog_catch_up_too() -> None:
    nic = NicWire(RATE, FRAME)
    frame_time = (FRAME + PREAMBLE_AND_GAP) * 8 / RATE
    for _ in range(4):
        nic.offer(frame(wire.DSCP_TRIMMABLE), 0.0)
    # the loop wakes up six frame times late: the three that waited go, and the wire is still
    # two frame times behind; what the transport hands over in the same turn goes too
    late = 6 * frame_time
    assert len(nic.release(late)) == 3
    assert nic.free_at == pytest.approx(4 * frame_time)
    turn = late + 0.1 * frame_time
    sent = [nic.offer(frame(wire.DSCP_TRIMMABLE), turn) for _ in range(4)]
    assert sent == [True, True, True, False]
    assert nic.free_at == pytest.approx(7 * frame_time)
    # caught up: a later frame after an idle time starts when it comes
    nic.release(nic.free_at)
    idle = 20 * frame_time
    assert nic.offer(frame(wire.DSCP_TRIMMABLE), idle)
    assert nic.free_at == pytest.approx(idle + frame_time)


def test_an_idle_wire_sends_at_once() -> None:
    nic = NicWire(RATE, FRAME)
    assert nic.offer(frame(wire.DSCP_TRIMMABLE), 5.0)
    assert nic.next_release() is None
    assert nic.offer(frame(wire.DSCP_TRIMMABLE), 10.0)
    with pytest.raises(ValueError, match="NIC rate"):
        NicWire(0, FRAME)
