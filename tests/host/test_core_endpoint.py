"""Endpoint requests after mrc_ctl_ep_batch_send_wait: connectionless EV probes addressed by
source, destination and EV (SRV6, SRV6 with a reduced SRH, STEV and UDP), the responder's
service time taken off the RTT, batches that time out; port status: a NIC down retires its
plane's EVs at once and tells the peers (PORT_STATUS_UPDATE), and its EVs come back through
probes."""

from __future__ import annotations

from typing import Any

import pytest
from scapy.layers.inet6 import IPv6, IPv6ExtHdrSegmentRouting
from scapy.layers.l2 import Ether

from host.transport import wire
from host.transport.api import Context
from host.transport.endpoint import EndpointError, EpRequest, SpineRoutes
from host.transport.events import EvStateChanged, PortStatusChanged
from host.transport.evs import EvFormat, EvFormatProfile, EvState, GeneratedEvProfile
from topologies import Fabric

BASE = 0x7F00_0000_0000


def pattern(n: int, seed: int) -> bytes:
    return bytes((i * 5 + seed) & 0xFF for i in range(n))


def test_ev_probes_in_stev_and_srv6(make_net: Any, fabric: Fabric) -> None:
    net = make_net(seed=1)
    h0 = net.host("h0")
    net.host("h2")
    a, b = fabric.host("h0"), fabric.host("h2")
    carrier = int(fabric.paths("h0", "h2")[3].carrier)  # plane 1, spine 1
    requests = [
        EpRequest.parse(1, a.nic(0).address, b.nic(0).address, 0x12345678, EvFormat.STEV),
        EpRequest.parse(2, a.nic(1).address, b.nic(1).address, 0x77, "udp", port=2),
        EpRequest.parse(3, str(a.nic(1).address), b.nic(1).address, carrier, EvFormat.SRV6),
    ]
    batch = h0.ep_batch_send("ev_probe", requests, dscp=46, timeout=1e-3)
    net.sim.kick("h0")
    net.run(1.0, stop=batch.complete)
    responses = h0.ep_batch_end(batch)
    assert sorted(r.req_id for r in responses) == [1, 2, 3]
    by_id = {r.req_id: r for r in responses}
    assert by_id[1].port == 1 and by_id[2].port == 2 and by_id[3].port == 2
    assert all(r.adj_svc_time and r.rtt > 0 and r.op == "ev_probe" for r in responses)
    # rtt_ns is real-fabric (protocol) time; rtt is the driver's (the in-memory network's)
    assert all(abs(r.rtt_ns - r.rtt / net.sim.dilation * 1e9) <= 1 for r in responses)
    stats = net.hosts["h2"].stats()
    assert stats["ep_requests_answered"] == 3 and stats["drops"].get("unknown_qp", 0) == 0


def test_probe_batch_times_out_on_a_dead_port(make_net: Any, fabric: Fabric) -> None:
    net = make_net(seed=1)
    h0 = net.host("h0")
    net.host("h2")
    net.sim.fail_link("h2", "t0-p0-r1", start=0.0)
    a, b = fabric.host("h0"), fabric.host("h2")
    batch = h0.ep_batch_send("ev_probe", [
        EpRequest.parse(7, a.nic(0).address, b.nic(0).address, 1),
        EpRequest.parse(8, a.nic(1).address, b.nic(1).address, 1),
    ], timeout=100e-6)  # fmt: skip
    net.sim.kick("h0")
    net.run(batch.deadline_driver, stop=batch.complete)
    assert not batch.complete()
    assert [r.req_id for r in h0.ep_batch_end(batch)] == [8]


