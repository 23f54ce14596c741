"""CC profiles fitted to a fabric: NSCC's defaults from the topology, in protocol time.

The UET reference derives NSCC's parameters from the network's base RTT and link rate
(:func:`host.transport.cc.nscc.uet_defaults`). On the testbed both come from the topology, and
the base RTT is divided by the time dilation (a real-fabric time, like every protocol time):

- the base RTT is the round trip of a full-size data frame between racks whose ACK comes back
  behind one full-size frame at every hop: the topology's unloaded round trip plus one frame
  time per link. Collectives load every link in both directions, and an ACK, high priority as
  it is, waits for the frame being sent (no switch preempts a frame); a window sized on the
  unloaded floor alone measured 0.78 of the capacity of a permutation on the in-memory fabric,
  0.91 with this one (a testbed choice, docs/host-stack.md);
- the rate is the host's, every plane's nominal rate together (one QP sprays over all planes).
"""

from __future__ import annotations

from host.transport.cc.base import CcProfile
from host.transport.cc.nscc import uet_defaults
from topologies import Topology
from topologies.config import BASE_RTT_LINKS

NSCC_NAMES = ("nscc", "uet-1.0-nscc")


def fabric_base_rtt(topology: Topology) -> float:
    """NSCC's base RTT for ``topology`` in protocol seconds (see the module docstring)."""
    loaded = topology.base_rtt + BASE_RTT_LINKS * topology.frame_time
    return loaded / topology.dilation


def fabric_cc_profile(topology: Topology, profile: CcProfile) -> CcProfile:
    """``profile`` with NSCC's defaults for ``topology`` under the fields it sets; other
    algorithms are returned as they are."""
    if profile.name not in NSCC_NAMES:
        return profile
    defaults = uet_defaults(
        base_rtt=fabric_base_rtt(topology),
        link_rate_bps=topology.planes * topology.nominal_rate_gbps * 1e9,
        mtu=topology.mtu,
    )
    return CcProfile(profile.name, {**defaults, **profile.params})
