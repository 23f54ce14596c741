"""CC profiles fitted to a fabric: NSCC's defaults from the topology, in protocol time.

The UET reference derives NSCC's parameters from the network's base RTT and link rate
(:func:`host.transport.cc.nscc.uet_defaults`). On the testbed both come from the topology: the
base RTT is its unloaded round trip divided by the time dilation (so it is a real-fabric time,
like every protocol time), the rate the host's, every plane's nominal rate together (one QP
sprays over all planes).
"""

from __future__ import annotations

from host.transport.cc.base import CcProfile
from host.transport.cc.nscc import uet_defaults
from topologies import Topology

NSCC_NAMES = ("nscc", "uet-1.0-nscc")


def fabric_cc_profile(topology: Topology, profile: CcProfile) -> CcProfile:
    """``profile`` with NSCC's defaults for ``topology`` under the fields it sets; other
    algorithms are returned as they are."""
    if profile.name not in NSCC_NAMES:
        return profile
    defaults = uet_defaults(
        base_rtt=topology.base_rtt / topology.dilation,
        link_rate_bps=topology.planes * topology.nominal_rate_gbps * 1e9,
        mtu=topology.mtu,
    )
    return CcProfile(profile.name, {**defaults, **profile.params})