def test_request_errors(fabric: Fabric) -> None:
    ctx = Context("h0", fabric.host("h0").nics)
    a, b = fabric.host("h0"), fabric.host("h2")
    good = EpRequest.parse(1, a.nic(0).address, b.nic(0).address, 1)
    for bad, words in [
        ((1, b.nic(0).address, a.nic(0).address, 1), "no NIC of h0"),
        ((1, a.nic(0).address, b.nic(0).address, 1, "stev", 2), "port 2"),
        ((1, a.nic(0).address, b.nic(0).address, 1 << 32), "32 bits"),
        ((0xFF01, a.nic(0).address, b.nic(0).address, 1), "request id"),
        ((1, a.nic(0).address, "nonsense", 1), "IPv6"),
    ]:
        with pytest.raises(EndpointError, match=words):  # when made, or when sent
            ctx.ep_batch_send("ev_probe", [EpRequest.parse(*bad)])
    with pytest.raises(EndpointError, match="operation"):
        ctx.ep_batch_send("ping", [good])
    with pytest.raises(EndpointError, match="unique"):
        ctx.ep_batch_send("ev_probe", [good, good])


def test_service_time_is_taken_off_the_rtt(fabric: Fabric) -> None:
    a = Context("h0", fabric.host("h0").nics)
    b = Context("h2", fabric.host("h2").nics)
    request = EpRequest.parse(
        5, fabric.host("h0").nic(0).address, fabric.host("h2").nic(0).address, 9
    )
    batch = a.ep_batch_send("ev_probe", [request], timeout=10.0, now=0.0)
    [(plane, frame)] = a.frames_to_send(0.0)
    b.receive_frame(plane, frame, 1.0)  # arrives at 1.0 ...
    [(plane, response)] = b.frames_to_send(1.5)  # ... leaves at 1.5: 0.5 s of service
    pkt = wire.parse(response)
    assert isinstance(pkt, wire.EndpointPacket) and pkt.response and pkt.service_ns == 500_000_000
    assert pkt.outer.dst == fabric.host("h0").nic(0).address.packed
    a.receive_frame(plane, response, 2.0)
    [r] = a.ep_batch_end(batch)
    assert r.rtt == pytest.approx(1.5) and r.rtt_ns == 1_500_000_000
    # a response nobody waits for is dropped
    a.receive_frame(plane, response, 2.1)
    assert a.stats()["drops"]["unknown_ep_response"] == 1


@pytest.mark.parametrize("fmt", [EvFormatProfile(), EvFormatProfile(EvFormat.STEV)],
                         ids=["srv6", "stev"])  # fmt: skip
def test_nic_down_retires_its_plane_at_once_and_tells_the_peer(
    make_net: Any, fmt: EvFormatProfile
) -> None:
    net = make_net(seed=4)
    flow = net.connect("h0", "h2", ev_profile=GeneratedEvProfile(32, fmt=fmt))
    back = flow.receiver  # h2's QP towards h0
    data = pattern(4 << 20, 3)
    flow.sender.post_write(data, BASE, flow.region.rkey, wr_id=1)
    net.sim.kick("h0")
    net.run(0.05)
    t_down = net.sim.now
    net.sim.fail_link("h0", "t0-p0-r0", start=t_down, end=t_down + 0.2)
    changed = net.hosts["h0"].set_port_state(0, False, now=t_down)
    assert changed == 16 and net.hosts["h0"].ports_up == [1]
    # at once, before any loss: every EV of plane 0, whatever ev_min_active says
    plane0 = [s for s in flow.sender.ev_table.slots if s.plane == 0]
    assert all(s.state is EvState.ASSUMED_BAD for s in plane0)
    net.sim.kick("h0")
    net.run(t_down + 0.1)
    # the peer heard it (PORT_STATUS_UPDATE on plane 1) and stopped sending on plane 0 too
    assert all(s.state is EvState.ASSUMED_BAD for s in back.ev_table.slots if s.plane == 0)
    net.drain_events()
    reasons = {e.reason for e in net.events if isinstance(e, EvStateChanged)}
    assert {"port_down", "peer_port_down"} <= reasons and not reasons & {"sack", "late", "rto"}
    peer_events = [e for e in net.events if isinstance(e, PortStatusChanged)]
    assert {(e.host, e.plane, e.up) for e in peer_events} >= {("h0", 0, False)}
    assert net.hosts["h0"].stats()["rtos"] == 0
    # the link comes back: port up, the EVs are probed back to GOOD, on both sides
    t_up = t_down + 0.2
    net.run(t_up)
    net.hosts["h0"].set_port_state(0, True, now=t_up)
    net.sim.kick("h0")
    net.run(t_up + 5.0, stop=lambda: len(net.cqs["h0"]) == 1)
    net.run(net.sim.now + 0.05)
    assert net.cqs["h0"].poll()[0].status == "ok"
    assert flow.region.read(BASE, len(data)) == data
    assert flow.sender.ev_table.counts()["good"] == 32
    assert back.ev_table.counts()["good"] == 32


