"""Trimming and ECN modes on both targets, at a queue depth set through the depth registers.

The controller's two trimming modes (at a threshold, or only when the queue is full) and two ECN
modes (a fixed threshold, or RED-like between two thresholds) all become ``set_port_qos``
parameters (:meth:`controller.qos.PortQos.action_params`). To see each law at a chosen depth,
the test writes the egress port's ``port_qdepth`` (and clears ``port_arrivals``) over P4Runtime
before every frame: the data queue then looks that deep to ingress, whatever the port is doing.
The departing frame resets the registers, so the next frame gets them written again.

RED is random on both targets (BMv2's ``random()`` extern, the same law in switchmodel): at the
midpoint between the thresholds half the frames are marked, checked against bounds 5 standard
deviations wide; below the lower threshold none and from the upper one on all are.
"""

from __future__ import annotations

from typing import Any

import pytest

from controller.qos import PortQos
from p4src import contract
from p4src.contract import ECN_MARKED, TRIMMED, Dscp, Ecn, Opcode, PortQosParams

from . import packets as pk
from .cases import Builder, _hop_of, _path, fabric, qos
from .packets import describe
from .target import DataplaneTarget

QUEUE = 16  # the data queue capacity the modes are computed for
OUT_TIMEOUT = 3.0
RED_FRAMES = 200


def setup(target: DataplaneTarget, mode: PortQos) -> tuple[int, int, Any]:
    """Install the spine's tables with ``mode`` on the output port; (in port, out port, builder)."""
    fab = fabric()
    inter = _path("h0", "h2")
    spine = fab.switch(inter.hops[1].switch)
    s_in, s_out = _hop_of(spine, inter)
    build = Builder(fab, inter.src_nic.address)
    params = mode.action_params(QUEUE)
    entry = qos(s_out, *PortQosParams(**params)[:4])
    target.install([e.to_proto(target.p4info) for e in build.tables(spine, entry)])
    target.drain()
    return s_in, s_out, (build, spine, inter)


def send_at_depth(
    target: DataplaneTarget, in_port: int, out_port: int, frame: bytes, depth: int
) -> bytes:
    """Make the data queue of ``out_port`` look ``depth`` deep, send ``frame``, return what left."""
    target.set_register(contract.PORT_ARRIVALS, out_port, 0)
    target.set_register(contract.PORT_QDEPTH, out_port, depth)
    target.send(in_port, frame)
    got = target.expect(out_port, OUT_TIMEOUT)
    assert got is not None, f"nothing left port {out_port} for\n{describe(frame)}"
    return got


def data_frame(ctx: Any, in_port: int, ecn: int) -> bytes:
    build, spine, inter = ctx
    write = pk.mrc_udp(Opcode.WRITE_ONLY, pk.payload_bytes(256))
    return bytes(build.frame_in(spine, in_port, inter.carrier, write, dscp=Dscp.TRIMMABLE, ecn=ecn))


def traffic_class(frame: bytes) -> int:
    """The IPv6 traffic class: the 8 bits after the version, behind 14 bytes of Ethernet."""
    return ((frame[14] & 0x0F) << 4) | (frame[15] >> 4)


def is_trimmed(frame: bytes) -> bool:
    return traffic_class(frame) >> 2 == Dscp.TRIMMED


def ecn_of(frame: bytes) -> int:
    return traffic_class(frame) & 0x3


@pytest.mark.parametrize(
    ("mode", "whole_at", "trimmed_at"),
    [
        (PortQos(trim=4, ecn=QUEUE, trim_mode="threshold"), 3, 4),
        (PortQos(trim=4, ecn=QUEUE, trim_mode="full"), QUEUE - 1, QUEUE),
    ],
    ids=["threshold", "full"],
)
def test_trim_modes(target: DataplaneTarget, mode: PortQos, whole_at: int, trimmed_at: int) -> None:
    in_port, out_port, ctx = setup(target, mode)
    frame = data_frame(ctx, in_port, Ecn.NOT_ECT)
    before = target.counters(TRIMMED).get(out_port, (0, 0))[0]
    assert not is_trimmed(send_at_depth(target, in_port, out_port, frame, whole_at))
    out = send_at_depth(target, in_port, out_port, frame, trimmed_at)
    assert is_trimmed(out) and len(out) < len(frame)
    assert target.counters(TRIMMED).get(out_port, (0, 0))[0] - before == 1


def test_ecn_fixed_threshold(target: DataplaneTarget) -> None:
    in_port, out_port, ctx = setup(target, PortQos(trim=QUEUE, ecn=5))
    frame = data_frame(ctx, in_port, Ecn.ECT0)
    assert ecn_of(send_at_depth(target, in_port, out_port, frame, 4)) == Ecn.ECT0
    assert ecn_of(send_at_depth(target, in_port, out_port, frame, 5)) == Ecn.CE


def test_ecn_red(target: DataplaneTarget) -> None:
    mode = PortQos(trim=QUEUE, ecn=4, ecn_mode="red", ecn_max=12, ecn_pmax=1.0)
    in_port, out_port, ctx = setup(target, mode)
    frame = data_frame(ctx, in_port, Ecn.ECT0)
    before = target.counters(ECN_MARKED).get(out_port, (0, 0))[0]
    # below the lower threshold: never; from the upper one: always
    for _ in range(10):
        assert ecn_of(send_at_depth(target, in_port, out_port, frame, 3)) == Ecn.ECT0
        assert ecn_of(send_at_depth(target, in_port, out_port, frame, 12)) == Ecn.CE
    # at the midpoint: probability (8 - 4) / (12 - 4) = 1/2
    marked = sum(
        ecn_of(send_at_depth(target, in_port, out_port, frame, 8)) == Ecn.CE
        for _ in range(RED_FRAMES)
    )
    spread = 5 * (RED_FRAMES * 0.25) ** 0.5
    assert RED_FRAMES / 2 - spread <= marked <= RED_FRAMES / 2 + spread, marked
    counted = target.counters(ECN_MARKED).get(out_port, (0, 0))[0] - before
    assert counted == 10 + marked
