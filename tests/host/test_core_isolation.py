"""What reaches a QP of the transport core: packets from its peer only, a refused packet
consumes nothing, regions of its protection domain only, port status updates that leave it a
way to its peer (docs/ocp-api.md, "Limits and isolation")."""

from __future__ import annotations

from typing import Any

from host.transport import wire
from host.transport.endpoint import EpRequest
from host.transport.events import PortStatusRefused
from host.transport.evs import EvState
from topologies import Fabric

BASE = 0x7F00_0000_0000


def data_frame(flow: Any, psn: int, payload: bytes, *, rkey: int | None = None,
               source: bytes | None = None) -> tuple[int, bytes]:  # fmt: skip
    """A one-packet WRITE of ``payload`` to the start of ``flow``'s region at ``psn``, built on
    the sender's own first EV, with another ``rkey`` or IPv6 ``source`` when given."""
    slot = flow.sender.ev_table.slots[0]
    frame = bytearray(
        wire.encode_data(
            slot.prefix, flow.receiver.qpn, psn, True, BASE,
            flow.region.rkey if rkey is None else rkey, None, 0, slot.plane, slot.spine_hint,
            slot.wire, 5, len(payload), 0, 0, payload,
        )
    )  # fmt: skip
    if source is not None:
        frame[wire.OFF_IPV6 + 8 : wire.OFF_IPV6 + 24] = source
    return slot.plane, bytes(frame)


def test_a_packet_from_another_host_is_dropped_and_consumes_no_psn(
    make_net: Any, fabric: Fabric
) -> None:
    net = make_net()
    flow = net.connect("h0", "h2")
    h2 = net.hosts["h2"]
    stranger = fabric.host("h1").nic(0).address.packed
    plane, forged = data_frame(flow, 0, b"F" * 1024, source=stranger)
    h2.receive_frame(plane, forged, 1.0)
    assert h2.stats()["drops"]["not_from_peer"] == 1
    assert flow.region.read(BASE, 4) == bytes(4) and h2.frames_to_send(1.0) == []
    # the genuine packet at that PSN is placed (and acknowledged)
    plane, genuine = data_frame(flow, 0, b"G" * 1024)
    h2.receive_frame(plane, genuine, 1.0)
    assert flow.region.read(BASE, 1024) == b"G" * 1024
    (ack,) = [wire.parse(f) for _, f in h2.frames_to_send(1.0)]
    assert isinstance(ack, wire.AckPacket) and ack.cum_psn == 1


def test_a_packet_refused_by_the_rkey_check_consumes_no_psn(make_net: Any) -> None:
    net = make_net()
    flow = net.connect("h0", "h2")
    h2 = net.hosts["h2"]
    plane, bad = data_frame(flow, 0, b"B" * 1024, rkey=flow.region.rkey ^ 0x5A5A)
    h2.receive_frame(plane, bad, 1.0)
    (nack,) = [wire.parse(f) for _, f in h2.frames_to_send(1.0)]
    assert isinstance(nack, wire.NackPacket) and nack.flags & wire.FLAG_ACCESS
    assert h2.stats()["drops"]["bad_rkey"] == 1
    plane, genuine = data_frame(flow, 0, b"G" * 1024)
    h2.receive_frame(plane, genuine, 1.0)
    assert flow.region.read(BASE, 1024) == b"G" * 1024
    assert h2.stats()["drops"].get("duplicate", 0) == 0


def test_a_region_is_written_by_the_qps_of_its_domain_only(make_net: Any) -> None:
    net = make_net()
    h2 = net.host("h2")
    other = h2.register_region(BASE + (1 << 30), 4096, domain=7)
    flow = net.connect("h0", "h2")
    flow.sender.post_write(b"x" * 4096, other.addr, other.rkey, wr_id=1)
    net.sim.kick("h0")
    net.run(1.0, stop=lambda: len(net.cqs["h0"]) == 1)
    assert net.cqs["h0"].poll()[0].status == "remote_access_error"
    assert other.read(other.addr, 4096) == bytes(4096)
    assert h2.stats()["drops"]["other_domain"] >= 1


def test_rkeys_are_secret_and_never_handed_out_twice(make_net: Any) -> None:
    net = make_net()
    h2 = net.host("h2")
    first = h2.register_region(BASE + (1 << 30), 4096)
    h2.deregister_region(first.rkey)
    again = [h2.register_region(BASE + (1 << 30), 4096).rkey for _ in range(64)]
    assert first.rkey not in again and len(set(again)) == 64
    # a context built the same way (a restarted host) hands out other rkeys
    restarted = make_net()
    restarted.host("h2")
    assert restarted.regions["h2"].rkey != net.regions["h2"].rkey


def port_status(net: Any, fabric: Fabric, sender: str, plane: int, mask: int) -> None:
    """``sender`` tells h2, from its NIC of ``plane``, that its ports ``mask`` are up."""
    ctx = net.host(sender)
    request = EpRequest.parse(
        1, fabric.host(sender).nic(plane).address, fabric.host("h2").nic(plane).address, 1,
        port_status=mask,
    )  # fmt: skip
    batch = ctx.ep_batch_send("port_status_update", [request], now=net.sim.now)
    net.sim.kick(sender)
    net.run(net.sim.now + 0.01, stop=batch.complete)
    ctx.ep_batch_end(batch)


def test_a_port_status_update_cannot_take_every_ev_away(make_net: Any, fabric: Fabric) -> None:
    net = make_net()
    flow = net.connect("h0", "h2")
    back = flow.receiver  # h2's QP towards h0
    # h0 says, on port 1, that port 1 is down: contradicts itself, refused and reported
    port_status(net, fabric, "h0", 0, 0)
    assert all(s.state is not EvState.ASSUMED_BAD for s in back.ev_table.slots)
    assert net.hosts["h2"].stats()["drops"]["port_status_refused"] == 1
    assert [e.reason for e in net.events if isinstance(e, PortStatusRefused)] == [
        "arrival_port_down"
    ]
    # h1 has no QP with h2: its update is counted and changes nothing
    port_status(net, fabric, "h1", 0, 1 << 2)
    assert net.hosts["h2"].stats()["drops"]["port_status_not_from_peer"] == 1
    # an update that leaves a way is taken: port 1 down, said on port 2
    port_status(net, fabric, "h0", 1, 1 << 2)
    down = {s.plane for s in back.ev_table.slots if s.state is EvState.ASSUMED_BAD}
    assert down == {0}