def test_a_qp_that_never_carried_traffic_tells_nobody_and_needs_no_probes(
    fabric: Fabric,
) -> None:
    a = Context("h0", fabric.host("h0").nics)
    qa = a.create_qp("h2", fabric.paths("h0", "h2"), cq=a.create_cq(), remote_qpn=0x123)
    assert a.set_port_state(0, False, now=0.0) == 64
    assert a.frames_to_send(0.0) == []  # no port status to a peer it never talked to
    assert a.set_port_state(0, True, now=1.0) == 64
    assert qa.ev_table.counts()["good"] == 128  # back at once: no probes to send
    a.handle_timer(1.0)  # the probe timers of the retirement find nothing left to probe
    assert a.frames_to_send(1.0) == [] and a.next_timer() is None


def test_port_status_updates_are_sent_again_until_answered(fabric: Fabric) -> None:
    a = Context("h0", fabric.host("h0").nics)
    b = Context("h2", fabric.host("h2").nics)
    qa = a.create_qp("h2", fabric.paths("h0", "h2"), cq=a.create_cq())
    qb = b.create_qp("h0", fabric.paths("h2", "h0"), cq=b.create_cq())
    qa.connect(qb.qpn)
    qb.connect(qa.qpn)
    region = b.register_region(BASE, 4096)
    qa.post_write(b"x" * 64, BASE, region.rkey)  # the QPs talk: a's port status concerns b
    for plane, frame in a.frames_to_send(0.0):
        b.receive_frame(plane, frame, 0.0)
    assert qa.carried_traffic and qb.carried_traffic
    a.set_port_state(1, False, now=0.0)
    lost = [(p, f) for p, f in a.frames_to_send(0.0)
            if isinstance(wire.parse(f), wire.EndpointPacket)]  # fmt: skip
    # the first round is lost
    assert [wire.parse(f).op for _, f in lost] == [wire.EP_OP_PORT_STATUS]  # plane 1 is down
    due = a.config.probe_interval
    assert (a.next_timer() or 0.0) <= due
    a.handle_timer(due)
    updates = [(p, f) for p, f in a.frames_to_send(due)
               if isinstance(wire.parse(f), wire.EndpointPacket)]  # fmt: skip
    assert len(updates) == 1  # the next round, on another EV (ECMP takes it another way)
    assert wire.parse(updates[0][1]).ev != wire.parse(lost[0][1]).ev
    plane, frame = updates[0]
    b.receive_frame(plane, frame, due + 1e-6)
    assert all(s.state is EvState.ASSUMED_BAD for s in qb.ev_table.slots if s.plane == 1)
    [(plane, response)] = [
        (p, f)
        for p, f in b.frames_to_send(due + 2e-6)
        if isinstance(wire.parse(f), wire.EndpointPacket)
    ]
    a.receive_frame(plane, response, due + 3e-6)
    # answered: no more rounds (only the QP's own timers, the probes of plane 1, remain)
    a.handle_timer(due + a.config.probe_interval)
    rounds = [f for _, f in a.frames_to_send(due + a.config.probe_interval)
              if isinstance(wire.parse(f), wire.EndpointPacket)]  # fmt: skip
    assert rounds == []


