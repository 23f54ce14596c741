"""The operating point of a fabric's switches: queue size, trim and ECN thresholds, hop latency.

UET's reference simulator (uet-htsim, ``main_uec.cpp``) derives every switch port's queue from
the fabric's bandwidth-delay product, in real units:

- the unloaded round trip (:func:`unloaded_rtt`): every link of the longest path crossed by a
  data frame one way and an ACK back, plus each link's latency and each switch's, both ways;
- the BDP (:func:`bdp_packets`): that round trip times one link's rate, in whole data frames
  (rounded up);
- the data queue holds 1 BDP and trims only when full; ECN is RED between 0.2 and 0.8 of the
  BDP (:func:`bdp_queue`, rounded up to packets);
- every link's latency is 1 us (:data:`HOP_LATENCY_US`), switches add none.

The simulated target (:mod:`sim.queues`) and the emulated ones (:mod:`controller.qos` for the
thresholds, :class:`topologies.Topology` for the queue depth and latency) all take their numbers
from here. An emulated fabric runs ``dilation`` times slower than the real one, so its latencies
are dilated; counted in packets, its BDP is the real fabric's.

Two named fabric profiles (:data:`FABRIC_PROFILES`), named as the host stack's profiles are:

- ``uet`` (the default): the operating point above, in the topology's real units; an emulated
  switch trims when its data queue holds 1 BDP, and each of its priority queues holds four
  times that (:data:`UET_QUEUE_FACTOR`), so that headers, ACKs and NACKs find room; the
  high-priority queues hold more still, in control-size packets (:func:`header_queue_depth`);
- ``testbed-2026``: the testbed's earlier settings, kept so that the two can be compared: 64
  packets per queue (the topology's ``switch.queue_depth``), trimming at half the queue, ECN at a
  fixed quarter of it, and 50 us of *emulated* delay per link.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: the default profile: UET's operating point (the host stack's default profile has this name)
UET_PROFILE = "uet"
#: the testbed's earlier settings, for comparison (the host stack's legacy profile too)
LEGACY_PROFILE = "testbed-2026"
FABRIC_PROFILES = (UET_PROFILE, LEGACY_PROFILE)

#: one link's one-way latency in the real fabric, microseconds (the reference's default)
HOP_LATENCY_US = 1.0
#: RED ECN's bounds, as shares of the BDP (the reference's ``-ecn`` defaults)
ECN_LOW = 0.2
ECN_HIGH = 0.8
#: bytes of an ACK in the reference's round-trip arithmetic (``UecBasePacket::get_ack_size``)
REFERENCE_ACK_BYTES = 64

#: ``uet``: an emulated switch's priority queues hold this many times the 1-BDP data queue, which
#: trims when it holds 1 BDP: the reference queues trimmed headers, ACKs and NACKs apart, in a
#: high-priority queue of twice the data queue's *bytes* (some 2,000 headers), and a queue
#: counted in packets (BMv2's, the switchmodel's: one capacity for every priority) needs room for
#: bursts of them beyond the data queue's BDP. Measured on an 8 -> 1 incast on the switchmodel:
#: with 2 BDPs, bursts of trimmed headers still overflowed the receiver's port (docs/p4-pipeline.md)
UET_QUEUE_FACTOR = 4

#: the reference's high-priority queue (trimmed headers, ACKs, NACKs) holds this many times the
#: data queue's bytes (uet-htsim's composite queue, the sim's ``red`` discipline)
HEADER_QUEUE_BYTES_FACTOR = 2

#: ``testbed-2026``: packets per egress queue, and the emulated delay of every link
LEGACY_QUEUE_DEPTH = 64
LEGACY_DELAY_US = 50.0


def unloaded_rtt(*, links: int, hop_latency: float, switch_latency: float, switches: int,
                 rate_bps: float, frame_bytes: int, ack_bytes: int = REFERENCE_ACK_BYTES) -> float:  # fmt: skip
    """The reference's ``network_max_unloaded_rtt`` (seconds): ``links`` links one way, each
    crossed by a data frame and an ACK, and ``switches`` switch latencies each way."""
    wire = links * (frame_bytes + ack_bytes) * 8 / rate_bps
    return 2 * (links * hop_latency + switches * switch_latency) + wire


def bdp_packets(rtt: float, rate_bps: float, frame_bytes: int) -> int:
    """The reference's BDP in whole data packets: ``ceil(rtt x rate / 8 / frame)``."""
    return math.ceil(rtt * rate_bps / 8 / frame_bytes - 1e-9)


@dataclass(frozen=True)
class BdpQueue:
    """One port's queue in packets: its capacity and RED's two thresholds."""

    packets: int  #: data queue capacity (trimming when full)
    ecn_low: int  #: RED marks nothing below this depth...
    ecn_high: int  #: ...and every ECT packet from this depth on


def bdp_queue(
    bdp: int,
    *,
    bdp_factor: float = 1.0,
    ecn_low: float = ECN_LOW,
    ecn_high: float = ECN_HIGH,
    packets: int | None = None,
) -> BdpQueue:
    """The queue of a fabric whose BDP is ``bdp`` packets: ``packets`` (default ``bdp_factor``
    BDPs, rounded up) and RED between ``ecn_low`` and ``ecn_high`` of the BDP (rounded up,
    never above the queue)."""
    size = packets if packets is not None else math.ceil(bdp * bdp_factor)
    high = min(size, math.ceil(bdp * ecn_high))
    low = min(high, math.ceil(bdp * ecn_low))
    return BdpQueue(packets=size, ecn_low=low, ecn_high=high)


def header_queue_depth(depth: int, frame_bytes: int, header_bytes: int) -> int:
    """Packets of ``header_bytes`` a port's high-priority queue holds beside a data queue of
    ``depth`` frames of ``frame_bytes``: the reference bounds headers, ACKs and NACKs in bytes,
    :data:`HEADER_QUEUE_BYTES_FACTOR` times the data queue's, where a queue counted in packets
    (BMv2's, the switch model's, the sim's ``threshold`` discipline) would hold as few headers as
    data frames, and a burst of headers trimmed upstream would overflow it (a loss, which MRC
    takes for a failed path). Never fewer than ``depth``."""
    if depth < 1 or frame_bytes < 1 or header_bytes < 1:
        raise ValueError(
            f"depth {depth}, frame {frame_bytes} B, header {header_bytes} B: expected positive"
        )
    return max(depth, -(-HEADER_QUEUE_BYTES_FACTOR * depth * frame_bytes // header_bytes))


def check_profile(name: str) -> str:
    """``name`` when it is a fabric profile, else ValueError naming the choices."""
    if name not in FABRIC_PROFILES:
        raise ValueError(f"fabric profile {name!r}: expected one of {', '.join(FABRIC_PROFILES)}")
    return name


__all__ = [
    "ECN_HIGH",
    "ECN_LOW",
    "FABRIC_PROFILES",
    "HEADER_QUEUE_BYTES_FACTOR",
    "HOP_LATENCY_US",
    "LEGACY_DELAY_US",
    "LEGACY_PROFILE",
    "LEGACY_QUEUE_DEPTH",
    "REFERENCE_ACK_BYTES",
    "UET_PROFILE",
    "UET_QUEUE_FACTOR",
    "BdpQueue",
    "bdp_packets",
    "bdp_queue",
    "check_profile",
    "header_queue_depth",
    "unloaded_rtt",
]
