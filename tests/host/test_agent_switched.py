"""Two mrc-host agents with the real data plane between them: each plane's leaf is an mrc-switch.

h0 and h1 of topologies/small.yaml sit in rack 0; t0-p0-r0 and t0-p1-r0 run as switchmodel
processes in namespace ``ag<pid>-sw`` with the tables the controller computes from the fabric.
The agents run in normal (not direct) mode: a frame reaches a NIC only once the leaf has
shifted the carrier down to the NIC's address.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator

import pytest
from support.fabric import SMALL_TOPOLOGY
from support.hostnet import agents_running, intact_write, skip_without_netns

from experiments.hostnets import SwitchedRack
from host.transport import wire
from topologies import Fabric

pytestmark = pytest.mark.netns

skip_without_netns()
if importlib.util.find_spec("switchmodel.cli") is None:
    pytest.skip("the switchmodel (mrc-switch) is not available", allow_module_level=True)


@pytest.fixture(scope="module")
def rack(fabric: Fabric, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SwitchedRack]:
    work = tmp_path_factory.mktemp("switched")
    net = SwitchedRack(fabric, SMALL_TOPOLOGY, ("h0", "h1"), prefix="ag", workdir=work)
    yield from agents_running(net, {"h1": ["--pcap", str(work / "h1.pcap")]})


def test_transfer_through_the_leaves_of_every_plane(rack: SwitchedRack, fabric: Fabric) -> None:
    size = 1 << 20
    with rack.client("h0") as h0, rack.client("h1") as h1:
        intact_write(h0, h1, "h1", "viaswitch", size, seed=17, timeout=90, imm=5)
        s0, s1 = h0.stats()["stats"], h1.stats()["stats"]
    for stats in (s0, s1):
        assert stats["agent"]["direct_accepted"] == 0
        for plane in stats["planes"].values():
            assert plane["misaddressed"] == 0
            assert plane["rx_packets"] > 0 and plane["tx_packets"] > 0
    assert any(r["imm"] == 5 for r in s1["received_imm"])
    # what arrived at h1 went through a leaf: carrier shifted to the NIC address, hop limit - 1
    from test_agent_capture import read_pcap

    nics = {nic.address.packed for nic in fabric.host("h1").nics}
    arrived = [
        p
        for p in (wire.parse(f) for f in read_pcap(rack.workdir / "h1.pcap"))
        if isinstance(p, wire.DataPacket)
    ]
    assert arrived
    assert all(p.outer.dst in nics for p in arrived)
    assert all(p.outer.hop_limit == 63 for p in arrived)
    assert {p.outer.dst for p in arrived} == nics  # both planes


def test_denied_plane_through_the_switch(rack: SwitchedRack) -> None:
    with rack.client("h0") as h0, rack.client("h1") as h1:
        h0.set_ev("h1", "DENIED", path="p1")
        try:
            from test_agent_capture import read_pcap

            capture = rack.workdir / "h1.pcap"  # h1 captures what arrives through the leaves
            seen = len(read_pcap(capture))
            intact_write(h0, h1, "h1", "p0only", 1 << 18, seed=8, timeout=90)
            arrived: dict[int, int] = {0: 0, 1: 0}
            for frame in read_pcap(capture)[seen:]:
                packet = wire.parse(frame)
                if isinstance(packet, wire.DataPacket):
                    arrived[packet.plane_hint] += 1
            assert arrived[1] == 0 and arrived[0] >= 64  # every data packet came over plane 0
        finally:
            h0.set_ev("h1", "GOOD", path="p1")