@pytest.mark.parametrize("dst", ["h2", "h1"], ids=["racks", "rack"])
def test_ev_probe_with_an_srh(make_net: Any, fabric: Fabric, dst: str) -> None:
    """An SRV6+SRH EV (carrier << 128 | segment) sends the request to the carrier with the
    reduced SRH data frames carry; End at the turn takes it on; the response comes back on a
    plain route (no SRH)."""
    net = make_net(seed=1)
    h0, h2 = net.host("h0"), net.host(dst)
    a, b = fabric.host("h0"), fabric.host(dst)
    path = fabric.paths("h0", dst)[-1]  # plane 1 (the last spine across racks)
    ev = int(path.srh_carrier) << 128 | int(path.srh_segment)
    fmt = EvFormatProfile(EvFormat.SRV6, srh=True)
    requests = [
        EpRequest.parse(1, a.nic(1).address, b.nic(1).address, ev, fmt),
        EpRequest.parse(2, a.nic(1).address, b.nic(1).address, ev, "srv6+srh", port=2),
    ]
    batch = h0.ep_batch_send("ev_probe", requests, dscp=46, timeout=1e-3)
    sent = h0.frames_to_send(net.sim.now)
    assert [plane for plane, _ in sent] == [1, 1]
    for _, frame in sent:
        decoded = Ether(bytes(frame))
        ip6, sr = decoded[IPv6], decoded[IPv6ExtHdrSegmentRouting]
        assert ip6.dst == str(path.srh_carrier) and ip6.nh == wire.IPPROTO_ROUTING
        assert (sr.segleft, sr.lastentry, sr.addresses) == (1, 0, [str(path.srh_segment)])
        assert int.from_bytes(frame[18:20], "big") == len(frame) - wire.OFF_UDP
        assert isinstance(wire.parse(frame), wire.EndpointPacket)
        net.sim.inject("h0", 1, frame)
    net.run(1.0, stop=batch.complete)
    responses = h0.ep_batch_end(batch)
    assert sorted(r.req_id for r in responses) == [1, 2]
    assert all(r.port == 2 and r.adj_svc_time and r.rtt > 0 for r in responses)
    assert h2.stats()["ep_requests_answered"] == 2
    assert net.sim.counters.get("drop_sid_end", 0) == 0
    stats = h0.stats()
    assert stats["ep_requests_sent"] == 2
    assert stats["bytes_sent"] == 2 * (wire.CTRL_FRAME_LEN + wire.SRH_LEN)


def test_srh_ev_probe_errors(fabric: Fabric) -> None:
    ctx = Context("h0", fabric.host("h0").nics)
    a, b = fabric.host("h0"), fabric.host("h2")
    path = fabric.paths("h0", "h2")[1]
    carrier, segment = int(path.srh_carrier), int(path.srh_segment)
    for ev in (carrier, segment << 128, 1 << 256):  # no segment, no carrier, too wide
        with pytest.raises(EndpointError, match="SRV6\\+SRH EV"):
            bad = EpRequest.parse(1, a.nic(1).address, b.nic(1).address, ev, "srv6+srh")
            ctx.ep_batch_send("ev_probe", [bad])
    with pytest.raises(EndpointError, match="srv6\\+srh"):
        ctx.ep_batch_send("ev_probe", [EpRequest.parse(1, a.nic(1).address, b.nic(1).address, 1,
                                                 "srv6+nope")])  # fmt: skip


# -- SRV6 responses back through the request's spine ---------------------------------------------


def _routed_host(net: Any, fabric: Fabric, name: str) -> Context:
    """``name``'s context with its spine routes (as the agent builds it)."""
    me = fabric.host(name)
    routes = SpineRoutes.from_paths(
        p for peer in fabric.hosts if peer.name != name for p in fabric.paths(name, peer.name)
    )
    ctx = Context(name, me.nics, config=net.config, seed=me.index + 7, routes=routes)
    net.sim.attach(ctx)
    net.hosts[name] = ctx
    net.cqs[name] = ctx.create_cq()
    return ctx


