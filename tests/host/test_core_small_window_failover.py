"""A link failure under the ``uet`` stack profile when the window holds only a few packets.

The ``uet`` profile learns NSCC's base RTT from the smallest sample (uet-htsim
``update_base_rtt``), so ``max_cwnd`` follows the measured round trip and may hold only a few
MTUs. With fewer packets in flight than ``reorder_threshold``, no later packet ever overtakes
a packet lost on a failed path far enough for the ``late`` rule, and the tail-loss probe
re-sent each such packet on another EV: its copy's ACK freed the original, no loss was judged,
and the failed path was never retired (one packet at a time crossed it, each rescued by a
probe). A probe that repairs an overtaken packet now counts as its loss (RFC 8985, 7.4.2), and
a tail's copy takes the tail's own EV, so that a window of one packet (every packet a tail)
finds the failed path by the ACK timeout.

A short packet's RTT lacks most of the serialisation of a full-size one: taken as the base RTT
it shrank ``max_cwnd`` to one MTU on a fabric without link latency. Only full-size packets now
lower the base RTT.
"""

from __future__ import annotations

from typing import Any

import pytest

from host.transport.cc import CcProfile
from host.transport.cc.fabric import fabric_cc_profile
from host.transport.config import LEGACY_PROFILE, StackConfig
from host.transport.events import EvStateChanged
from topologies import Fabric

REGION = 0x7F00_0000_0000
FAILED = ("t0-p0-r0", "t1-p0-s0")  # the first hop of path p0-s0 from rack 0
MSG = 1 << 16
COUNT = 64


@pytest.fixture
def fabric(fabric: Fabric) -> Fabric:
    """The small fabric as the OCP fabric test runs it: 20 Mb/s links and no link latency, so
    serialisation is the whole round trip."""
    return Fabric(fabric.topology.with_(link={"rate_mbps": 20, "delay_us": 0}))


def fail_mid_transfer(net: Any, small: int = 0, **qp: Any) -> tuple[Any, list[EvStateChanged]]:
    """h0 writes ``COUNT`` x 64 KiB to h2 (after one WRITE of ``small`` bytes, if any) while
    p0-s0's first link fails for good half a second in; the flow and h0's retirements."""
    flow = net.connect("h0", "h2", **qp)
    if small:
        flow.sender.post_write(bytes(small), REGION, flow.region.rkey, wr_id=1 << 20)
        net.sim.kick("h0")
        net.run(0.25, stop=lambda: len(net.cqs["h0"]) == 1)
        assert [c.status for c in net.cqs["h0"].poll()] == ["ok"]
    net.sim.fail_link(*FAILED, start=0.5)
    for i in range(COUNT):
        flow.sender.post_write(bytes(MSG), REGION + i * MSG, flow.region.rkey, wr_id=i)
    net.sim.kick("h0")
    done: list[Any] = []

    def finished() -> bool:
        done.extend(net.cqs["h0"].poll(COUNT))
        return len(done) == COUNT

    net.run(60.0, stop=finished)
    assert len(done) == COUNT and {c.status for c in done} == {"ok"}
    changes = [e for e in net.events if isinstance(e, EvStateChanged) and e.qpn == flow.sender.qpn]
    return flow, [e for e in changes if e.new == "assumed_bad"]


def assert_retired_exactly_the_failed_path(retired: list[EvStateChanged]) -> None:
    assert {e.path for e in retired} == {"p0-s0"} and len(retired) == 32
    assert retired[0].reason in ("sack", "late", "rto")
    assert {e.reason for e in retired[1:]} == {"path"}
    assert retired[0].time >= 0.5


@pytest.mark.parametrize("mtus", [1, 2, 3])
def test_a_window_of_a_few_packets_retires_the_failed_path(make_net: Any, mtus: int) -> None:
    net = make_net(seed=3)
    cc = fabric_cc_profile(net.sim.topology, CcProfile("nscc", {"max_cwnd": mtus * 4096}))
    flow, retired = fail_mid_transfer(net, cc=cc)
    assert flow.sender.cc.cwnd <= mtus * 4096
    assert_retired_exactly_the_failed_path(retired)
    # found by a probe's copy: the lost original was judged, not only repaired
    assert net.hosts["h0"].stats()["tail_loss_probes"] >= 1


@pytest.mark.parametrize("profile", ["uet", LEGACY_PROFILE])
def test_a_short_write_leaves_the_base_rtt_and_the_failover_alone(
    make_net: Any, profile: str
) -> None:
    net = make_net(seed=3, config=StackConfig.profile(profile))
    flow, retired = fail_mid_transfer(net, small=64)
    algo = flow.sender.cc
    # the base RTT is a full-size frame's: at least the four links' serialisation of one
    topology = net.sim.topology
    assert algo.base_rtt >= 4 * topology.frame_time / topology.dilation
    assert algo.max_cwnd >= 8 * 4096
    assert_retired_exactly_the_failed_path(retired)
    assert net.sim.now < 3.0  # 4 MiB at 2 x 20 Mb/s: about 1.7 s, not ten times that
