"""mrc-switch as a process on real veth pairs: forwarding, pcap, shaping, trimming under load,
and an idle switch that sleeps. Needs root; skips otherwise."""

from __future__ import annotations

import ipaddress
import os
import select
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from dataplane.packets import mrc_frame
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.utils import rdpcap

from controller.client import SwitchClient
from controller.p4info import P4Info
from p4src import contract
from p4src.contract import DropReason
from switchmodel.dataplane import DataPlane, PortConfig
from switchmodel.tables import PipelineState, PortQos, next_hop
from targets.lab import NetnsLab, PacketPort, free_port, netns_available
from targets.model import ModelSwitch

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(netns_available() is not None, reason=str(netns_available())),
]

INFO = P4Info.load()
DST = "fcbb:bb00:1c02::"
OUT_SMAC = "02:00:00:00:00:21"
OUT_DMAC = "02:00:00:00:00:22"


@dataclass
class Rig:
    switch: ModelSwitch
    client: SwitchClient
    inbound: PacketPort  # host side of port 1
    outbound: PacketPort  # host side of port 2


@pytest.fixture
def make_rig(tmp_path: Path) -> Iterator:  # type: ignore[type-arg]
    made: list[tuple[NetnsLab, ModelSwitch, SwitchClient | None, list[PacketPort]]] = []

    def make(tag: str, **switch_options: object) -> Rig:
        # switch side of each veth in the root namespace, host side in the lab's namespace
        lab = NetnsLab()
        ports: list[PacketPort] = []
        switch: ModelSwitch | None = None
        try:
            netns = lab.add_netns(f"sm{tag}{os.getpid() % 10000}")
            for n in (1, 2):
                lab.add_veth(f"{netns}{n}s", f"{netns}{n}h", b_netns=netns)
            ports = [PacketPort(f"{netns}{n}h", netns, rcvbuf=16 << 20) for n in (1, 2)]
            switch = ModelSwitch(
                f"sm-{tag}",
                {1: f"{netns}1s", 2: f"{netns}2s"},
                device_id=3,
                grpc_addr=f"127.0.0.1:{free_port()}",
                log_dir=tmp_path,
                **switch_options,  # type: ignore[arg-type]
            )
            switch.start()
            switch.wait_ready(timeout=20)
            client = SwitchClient(switch.grpc_addr, 3, p4info=INFO, name=switch.name).connect()
        except BaseException:
            if switch is not None:
                switch.stop()
            for port in ports:
                port.close()
            lab.cleanup()
            raise
        made.append((lab, switch, client, ports))
        return Rig(switch, client, ports[0], ports[1])

    yield make
    for lab, switch, client, ports in made:
        if client is not None:
            client.close()
        switch.stop()
        for port in ports:
            port.close()
        lab.cleanup()