@pytest.mark.parametrize("routed", [True, False], ids=["spine-routes", "plain-address"])
def test_srv6_probe_answers_come_back_through_the_probed_spine(
    make_net: Any, fabric: Fabric, routed: bool
) -> None:
    """With the link between rack 0's plane-0 leaf and spine 0 failed, probes of the paths
    through spine 1 (from h0 and h1 to h2 and h3) are all answered when the responses return
    through spine 1; answered to the plain address, the destination leaf's ECMP hash sends
    some of them over the failed link."""
    net = make_net(seed=3)
    senders = ("h0", "h1")
    ctxs = {}
    for name in ("h0", "h1", "h2", "h3"):
        ctx = _routed_host(net, fabric, name) if routed else net.host(name)
        ctxs[name] = ctx
    net.sim.fail_link("t0-p0-r0", "t1-p0-s0", start=0.0)
    answered = 0
    for src in senders:
        requests = [
            EpRequest.parse(i + 1, fabric.host(src).nic(0).address, p.dst_nic.address, int(p.carrier),
                      "srv6")
            for i, p in enumerate(
                p for dst in ("h2", "h3") for p in fabric.paths(src, dst) if p.label == "p0-s1"
            )
        ]  # fmt: skip
        assert len(requests) == 2
        batch = ctxs[src].ep_batch_send("ev_probe", requests, timeout=200e-6)
        net.sim.kick(src)
        net.run(net.sim.now + 2.0, stop=batch.complete)
        answered += len(ctxs[src].ep_batch_end(batch))
    if routed:
        assert answered == 4
    else:
        assert answered < 4  # the hash put an answer on the failed link


def test_request_fields_are_checked_when_made(fabric: Fabric) -> None:
    a, b = fabric.host("h0"), fabric.host("h2")
    src, dst = a.nic(0).address, b.nic(0).address
    for args, field in [
        ((0x10000, src, dst, 1), "req_id"),
        ((-1, src, dst, 1), "req_id"),
        ((1, "h0", dst, 1), "sgid"),
        ((1, src, dst, -1), "ev"),
        ((1, src, dst, 1, "stev", 0), "port"),
        ((1, src, dst, 1, "stev", None, 1 << 32), "port_status"),
        ((1, src, dst, 1, "tcp"), "ev_fmt"),
    ]:
        with pytest.raises(EndpointError, match=f"field '{field}'"):
            EpRequest.parse(*args)  # type: ignore[arg-type]
    with pytest.raises(EndpointError, match="field 'sgid'"):
        EpRequest(1, str(src), dst, 1)  # type: ignore[arg-type]  # typed: parse takes text
    request = EpRequest.parse(1, str(src), dst.packed, 1, "udp", 1)
    assert (request.sgid, request.dgid, request.ev_fmt.name) == (src, dst, "udp")


def test_requests_name_another_host_on_the_same_plane(fabric: Fabric) -> None:
    """With the fabric's paths the context knows the other hosts' NICs: a request goes to one of
    them on its source's plane (planes are disjoint), and no source (::) picks that plane."""
    routes = SpineRoutes.from_paths(
        p for peer in ("h1", "h2", "h3") for p in fabric.paths("h0", peer)
    )
    ctx = Context("h0", fabric.host("h0").nics, routes=routes)
    a, b = fabric.host("h0"), fabric.host("h2")
    for args, words in [
        ((1, a.nic(0).address, "fd00::99", 1), "not another testbed host"),
        ((1, a.nic(0).address, a.nic(1).address, 1), "not another testbed host"),
        ((1, a.nic(1).address, b.nic(0).address, 1), "planes are disjoint"),
    ]:
        with pytest.raises(EndpointError, match=words) as info:
            ctx.ep_batch_send("ev_probe", [EpRequest.parse(*args)])
        assert info.value.index == 0
    batch = ctx.ep_batch_send("ev_probe", [EpRequest.parse(2, "::", b.nic(1).address, 1)])
    assert [plane for plane, _ in ctx.frames_to_send(0.0)] == [1]
    ctx.ep_batch_end(batch)
    with pytest.raises(EndpointError, match="port_status") as info:
        ctx.ep_batch_send("port_status_update", [
            EpRequest.parse(3, a.nic(0).address, b.nic(0).address, 1, port_status=1 << 9),
        ])  # fmt: skip
