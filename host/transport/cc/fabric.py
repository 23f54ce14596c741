"""CC profiles fitted to a fabric: NSCC's defaults from the topology, in protocol time.

The UET reference derives NSCC's parameters from the network's base RTT and link rate
(:func:`host.transport.cc.nscc.uet_defaults`). On the testbed both come from the topology, and
the base RTT is divided by the time dilation (a real-fabric time, like every protocol time):

- the base RTT is the topology's unloaded round trip of a full-size data frame and its ACK
  between racks (:attr:`topologies.Topology.base_rtt`), as uet-htsim's ``main_uec.cpp``
  computes it (``calculate_rtt``: the diameter's latency both ways plus a data frame and an
  ACK serialised at every hop) and gives it to every sender (``initNscc``); NSCC then keeps
  the smallest RTT it measures (``cc_learn_base_rtt``, :class:`host.transport.cc.nscc.Nscc`);
- with ``cc_learn_base_rtt`` off (the stack profile ``testbed-2026``) it is the testbed's
  earlier *loaded* round trip, fixed: the unloaded one plus one full-size frame time per link
  (an ACK waits behind the frame being sent at every hop when collectives load every link);
  it measured 0.91 of the capacity of a permutation on the in-memory fabric where the
  unloaded one gave 0.78 (docs/host-stack.md);
- the rate is the host's, every plane's nominal rate together (one QP sprays over all planes).
"""

from __future__ import annotations

from host.transport.cc.base import CcProfile
from host.transport.cc.nscc import uet_defaults
from host.transport.config import StackConfig
from topologies import Topology
from topologies.config import BASE_RTT_LINKS

NSCC_NAMES = ("nscc", "uet-1.0-nscc")


def fabric_base_rtt(topology: Topology, *, loaded: bool = False) -> float:
    """NSCC's base RTT for ``topology`` in protocol seconds: the unloaded round trip, or with
    ``loaded`` the testbed's earlier loaded one (see the module docstring)."""
    rtt = topology.base_rtt
    if loaded:
        rtt += BASE_RTT_LINKS * topology.frame_time
    return rtt / topology.dilation


def fabric_cc_profile(
    topology: Topology, profile: CcProfile, config: StackConfig | None = None
) -> CcProfile:
    """``profile`` with NSCC's defaults for ``topology`` under the fields it sets, for QPs of
    ``config`` (default: the default config; its ``cc_learn_base_rtt`` chooses the base RTT);
    other algorithms are returned as they are."""
    if profile.name not in NSCC_NAMES:
        return profile
    learn = (config or StackConfig()).cc_learn_base_rtt
    defaults = uet_defaults(
        base_rtt=fabric_base_rtt(topology, loaded=not learn),
        link_rate_bps=topology.planes * topology.nominal_rate_gbps * 1e9,
        mtu=topology.mtu,
    )
    return CcProfile(profile.name, {**defaults, **profile.params})