def eventually(condition: Callable[[], bool], what: str, timeout: float = 5.0) -> None:
    """Wait (bounded) until ``condition`` holds: the switch is another process."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g} s"
        time.sleep(0.05)


def route(client: SwitchClient, trim: int | None = None) -> None:
    client.set_pipeline(INFO)
    entries = [
        INFO.table_entry(
            contract.IPV6_LPM,
            {contract.DST_ADDR: "fcbb:bb00:1c02::/48"},
            contract.SET_NEXT_HOP,
            contract.params_of(contract.NextHopParams(2, OUT_SMAC, OUT_DMAC)),
        ),
    ]
    if trim is not None:
        entries.append(
            INFO.table_entry(
                contract.PORT_QOS,
                {contract.EGRESS_SPEC: 2},
                contract.SET_PORT_QOS,
                contract.params_of(contract.PortQosParams(trim, trim, trim, 0, 0)),
            )
        )
    client.insert(entries)


def test_no_pipeline_drops_then_forwards_with_pcap(make_rig, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    pcaps = tmp_path / "pcap"
    rig = make_rig("fw", pcap_dir=pcaps, mtu=1000)
    frame = mrc_frame(DST, hop_limit=9)
    rig.inbound.send(frame)
    # the capture shows when the switch has read the frame (it flushes every second)
    captured = pcaps / f"{rig.switch.ports[1]}_in.pcap"
    eventually(lambda: captured.stat().st_size > 24, "the switch reads the first frame")
    assert rig.outbound.recv(0.2) is None  # no pipeline: everything is dropped
    route(rig.client)
    assert sum(p for p, _ in rig.client.read_counter(contract.PORT_IN).values()) == 0
    rig.inbound.send(frame)
    got = rig.outbound.recv(5.0)
    assert got is not None
    assert got == mrc_frame(DST, hop_limit=8, src_mac=OUT_SMAC, dst_mac=OUT_DMAC)
    assert rig.client.read_counter(contract.PORT_IN)[1] == (1, len(frame))
    assert rig.client.read_counter(contract.PORT_OUT)[2] == (1, len(frame))
    oversize = mrc_frame(DST, payload=bytes(1000))  # an IPv6 packet beyond --mtu 1000
    rig.inbound.send(oversize)
    eventually(
        lambda: rig.client.read_counter(contract.DROPS)[DropReason.OVERSIZE][0] > 0,
        "an oversize frame is counted",
    )
    assert rig.client.read_counter(contract.DROPS)[DropReason.OVERSIZE] == (1, len(oversize))
    assert rig.outbound.recv(0.2) is None
    rig.switch.stop()  # flushes the capture files
    names = sorted(p.name for p in pcaps.iterdir())
    assert names == sorted(f"{rig.switch.ports[n]}_{d}.pcap" for n in (1, 2) for d in ("in", "out"))
    captured_out = [bytes(p) for p in rdpcap(str(pcaps / f"{rig.switch.ports[2]}_out.pcap"))]
    assert captured_out == [got]
    captured_in = [bytes(p) for p in rdpcap(str(pcaps / f"{rig.switch.ports[1]}_in.pcap"))]
    assert captured_in == [frame, frame, oversize]


def test_idle_switch_sleeps(make_rig) -> None:  # type: ignore[no-untyped-def]
    rig = make_rig("idl")
    route(rig.client)
    pid = rig.switch.pid
    assert pid is not None

    def cpu_seconds() -> float:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    before = cpu_seconds()
    time.sleep(2.0)
    used = cpu_seconds() - before
    # an event-driven switch sleeps in the kernel; a polling one would burn a core (2 s)
    assert used < 0.2, f"idle mrc-switch used {used:.2f} s of CPU in 2 s"


def test_shaped_port_limits_rate_on_veth(make_rig) -> None:  # type: ignore[no-untyped-def]
    rate = 20_000_000
    rig = make_rig("shp", rate_bps=rate, queue_depth=2000)
    route(rig.client)
    frame = mrc_frame(DST, dscp=contract.Dscp.DEFAULT, payload=bytes(1200))
    count = 500
    for _ in range(count):
        rig.inbound.send(frame)
    arrivals = rig.outbound.recv_all(quiet=1.0)
    assert len(arrivals) == count
    span = arrivals[-1][0] - arrivals[0][0]
    bits = (count - 1) * len(frame) * 8  # the first frame opens the measurement
    measured = bits / span
    # generous: the token bucket lets a couple of milliseconds of line rate through at once
    assert 0.6 * rate < measured < 1.4 * rate, f"measured {measured / 1e6:.1f} Mbit/s"


def test_congested_port_trims_and_serves_trimmed_first(make_rig) -> None:  # type: ignore[no-untyped-def]
    rig = make_rig("trm", rate_bps=2_000_000, queue_depth=16)
    route(rig.client, trim=4)
    frame = mrc_frame(DST, dscp=contract.Dscp.TRIMMABLE, payload=bytes(1000))
    # 16 frames fill the low-priority queue (the first two leave at once: the bucket holds
    # one frame and a half). Once egress has sent the 7th, port_qdepth holds the depth it saw
    # at enqueue (>= 4) and later data packets are trimmed.
    for _ in range(16):
        rig.inbound.send(frame)
    arrivals: list[bytes] = []
    while len(arrivals) < 8:
        got = rig.outbound.recv(5.0)
        assert got is not None, f"only {len(arrivals)} of the first 16 frames left the switch"
        arrivals.append(got)
    for _ in range(12):
        rig.inbound.send(frame)
    arrivals += [f for _, f in rig.outbound.recv_all(quiet=1.5)]
    full = [f for f in arrivals if IPv6(f[14:]).tc >> 2 == 10]
    trimmed = [f for f in arrivals if IPv6(f[14:]).tc >> 2 == 12]
    assert len(full) + len(trimmed) == len(arrivals)
    assert trimmed, "a queue above its trim threshold must trim"
    headers = len(mrc_frame(DST, payload=b""))
    assert all(len(f) == headers for f in trimmed)
    assert all(Ether(f)[IPv6].plen == headers - 54 for f in trimmed)
    counted = rig.client.read_counter(contract.TRIMMED)[2][0]
    dropped = rig.client.read_counter(contract.DROPS).get(DropReason.QUEUE_FULL, (0, 0))[0]
    assert counted == len(trimmed)
    assert len(arrivals) + dropped == 28
    assert rig.client.read_counter(contract.PORT_OUT)[2][0] == len(arrivals)
    # trimmed headers use the high-priority queue: they overtake full packets queued before
    first_trimmed = arrivals.index(trimmed[0])
    assert any(IPv6(f[14:]).tc >> 2 == 10 for f in arrivals[first_trimmed:])


def test_packets_lost_on_a_down_link_still_leave_the_queue(make_rig) -> None:  # type: ignore[no-untyped-def]
    """Egress sees a packet when it leaves its queue, whether or not the wire took it (as in
    BMv2): packets sent into a down link reset the depth registers, so once the link is back
    a lone data packet finds the queue empty and is not trimmed."""
    rig = make_rig("dwn", rate_bps=2_000_000, queue_depth=16)
    route(rig.client, trim=4)
    out_intf = rig.switch.ports[2]
    frame = mrc_frame(DST, dscp=contract.Dscp.TRIMMABLE, payload=bytes(1000))
    subprocess.run(["ip", "link", "set", "dev", out_intf, "down"], check=True)
    try:
        for _ in range(12):
            rig.inbound.send(frame)
        eventually(
            lambda: rig.client.read_counter(contract.PORT_OUT).get(2, (0, 0))[0] >= 12,
            "the queued packets to leave the queue of the down port",
        )
    finally:
        subprocess.run(["ip", "link", "set", "dev", out_intf, "up"], check=True)
    depth = rig.client.read_register(contract.PORT_QDEPTH).get(2, 0)
    arrivals = rig.client.read_register(contract.PORT_ARRIVALS).get(2, 0)
    assert depth + arrivals < 4, (depth, arrivals)
    eventually(lambda: Path(f"/sys/class/net/{out_intf}/operstate").read_text().strip() != "down",
               "the link to come back")  # fmt: skip
    rig.outbound.recv_all(quiet=0.3)
    rig.inbound.send(frame)
    got = rig.outbound.recv(5.0)
    assert got is not None and IPv6(got[14:]).tc >> 2 == 10 and len(got) == len(frame)


def test_delay_line_holds_frames_for_the_latency(make_rig) -> None:  # type: ignore[no-untyped-def]
    """A port with a latency (the fabric's per-link latency where the kernel has no netem)
    sends nothing earlier than that latency after the frame left its queue."""
    latency = 0.2  # seconds: far above the loop's and the veth's own latency
    rig = make_rig("dly", port_latency_us={2: latency * 1e6})
    assert "--port-latency-us-of" in rig.switch.command()
    route(rig.client)
    frame = mrc_frame(DST, hop_limit=9)
    sent = []
    for _ in range(3):
        sent.append(time.monotonic())
        rig.inbound.send(frame)
        time.sleep(0.02)
    for i in range(3):
        got = rig.outbound.recv(5.0)
        arrived = time.monotonic()
        assert got == mrc_frame(DST, hop_limit=8, src_mac=OUT_SMAC, dst_mac=OUT_DMAC)
        assert arrived - sent[i] >= latency, f"frame {i} after {arrived - sent[i]:.3f} s"
    # in order, and no frame was held much beyond the latency (the switch's timer slack)
    assert arrived - sent[-1] < latency + 0.5
    assert rig.client.read_counter(contract.PORT_OUT)[2][0] == 3


class CoarseTimer:
    """An epoll whose timeouts end late (as a timer of coarse resolution or a busy loop makes
    them): the loop then wakes for a frame that arrived after a queue was due to send."""

    LATE = 0.2  # seconds

    def __init__(self, epoll: select.epoll) -> None:
        self.epoll = epoll

    def poll(self, timeout: float = -1.0) -> list[tuple[int, int]]:
        return self.epoll.poll(timeout + self.LATE if timeout >= 0 else timeout)

    def __getattr__(self, name: str) -> object:
        return getattr(self.epoll, name)


def test_a_frame_arriving_after_a_departure_was_due_sees_the_queue_without_it() -> None:
    """A frame that arrives once a queued frame was due to leave sees the queue without that
    frame, even when the loop wakes for both at once (a late timer): the due departure is
    served first, as the sim orders its events by time. With a trim threshold of one packet,
    the frame that arrives after the waiting one fell due must not be trimmed."""
    lab = NetnsLab()
    netns = lab.add_netns(f"smdue{os.getpid() % 10000}")
    ports: list[PacketPort] = []
    plane: DataPlane | None = None
    try:
        for n in (1, 2):
            lab.add_veth(f"{netns}{n}s", f"{netns}{n}h", b_netns=netns)
        ports = [PacketPort(f"{netns}{n}h", netns, rcvbuf=1 << 20) for n in (1, 2)]
        rate = 100_000
        plane = DataPlane({1: PortConfig(1, f"{netns}1s"),
                           2: PortConfig(2, f"{netns}2s", rate_bps=rate)})  # fmt: skip
        state = PipelineState()
        route = ipaddress.IPv6Network("fcbb:bb00:1c02::/48")
        state.ipv6_lpm.insert(
            int(route.network_address), route.prefixlen,
            next_hop(2, bytes.fromhex(OUT_SMAC.replace(":", "")),
                     bytes.fromhex(OUT_DMAC.replace(":", ""))),
        )  # fmt: skip
        state.port_qos.entries[2] = PortQos.fixed(trim_threshold=1, ecn_threshold=100)
        plane.state = state
        plane.open()
        plane._epoll = CoarseTimer(plane._epoll)  # type: ignore[assignment]
        plane.start()
        inbound, outbound = ports
        frame = mrc_frame(DST, dscp=contract.Dscp.TRIMMABLE, payload=bytes(1000))
        frame_time = (len(frame) - 14) * 8 / rate  # about 88 ms
        for _ in range(3):  # two leave at once (the bucket holds a frame and a half), one waits
            inbound.send(frame)
        eventually(lambda: state.port_arrivals[2] == 1, "the third frame to wait in the queue")
        # the waiting frame falls due within one frame time; the loop's timer wakes it 0.2 s late
        time.sleep(1.5 * frame_time)
        inbound.send(frame)  # arrives after the waiting frame was due to leave
        arrivals = [f for _, f in outbound.recv_all(quiet=4 * frame_time)]
    finally:
        if plane is not None:
            plane.stop()
        for port in ports:
            port.close()
        lab.cleanup()
    assert len(arrivals) == 4
    assert [IPv6(f[14:]).tc >> 2 for f in arrivals] == [contract.Dscp.TRIMMABLE] * 4
    assert state.counters.trimmed.packets[2] == 0
