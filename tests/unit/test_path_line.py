"""The agents' path latency (:class:`targets.delayline.PathLine`, BMv2 without netem): each
frame leaves by its own time, after its own path's links (two within a rack, four between
racks), so an ACK is not held behind a data frame to another host for that frame's
serialisation on links the two never share."""

from __future__ import annotations

import pytest

from targets.delayline import DelayLine, PathLine

RATE_BPS = 1e6
LINKS = 4  # a path between racks: NIC, leaf, spine, leaf
PER_BYTE = 8 / RATE_BPS  # one link's serialisation of a byte
LINK_LATENCY = 0.1  # one link's latency, seconds
LATENCY = LINKS * LINK_LATENCY  # the path's


def test_an_ack_after_a_data_frame_leaves_by_its_own_time() -> None:
    line: PathLine[bytes] = PathLine(LINK_LATENCY, PER_BYTE)
    line.put(bytes(4210), 0.0, LINKS)  # a data frame to one host (4 x 33.7 ms of serialisation)
    line.put(bytes(90), 0.001, LINKS)  # an ACK to another, put in just after it
    ack_due = 0.001 + LATENCY + 90 * LINKS * PER_BYTE
    assert line.next_due() == pytest.approx(ack_due)
    assert line.pop(ack_due - 1e-6) is None  # not before its latency and serialisation
    assert len(line.pop(ack_due) or b"") == 90
    assert line.pop(ack_due) is None  # the data frame is still on its links
    assert len(line.pop(LATENCY + 4210 * LINKS * PER_BYTE) or b"") == 4210
    assert len(line) == 0 and line.next_due() is None and line.pop(10.0) is None


def test_a_fifo_would_hold_that_ack_three_frame_times() -> None:
    fifo: DelayLine[bytes] = DelayLine(LATENCY, LINKS * PER_BYTE)
    fifo.put(bytes(4210), 0.0)
    fifo.put(bytes(90), 0.001)
    assert fifo.next_due() == pytest.approx(LATENCY + 4210 * LINKS * PER_BYTE)
    held = (LATENCY + 4210 * LINKS * PER_BYTE) - (0.001 + LATENCY + 90 * LINKS * PER_BYTE)
    assert held > 3 * 4210 * 8 / RATE_BPS  # more than three data frame times


def test_frames_of_one_size_keep_their_order() -> None:
    line: PathLine[bytes] = PathLine(LINK_LATENCY, PER_BYTE)
    frames = [bytes([n]) * 4210 for n in range(5)]
    for n, frame in enumerate(frames):
        line.put(frame, n * 0.001, LINKS)
    line.put(frames[0][:1] * 4210, 0.004, LINKS)  # a tie in time keeps the order of putting
    out = [line.pop(10.0) for _ in range(6)]
    assert out[:5] == frames and out[5] == bytes([0]) * 4210


def test_a_frame_within_the_rack_leaves_after_its_two_links() -> None:
    """A data frame to a host of the NIC's rack crosses two links, not the four between racks:
    it leaves before one put in earlier for another rack, after half that path's time."""
    line: PathLine[bytes] = PathLine(LINK_LATENCY, PER_BYTE)
    line.put(b"r" * 4210, 0.0, LINKS)  # to another rack
    line.put(b"l" * 4210, 0.01, 2)  # to a host of the rack
    rack_due = 0.01 + 2 * (LINK_LATENCY + 4210 * PER_BYTE)
    assert line.next_due() == pytest.approx(rack_due)
    assert line.pop(rack_due) == b"l" * 4210
    assert line.pop(LINKS * (LINK_LATENCY + 4210 * PER_BYTE)) == b"r" * 4210


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(ValueError, match="latency -1"):
        PathLine(-1)
    with pytest.raises(ValueError, match="serialisation -1"):
        PathLine(0.1, -1)
    with pytest.raises(ValueError, match="a path of 0 links"):
        PathLine(0.1).put(b"x", 0.0, 0)
