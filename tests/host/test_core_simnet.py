"""The in-memory fabric itself: routing by uSID carrier along the fabric model's paths,
trimming, ECN marking and link failures."""

from __future__ import annotations

from typing import Any

from host.transport import wire
from sim.network import SimNet


def data_frame(path: Any, dscp: int = wire.DSCP_TRIMMABLE, payload: int = 4096) -> bytearray:
    nic = path.src_nic
    prefix = wire.frame_prefix(
        src_mac=wire.mac_bytes(nic.mac), dst_mac=wire.mac_bytes(nic.gateway_mac),
        src=nic.address.packed, dst=path.carrier.packed, dscp=dscp, ecn=wire.ECN_ECT0, ev=1,
    )  # fmt: skip
    return wire.encode_data(prefix, 5, 0, False, 0, 1, None, 0, path.plane, 0, 1, 1, payload, 0, 0,
                            bytes(payload))  # fmt: skip


class Sink:
    """A stand-in host context that records what arrives."""

    def __init__(self, name: str) -> None:
        self.host = name
        self.got: list[tuple[int, bytes]] = []

    def receive_frame(self, plane: int, frame: bytes, now: float) -> None:
        self.got.append((plane, bytes(frame)))

    def frames_to_send(self, now: float) -> list[tuple[int, bytes]]:
        return []

    def next_timer(self) -> None:
        return None


def test_every_path_is_followed_hop_by_hop(fabric: Any) -> None:
    for src, dst in (("h0", "h2"), ("h1", "h0"), ("h3", "h1")):
        for path in fabric.paths(src, dst):
            net = SimNet(fabric, seed=1)
            sink = Sink(dst)
            net.attach(sink)  # type: ignore[arg-type]
            net.inject(src, path.plane, data_frame(path))
            net.run(1.0)
            ((plane, frame),) = sink.got
            assert plane == path.plane
            # arrives with the carrier exhausted: the destination NIC's own address
            assert frame[38:54] == path.dst_nic.address.packed
            assert frame[21] == 64 - len(path.hops)
            used = {name for name, c in net.port_counters.items() if c["tx"]}
            expected = {net.port_name(h.switch, h.out_port) for h in path.hops}
            expected.add(net.port_name(src, path.plane))
            assert used == expected, path.label


def test_a_full_queue_trims_and_prioritises_headers(fabric: Any) -> None:
    net = SimNet(fabric, seed=1, trim_threshold=4, queue_depth=16)
    sink = Sink("h2")
    net.attach(sink)  # type: ignore[arg-type]
    path = fabric.paths("h0", "h2")[0]
    for _ in range(12):  # two senders' worth at once: the spine uplink queue builds
        net.inject("h0", path.plane, data_frame(path))
    other = fabric.paths("h1", "h2")[0]
    for _ in range(12):
        net.inject("h1", other.plane, data_frame(other))
    net.run(1.0)
    trimmed = [f for _, f in sink.got if len(f) == wire.DATA_HEADER_LEN]
    assert trimmed and net.counters["trimmed"] == len(trimmed)
    for frame in trimmed:
        pkt = wire.parse(frame)
        assert isinstance(pkt, wire.DataPacket) and pkt.trimmed
        assert pkt.outer.dscp == wire.DSCP_TRIMMED and pkt.dma_len == 4096
    assert len(sink.got) == 24  # nothing dropped: trimmed headers take the high-priority queue
    # untrimmable data is never cut; above the ECN threshold it is marked CE instead
    net = SimNet(fabric, seed=1, trim_threshold=1, ecn_threshold=2)
    sink = Sink("h2")
    net.attach(sink)  # type: ignore[arg-type]
    for _ in range(6):
        net.inject("h0", path.plane, data_frame(path, dscp=wire.DSCP_DEFAULT))
        net.inject("h1", other.plane, data_frame(other, dscp=wire.DSCP_DEFAULT))
    net.run(1.0)
    assert net.counters["trimmed"] == 0 and len(sink.got) == 12
    assert any(wire.parse(f).outer.ecn == wire.ECN_CE for _, f in sink.got)


def test_link_failure_window(fabric: Any) -> None:
    path = fabric.paths("h0", "h2")[0]
    net = SimNet(fabric, seed=1)
    sink = Sink("h2")
    net.attach(sink)  # type: ignore[arg-type]
    first = path.hops[0]
    peer = fabric.switch(first.switch).port(first.out_port).peer
    net.fail_link(first.switch, peer, start=0.0, end=0.5)
    net.inject("h0", path.plane, data_frame(path))
    net.run(0.4)
    assert not sink.got and net.counters["drop_link_down"] == 1
    net.inject("h0", path.plane, data_frame(path))
    net.run(0.6)
    net.inject("h0", path.plane, data_frame(path))
    net.run(1.0)
    assert len(sink.got) == 1  # the one sent after the repair
