"""Transmit-time spraying: with a budget per plane NIC the core picks EVs of planes with room."""

from __future__ import annotations

from typing import Any

from host.transport import wire

BASE = 0x7F00_0000_0000


def data_planes(frames: list[tuple[int, bytes | bytearray]]) -> list[int]:
    return [plane for plane, frame in frames if frame[wire.OFF_BTH] != wire.OP_ACKNOWLEDGE]


def test_budget_limits_each_plane_and_keeps_the_rest_for_later(make_net: Any) -> None:
    # the driver (a paced agent) says how many data frames each plane's NIC takes now
    net = make_net(seed=2)
    flow = net.connect("h0", "h2")
    ctx = net.hosts["h0"]
    flow.sender.post_write(bytes(256 * 1024), BASE, flow.region.rkey)
    budget = {0: 3, 1: 0}
    first = data_planes(ctx.frames_to_send(0.0, budget))
    assert first == [0, 0, 0] and budget == {0: 0, 1: 0}
    assert data_planes(ctx.frames_to_send(0.0, {0: 0, 1: 0})) == []
    second = data_planes(ctx.frames_to_send(0.0, {0: 0, 1: 2}))
    assert second == [1, 1]
    assert flow.sender.describe()["outstanding"] == 5  # every packet sent, once
    rest = data_planes(ctx.frames_to_send(0.0))  # no budget: the window decides
    assert len(rest) > 5 and set(rest) == {0, 1}
