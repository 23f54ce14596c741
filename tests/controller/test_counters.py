"""Counters read back by name after real frames crossed an mrc-switch port.

One mrc-switch gets one port on a veth pair made by the test; frames sent into the peer end are
counted by the switch, and ``mrc-ctl counters`` shows them per port and per drop reason. Needs
root (to make the veth pair); skips with the reason otherwise.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import socket
import struct
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from ctl_model import HAVE_MODEL, ModelProcess
from support.fabric import SMALL_TOPOLOGY

from controller import cli
from controller.client import SwitchClient
from controller.counters import read_counters
from controller.entries import fabric_tables
from controller.p4info import P4Info
from controller.push import PushOptions, SwitchAddress, push_fabric
from p4src.contract import ETHERTYPE_IPV6, DropReason
from targets.lab import free_port
from topologies import Fabric

pytestmark = [
    pytest.mark.skipif(not HAVE_MODEL, reason="switchmodel.server is not available yet"),
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("ip") is None,
        reason="needs root and iproute2 to make the switch's veth port",
    ),
]
NAME = f"mcc{os.getpid() % 10000:04d}"  # veth names unique to this test


@pytest.fixture()
def switch(tmp_path: Path) -> Iterator[tuple[ModelProcess, str]]:
    """mrc-switch as t0-p0-r0 with port 1 on a veth; yields it and the peer interface."""
    inside, outside = f"{NAME}a", f"{NAME}b"
    subprocess.run(
        ["ip", "link", "add", inside, "type", "veth", "peer", "name", outside], check=True
    )
    try:
        for end in (inside, outside):
            subprocess.run(["sysctl", "-qw", f"net.ipv6.conf.{end}.disable_ipv6=1"], check=False)
            subprocess.run(["ip", "link", "set", end, "up"], check=True)
        proc = ModelProcess("t0-p0-r0", 1, free_port(), tmp_path, veth=inside)
        proc.start()
        try:
            proc.wait_ready()
            yield proc, outside
        finally:
            proc.stop()
    finally:
        subprocess.run(["ip", "link", "del", inside], check=False)


def frame(dst_mac: str, ethertype: int, payload: bytes) -> bytes:
    mac = bytes(int(b, 16) for b in dst_mac.split(":"))
    data = mac + bytes.fromhex("020000000001") + struct.pack("!H", ethertype) + payload
    return data.ljust(60, b"\x00")


def ipv6_udp(dst: ipaddress.IPv6Address) -> bytes:
    src = ipaddress.IPv6Address("fcbb:bb00:c00::")
    udp = struct.pack("!HHHH", 1000, 2000, 8, 0)
    header = struct.pack("!IHBB", 6 << 28, len(udp), 17, 64) + src.packed + dst.packed
    return header + udp


def test_counters_by_port_and_drop_reason(
    switch: tuple[ModelProcess, str], fabric: Fabric, capsys: pytest.CaptureFixture[str]
) -> None:
    proc, outside = switch
    info = P4Info.load()
    target = SwitchAddress(proc.name, proc.address, proc.device_id)
    (report,) = push_fabric(
        [target], info, fabric_tables(fabric, switches=[proc.name]), PushOptions()
    )
    assert report.ok, report.summary()
    gateway = fabric.switch(proc.name).port(1).mac
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as sock:
        sock.bind((outside, 0))
        sock.send(frame(gateway, 0x0800, b"\x45" + bytes(30)))  # not IPv6
        sock.send(frame(gateway, ETHERTYPE_IPV6, ipv6_udp(ipaddress.IPv6Address("2001:db8::1"))))
    client = SwitchClient(proc.address, proc.device_id, name=proc.name, p4info=info)
    client.connect(arbitrate=False)
    try:
        deadline = time.monotonic() + 20
        while True:
            counters = read_counters(client, [1])
            if counters.drops.get(DropReason.NO_ROUTE.name) and counters.drops.get(
                DropReason.NOT_IPV6.name
            ):
                break
            assert time.monotonic() < deadline, f"frames not counted: {counters}"
            time.sleep(0.1)
    finally:
        client.close()
    assert counters.drops == {DropReason.NOT_IPV6.name: 1, DropReason.NO_ROUTE.name: 1}
    assert counters.port(1).rx_packets == 2
    assert counters.port(1).tx_packets == 0
    flags = ["--topo", str(SMALL_TOPOLOGY), "--switch", f"{proc.name}={proc.address}"]
    assert cli.main(["counters", *flags]) == 0
    out = capsys.readouterr().out
    assert "drops: NOT_IPV6 1, NO_ROUTE 1" in out
    assert re.search(r"│\s+1 │ h0\s+│\s+2 │\s+\d+ │\s+0 │", out), out  # port, peer, in, bytes, out
