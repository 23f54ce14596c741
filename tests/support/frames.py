"""What a transport context sends, seen as it sends it (tests on the in-memory network).

:func:`spy_data_frames` wraps a :class:`host.transport.api.Context`'s ``frames_to_send`` so
that every data frame it sends from then on is handed to a callback, parsed and as bytes,
with the plane it leaves on::

    seen = []
    spy_data_frames(net.hosts["h0"], lambda plane, packet, frame: seen.append(packet.ev))

:func:`nack_of` is the NACK a receiver would send for one of a QP's outstanding packets.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from host.transport import wire


def spy_data_frames(ctx: Any, on_frame: Callable[[int, wire.DataPacket, bytes], None]) -> None:
    """Call ``on_frame(plane, packet, frame)`` for every data frame ``ctx`` sends from now on."""
    inner = ctx.frames_to_send

    def frames_to_send(now: float) -> list[tuple[int, bytes]]:
        out: list[tuple[int, bytes]] = inner(now)
        for plane, frame in out:
            packet = wire.parse(frame)
            if isinstance(packet, wire.DataPacket):
                on_frame(plane, packet, bytes(frame))
        return out

    ctx.frames_to_send = frames_to_send


def nack_of(rec: Any, flags: int) -> wire.NackPacket:
    """The NACK (syndrome NAK_SEQ, ``flags``) of the outstanding packet ``rec`` of a QP, echoing
    its path, EV and timestamp as a receiver does."""
    return wire.NackPacket(
        None,  # type: ignore[arg-type]  # the sender reads no outer header of a NACK
        wire.AETH_NAK_SEQ, flags, rec.slot.plane, rec.slot.spine_hint, rec.slot.wire,
        rec.ts32, rec.psn, 0,
    )  # fmt: skip
