"""Switch port queues of the simulated fabric, sized as UET's reference simulator sizes them.

uet-htsim (``main_uec.cpp``, ``compositequeue.cpp``, commit 40ccb05) gives every switch port
a byte-bounded data queue of one bandwidth-delay product and a high-priority queue for
headers, ACKs and NACKs:

- the BDP is the fabric's unloaded round trip (every link of the longest path crossed twice
  plus the serialisation of a data packet and of an ACK on each of them) times the host's link
  rate, counted in whole data packets (rounded up);
- the data queue holds ``bdp_factor`` BDPs (1 when trimming) or ``packets`` packets;
- ECN is RED between ``ecn_low`` and ``ecn_high`` of the BDP (rounded up to packets), decided
  when a packet *leaves* the queue, on the bytes still queued behind it;
- a data packet is trimmed only when the queue is full: then either the arriving packet or the
  newest one queued (a coin flip) loses its payload and joins the high-priority queue, which
  holds up to twice the data queue's bytes;
- the high-priority queue is served first.

:class:`QueuePolicy` describes that; :meth:`QueuePolicy.resolve` turns it into byte bounds for
one fabric (:class:`PortQueue`); the arithmetic (round trip, BDP, thresholds) is
:mod:`topologies.operating`'s, which the emulated switches use too.
``QueuePolicy(discipline="threshold")`` is the P4 program's own discipline (trim and ECN decided at enqueue against packet-count thresholds), the one the
emulated switches run and :class:`sim.network.SimNet`'s ``trim_threshold`` / ``ecn_threshold``
options describe.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from topologies.operating import REFERENCE_ACK_BYTES, bdp_packets, bdp_queue, unloaded_rtt

DISCIPLINES = ("red", "threshold")


@dataclass(frozen=True)
class QueuePolicy:
    """How every switch port queues (see the module docstring)."""

    packets: int | None = None  #: data queue size in full-size packets (None: ``bdp_factor``)
    bdp_factor: float = 1.0  #: data queue size in BDPs when ``packets`` is None
    ecn_low: float = 0.2  #: RED starts marking at this share of the BDP
    ecn_high: float = 0.8  #: ...and marks every packet above this share
    trim: bool = True  #: trim at a full queue (False: drop)
    discipline: str = "red"  #: "red" (the reference's) or "threshold" (the P4 program's)
    #: bytes a trimmed header takes on the wire and in the high-priority queue (None: its own
    #: length, MRC's headers: 114 bytes). The reference trims to 64 (``trim_size``); set to
    #: compare the two at the same header cost (``htsim_parity``'s incast finding)
    trim_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.discipline not in DISCIPLINES:
            raise ValueError(f"queue discipline {self.discipline!r}: expected one of {DISCIPLINES}")
        if self.trim_bytes is not None and self.trim_bytes < 1:
            raise ValueError(f"trimmed headers of {self.trim_bytes} bytes: expected at least 1")
        if self.packets is not None and self.packets < 1:
            raise ValueError(f"queue of {self.packets} packets: expected at least 1")
        if self.bdp_factor <= 0:
            raise ValueError(f"queue of {self.bdp_factor} BDPs: expected > 0")
        if not 0 <= self.ecn_low <= self.ecn_high:
            raise ValueError(
                f"ECN between {self.ecn_low} and {self.ecn_high}: expected 0 <= low <= high"
            )

    def with_(self, **changes: Any) -> QueuePolicy:
        """A copy with some fields changed."""
        return replace(self, **changes)

    def resolve(self, *, bdp_packets: int, frame_bytes: int) -> PortQueue:
        """Byte bounds for a fabric whose BDP is ``bdp_packets`` frames of ``frame_bytes``."""
        queue = bdp_queue(
            bdp_packets,
            bdp_factor=self.bdp_factor,
            ecn_low=self.ecn_low,
            ecn_high=self.ecn_high,
            packets=self.packets,
        )
        return PortQueue(
            size_bytes=queue.packets * frame_bytes,
            ecn_low_bytes=queue.ecn_low * frame_bytes,
            ecn_high_bytes=queue.ecn_high * frame_bytes,
            trim=self.trim,
            packets=queue.packets,
            trim_bytes=self.trim_bytes,
        )


@dataclass(frozen=True)
class PortQueue:
    """One port's resolved bounds (bytes)."""

    size_bytes: int  #: data queue capacity
    ecn_low_bytes: int  #: RED's lower threshold
    ecn_high_bytes: int  #: RED's upper threshold (every packet marked above it)
    trim: bool  #: trim at a full queue (else drop)
    packets: int  #: capacity in full-size packets (for reports)
    trim_bytes: int | None = None  #: QueuePolicy.trim_bytes


__all__ = [
    "DISCIPLINES",
    "REFERENCE_ACK_BYTES",
    "PortQueue",
    "QueuePolicy",
    "bdp_packets",
    "unloaded_rtt",
]
