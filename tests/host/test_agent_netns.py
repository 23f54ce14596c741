"""Two real mrc-host agents in network namespaces, their plane NICs joined back to back by veths.

h0 and h1 of topologies/small.yaml (same rack, two planes) run as ``mrc-host --direct`` in
namespaces ``ag<pid>-h0`` / ``ag<pid>-h1`` (h0 receives through its PACKET_RX_RING, h1 with one
recv per frame, so both receive paths are exercised); every test talks to them over their
control sockets and sends or captures real frames on the veths.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.fabric import SMALL_TOPOLOGY
from support.hostnet import agents_running, intact_write, skip_without_netns

from experiments.hostnets import BackToBack
from host.agent.agent import qp_number
from host.agent.control_client import ControlClient, ControlError
from host.transport import wire
from p4src.contract import ROCEV2_UDP_PORT
from targets.pcap import PcapWriter
from topologies import Fabric, Host

pytestmark = pytest.mark.netns

skip_without_netns()


# Sends hex frames read from stdin on one interface (run inside a namespace).
INJECT = (
    "import socket, sys\n"
    "s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)\n"
    "s.bind((sys.argv[1], 0))\n"
    "for line in sys.stdin.read().split():\n"
    "    s.send(bytes.fromhex(line))\n"
)


@pytest.fixture(scope="module")
def net(fabric: Fabric, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BackToBack]:
    work = tmp_path_factory.mktemp("agent")
    b2b = BackToBack(fabric, SMALL_TOPOLOGY, ("h0", "h1"), prefix="ag", workdir=work)
    # h0 reads through its ring, h1 with one recv per frame
    options = {
        "h0": ["--pcap", str(work / "h0.pcap")],
        "h1": ["--no-rx-ring", "--stats-file", str(work / "h1-stats.json")],
    }
    yield from agents_running(b2b, options)


def inject(net: BackToBack, host: str, intf: str, frames: list[bytes]) -> None:
    done = subprocess.run(
        net.exec_argv(host, [sys.executable, "-c", INJECT, intf]),
        input="\n".join(f.hex() for f in frames),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def stats(client: ControlClient) -> dict:
    return client.stats()["stats"]


def data_frame(fabric: Fabric, src: str, dst: str, plane: int, *, dest_qp: int, rkey: int,
               psn: int = 1, payload: bytes = b"\x5a" * 256) -> bytes:  # fmt: skip
    """A well-formed MRC data frame from ``src`` to ``dst``'s NIC on ``plane`` (core codec)."""
    a, b = fabric.host(src).nic(plane), fabric.host(dst).nic(plane)
    prefix = wire.frame_prefix(
        src_mac=wire.mac_bytes(a.mac), dst_mac=wire.mac_bytes(b.mac), src=a.address.packed,
        dst=b.address.packed, dscp=wire.DSCP_TRIMMABLE, ecn=wire.ECN_ECT0, ev=0x10000001,
    )  # fmt: skip
    return bytes(
        wire.encode_data(
            prefix,
            dest_qp,
            psn,
            False,
            1 << 32,
            rkey,
            None,
            wire.FLAG_FIRST | wire.FLAG_LAST,
            plane,
            wire.NO_SPINE,
            0x10000001,
            1,
            len(payload),
            0,
            0,
            payload,
        )  # fmt: skip
    )


def read_pcap(path: Path) -> list[bytes]:
    """Frames of a capture written by the agent's --pcap."""
    from test_agent_capture import read_pcap as read

    return read(path)


def data_sent_by(frames: list[bytes], host: Host) -> dict[int, int]:
    """Data packets among ``frames`` that ``host`` sent, by plane (by source NIC address)."""
    planes = {nic.address.packed: nic.plane for nic in host.nics}
    counts = dict.fromkeys(planes.values(), 0)
    for frame in frames:
        try:
            packet = wire.parse(frame)
        except wire.WireError:
            continue
        if isinstance(packet, wire.DataPacket) and packet.outer.src in planes:
            counts[planes[packet.outer.src]] += 1
    return counts


# -- data transfer ------------------------------------------------------------------------------


def test_transfer_is_intact_and_uses_every_plane(net: BackToBack, fabric: Fabric) -> None:
    size = 3 << 20
    with net.client("h0") as h0, net.client("h1") as h1:
        region = h1.register("bulk", size)
        before0, before1 = stats(h0), stats(h1)
        # the receiver's stream of WRITE_IMMs: a wait that starts before the transfer answers
        # when the immediate arrives
        since = h1.received(since=1 << 62)["last"]
        heard: list[dict] = []
        with net.client("h1") as listener:
            waiter = threading.Thread(
                target=lambda: heard.append(listener.received(since=since, timeout=60))
            )
            waiter.start()
            started = h0.transfer(
                "h1", region["addr"], region["rkey"], size, seed=11, message_size=1 << 18,
                imm=0xBEEF,
            )  # fmt: skip
            waiter.join(70)
        [got] = heard
        assert [(r["peer"], r["imm"], r["status"]) for r in got["received"]] == [
            ("h0", 0xBEEF, "ok")
        ]
        assert got["received"][0]["seq"] == got["last"] == since + 1
        assert h1.received(since=got["last"], timeout=0.1) == {
            "ok": True, "received": [], "last": got["last"]
        }  # fmt: skip
        assert started["messages"] == 12
        done = h0.wait([started["transfer"]], timeout=60)
        assert done["complete"] and not done["failed"], done
        summary = done["transfers"][str(started["transfer"])]
        assert summary["bytes_completed"] == size and summary["state"] == "done"
        check = h1.verify("bulk", seed=11)
        assert check["match"], check
        assert check["sha256"] == started["sha256"]
        after0, after1 = stats(h0), stats(h1)
    planes = fabric.topology.planes
    data_packets = -(-size // fabric.topology.mtu)
    sent = {p: after0["planes"][str(p)]["tx_packets"] - before0["planes"][str(p)]["tx_packets"]
            for p in range(planes)}  # fmt: skip
    received = {p: after1["planes"][str(p)]["rx_packets"] - before1["planes"][str(p)]["rx_packets"]
                for p in range(planes)}  # fmt: skip
    assert sum(sent.values()) >= data_packets
    for p in range(planes):
        # spraying over EVs split evenly across the planes: every plane carries a good share
        # (not exactly half: a path retired for a moment on a loaded machine carries less)
        assert sent[p] >= data_packets // (4 * planes), sent
        assert received[p] >= data_packets // (4 * planes), received
    # the receiver saw the WRITE_IMM completion of the last message, with its immediate
    assert any(r["imm"] == 0xBEEF for r in after1["received_imm"])
    assert after1["core"]["payload_bytes_placed"] - before1["core"]["payload_bytes_placed"] >= size


def test_file_transfer_verified_by_digest(net: BackToBack, tmp_path: Path) -> None:
    data = os.urandom(200_000)
    source = tmp_path / "blob.bin"
    source.write_bytes(data)
    with net.client("h0") as h0, net.client("h1") as h1:
        region = h1.register("file", len(data))
        started = h0.transfer("h1", region["addr"], region["rkey"], file=source)
        assert started["size"] == len(data) and started["seed"] is None
        assert h0.wait([started["transfer"]], timeout=60)["complete"]
        assert h1.verify("file", sha256=started["sha256"])["match"]
        wrong = h1.verify("file", seed=3)
        assert not wrong["match"] and wrong["first_mismatch"] is not None


def test_transfer_in_both_directions_at_once(net: BackToBack) -> None:
    with net.client("h0") as h0, net.client("h1") as h1:
        r0 = h0.register("back", 1 << 20)
        r1 = h1.register("forth", 1 << 20)
        t1 = h0.transfer("h1", r1["addr"], r1["rkey"], 1 << 20, seed=21, policy="spray-no-failover")
        t0 = h1.transfer("h0", r0["addr"], r0["rkey"], 1 << 20, seed=22)
        assert h0.wait([t1["transfer"]], timeout=60)["complete"]
        assert h1.wait([t0["transfer"]], timeout=60)["complete"]
        assert h1.verify("forth", seed=21)["match"]
        assert h0.verify("back", seed=22)["match"]


# -- paths and EV states ------------------------------------------------------------------------


def test_denied_plane_carries_nothing_until_reinstated(net: BackToBack, fabric: Fabric) -> None:
    with net.client("h0") as h0, net.client("h1") as h1:
        table = h0.paths("h1")["paths"]["h1"]
        assert set(table["paths"]) == {p.label for p in fabric.paths("h0", "h1")}
        assert sum(p["evs"] for p in table["paths"].values()) == 128
        denied = h0.set_ev("h1", "DENIED", path="p0")
        assert denied["evs"] == 64 and denied["counts"]["denied"] == 64
        capture = net.workdir / "h0.pcap"  # h0 captures what it sends and receives
        seen = len(read_pcap(capture))
        intact_write(h0, h1, "h1", "onlyp1", 1 << 20, seed=5, timeout=60)
        sent = data_sent_by(read_pcap(capture)[seen:], fabric.host("h0"))
        assert sent[0] == 0 and sent[1] >= 256  # not one data packet on plane 0
        states = {e["state"] for e in h0.paths("h1")["paths"]["h1"]["evs"] if e["path"] == "p0"}
        assert states == {"denied"}
        back = h0.set_ev("h1", "GOOD", path="p0")
        assert back["counts"]["good"] == 128
        transitions = [
            e for e in stats(h0)["core"]["ev_transitions"] if e.get("reason") == "operator"
        ]
        assert {t["new"] for t in transitions} >= {"denied", "good"}


def test_plane_link_down_and_up(net: BackToBack, fabric: Fabric) -> None:
    """A plane NIC going down: the agent sees it (port status: the plane's EVs retired, nothing
    sent there), does not spin, and moves data on the other plane; once it is up again the
    plane carries data again."""
    with net.client("h0") as h0, net.client("h1") as h1:
        before = stats(h0)
        net.run("h0", ["ip", "link", "set", "h0-p0", "down"])
        try:
            time.sleep(0.5)
            down = stats(h0)
            assert down["agent"]["loop_wakeups"] - before["agent"]["loop_wakeups"] <= 10
            assert h0.paths("h1")["paths"]["h1"]["paths"]["p0"]["states"] == {"assumed_bad": 64}
            assert down["planes"]["0"]["tx_errors"] == before["planes"]["0"]["tx_errors"]
            intact_write(h0, h1, "h1", "linkdown", 1 << 20, seed=31, timeout=60)
        finally:
            net.run("h0", ["ip", "link", "set", "h0-p0", "up"])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # retired EVs come back on a probe reply
            table = h0.paths("h1")["paths"]["h1"]["paths"]
            if table["p0"]["states"].get("good") == table["p0"]["evs"]:
                break
            time.sleep(0.1)
        capture = net.workdir / "h0.pcap"
        seen = len(read_pcap(capture))
        intact_write(h0, h1, "h1", "linkup", 1 << 20, seed=32, timeout=60)
        assert data_sent_by(read_pcap(capture)[seen:], fabric.host("h0"))[0] > 0
    assert h0.info()["host"] == "h0"


# -- bad input ----------------------------------------------------------------------------------


def test_garbage_frames_are_counted_and_ignored(net: BackToBack, fabric: Fabric) -> None:
    rng = random.Random(4791)
    h0nic, h1nic = fabric.host("h0").nic(0), fabric.host("h1").nic(0)
    good = data_frame(fabric, "h1", "h0", 0, dest_qp=qp_number(0, 1, "mrc"), rkey=0x1234)
    eth_ip6 = good[:54]
    mrc_like: list[bytes] = [
        good[:60],  # cut inside the UDP header
        good[:70],  # cut inside the BTH
        good[:100],  # cut inside the extension
        eth_ip6[:18] + b"\xff\xff" + eth_ip6[20:] + good[54:],  # payload length beyond the frame
        good[:62] + b"\x64" + good[63:],  # BTH opcode 0x64 (SEND): not MRC
        good[:90] + b"\x09" + good[91:],  # unknown data extension type
        good,  # well-formed but rkey 0x1234 names no region
        data_frame(fabric, "h1", "h0", 0, dest_qp=0xABCDE, rkey=1),  # no such QP
    ]
    for _ in range(24):  # random bytes behind valid outer headers
        mrc_like.append(good[:62] + rng.randbytes(rng.randrange(0, 200)))
    not_mrc = [
        good[:56] + b"\x00\x35" + good[58:],  # UDP to port 53
        good[:20] + b"\x3a" + good[21:],  # next header ICMPv6
    ]
    ignored_by_socket = [
        b"\xff" * 6 + bytes.fromhex(h1nic.mac.replace(":", "")) + b"\x08\x06" + b"\x00" * 28,
        bytes.fromhex(h0nic.mac.replace(":", "")) * 2 + b"\x88\xb5" + rng.randbytes(100),
    ]
    # MRC frames for other NICs: h2's address, and (direct mode) a carrier ending with h1's uSID
    h2addr = fabric.host("h2").nic(0).address.packed
    leaf_to_h1 = next(p.carrier for p in fabric.paths("h0", "h1") if p.plane == 0).packed
    misaddressed = [good[:38] + h2addr + good[54:], good[:38] + leaf_to_h1 + good[54:]]
    with net.client("h0") as h0:
        before = stats(h0)
        inject(net, "h1", "h1-p0", mrc_like + not_mrc + ignored_by_socket + misaddressed)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            after = stats(h0)
            counts = (
                after["core"]["packets_received"] - before["core"]["packets_received"],
                after["planes"]["0"]["ignored"] - before["planes"]["0"]["ignored"],
                after["planes"]["0"]["misaddressed"] - before["planes"]["0"]["misaddressed"],
            )
            wanted = (len(mrc_like), len(not_mrc), len(misaddressed))
            if all(n >= w for n, w in zip(counts, wanted, strict=True)):
                break
            time.sleep(0.05)
        assert h0.info()["host"] == "h0"  # alive
    received = after["core"]["packets_received"] - before["core"]["packets_received"]
    assert received == len(mrc_like)
    drops_before = sum(before["core"]["drops"].values())
    drops_after = sum(after["core"]["drops"].values())
    assert drops_after - drops_before == len(mrc_like)  # every one dropped, none accepted
    for reason in ("truncated", "bad_opcode", "bad_extension", "unknown_qp"):
        assert after["core"]["drops"].get(reason, 0) > before["core"]["drops"].get(reason, 0), (
            reason
        )
    assert after["planes"]["0"]["ignored"] - before["planes"]["0"]["ignored"] == len(not_mrc)
    assert after["planes"]["0"]["misaddressed"] - before["planes"]["0"]["misaddressed"] == len(
        misaddressed
    )
    assert after["agent"]["core_errors"] == 0
    # and the agent still moves data
    with net.client("h0") as h0, net.client("h1") as h1:
        intact_write(h0, h1, "h1", "aftergarbage", 1 << 18, seed=9, timeout=60)


def test_kernel_never_answers_mrc_packets(net: BackToBack, fabric: Fabric, tmp_path: Path) -> None:
    """Frames to h0's NIC address and MAC (MRC, other UDP, ICMPv6 echo): no ICMPv6 comes back."""
    from scapy.layers.inet6 import UDP, ICMPv6EchoRequest, IPv6
    from scapy.layers.l2 import Ether
    from scapy.utils import rdpcap

    for intf in ("h0-p0", "h0-p1"):
        value = net.run("h0", ["cat", f"/proc/sys/net/ipv6/conf/{intf}/disable_ipv6"])
        assert value.stdout.strip() == "1", f"{intf}: kernel IPv6 still on"
    h0nic, h1nic = fabric.host("h0").nic(0), fabric.host("h1").nic(0)
    base = Ether(src=h1nic.mac, dst=h0nic.mac) / IPv6(
        src=str(h1nic.address), dst=str(h0nic.address)
    )
    probes = [
        bytes(
            base / UDP(sport=50000, dport=ROCEV2_UDP_PORT) / (b"\x0a" + b"\x00" * 80)
        ),  # garbage BTH
        data_frame(fabric, "h1", "h0", 0, dest_qp=0x777, rkey=5),  # MRC to a QP that does not exist
        bytes(base / UDP(sport=50000, dport=9) / b"discard?"),  # a port nothing listens on
        bytes(base / ICMPv6EchoRequest(id=7, seq=1)),
    ]
    capture = tmp_path / "peer.pcap"
    tcpdump = subprocess.Popen(
        net.exec_argv(
            "h1",
            ["tcpdump", "-i", "h1-p0", "-n", "-U", "--immediate-mode", "-w", str(capture), "ip6"],
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        assert tcpdump.stderr is not None
        line = tcpdump.stderr.readline().decode()
        assert "listening" in line, line
        for _ in range(3):
            inject(net, "h1", "h1-p0", probes)
        # some MRC traffic the agent does answer (data + ACKs), to show the capture works; ACKs
        # return on the plane of the packet they echo, so enough packets that plane 0 gets some
        with net.client("h0") as h0, net.client("h1") as h1:
            region = h0.register("icmpcheck", 1 << 20)
            started = h1.transfer("h0", region["addr"], region["rkey"], 1 << 20, seed=1)
            assert h1.wait([started["transfer"]], timeout=30)["complete"]
        time.sleep(0.5)
    finally:
        tcpdump.terminate()
        tcpdump.wait(10)
    assert tcpdump.stderr is not None
    tail = tcpdump.stderr.read().decode()
    frames = rdpcap(str(capture))
    assert frames, tail
    from_h0 = [f for f in frames if f.haslayer(Ether) and f[Ether].src == h0nic.mac]
    icmp = [
        f for f in frames if f.haslayer(IPv6) and f[IPv6].nh == 58 and f[Ether].src == h0nic.mac
    ]
    echoes = [f for f in frames if f[Ether].src == h1nic.mac and f.haslayer(ICMPv6EchoRequest)]
    assert len(echoes) == 3, [f.summary() for f in frames][:20]
    assert from_h0, "the capture saw nothing from h0 (ACKs of the transfer expected)"
    assert all(f.haslayer(UDP) and f[UDP].dport == ROCEV2_UDP_PORT for f in from_h0)
    assert icmp == []


def test_control_interface_rejects_bad_requests(net: BackToBack) -> None:
    cases: list[tuple[dict, str]] = [
        ({"cmd": "register", "name": "x"}, "size"),
        ({"cmd": "register", "name": "x", "size": -5}, "size"),
        ({"cmd": "register", "name": "x", "size": "big"}, "size"),
        ({"cmd": "register", "name": "", "size": 10}, "name"),
        ({"cmd": "transfer", "peer": "h7", "addr": 0, "rkey": 1, "size": 10}, "peer"),
        ({"cmd": "transfer", "peer": "h0", "addr": 0, "rkey": 1, "size": 10}, "peer"),
        ({"cmd": "transfer", "peer": "h1", "addr": -1, "rkey": 1, "size": 10}, "addr"),
        ({"cmd": "transfer", "peer": "h1", "addr": 0, "rkey": 1 << 33, "size": 10}, "rkey"),
        ({"cmd": "transfer", "peer": "h1", "addr": 0, "rkey": 1, "size": 0}, "size"),
        (
            {"cmd": "transfer", "peer": "h1", "addr": 0, "rkey": 1, "size": 9, "policy": "x"},
            "policy",
        ),
        ({"cmd": "transfer", "peer": "h1", "addr": 0, "rkey": 1, "file": "/nonexistent"}, "file"),
        ({"cmd": "transfer", "peer": "h1", "addr": 0, "rkey": 1, "size": 9, "color": 1}, "color"),
        ({"cmd": "wait", "transfers": [999]}, "transfers"),
        ({"cmd": "wait", "transfers": "all"}, "transfers"),
        ({"cmd": "wait", "timeout": -1}, "timeout"),
        ({"cmd": "received", "since": -1}, "since"),
        ({"cmd": "received", "timeout": -2}, "timeout"),
        ({"cmd": "received", "peer": "h1"}, "peer"),
        ({"cmd": "verify", "region": "nosuch", "seed": 1}, "region"),
        ({"cmd": "set-ev", "peer": "h1", "state": "HAPPY", "path": "p0"}, "state"),
        ({"cmd": "set-ev", "peer": "h1", "state": "DENIED", "path": "p9"}, "path"),
        ({"cmd": "set-ev", "peer": "h1", "state": "DENIED", "ev": 0xFFFFFFF}, "ev"),
        ({"cmd": "paths", "peer": 3}, "peer"),
        ({"cmd": "launch"}, "cmd"),
    ]
    with net.client("h0") as h0:
        for request, field in cases:
            with pytest.raises(ControlError) as err:
                h0.request(**request)
            assert err.value.field == field, (request, err.value)
            assert field in str(err.value), (request, err.value)
        for raw in (b"garbage\n", b"\x00\xff\xfe\n", b"[]\n", b'{"cmd": null}\n', b"{\n"):
            reply = h0.send_raw(raw)
            assert reply["ok"] is False and reply["error"]
        h0.register("dup", 100)
        with pytest.raises(ControlError, match="already registered") as err:
            h0.register("dup", 100)
        assert err.value.field == "name"
        assert h0.info()["host"] == "h0"


# -- command line -------------------------------------------------------------------------------


def cli(net: BackToBack, host: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "host.agent.cli", *args, "--control", str(net.control(host))],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_command_line_client(net: BackToBack) -> None:
    import json

    reg = cli(net, "h1", "register", "clirx", "65536")
    assert reg.returncode == 0, reg.stderr
    region = json.loads(reg.stdout)
    sent = cli(net, "h0", "transfer", "--peer", "h1", "--addr", str(region["addr"]),
               "--rkey", hex(region["rkey"]), "--size", "65536", "--seed", "3", "--imm", "0x42",
               "--wait")  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    assert json.loads(sent.stdout)["complete"] is True
    got = cli(net, "h1", "received", "--since", "0")
    assert got.returncode == 0, got.stderr
    last = json.loads(got.stdout)["received"][-1]
    assert (last["peer"], last["imm"], last["status"]) == ("h0", 0x42, "ok")
    ok = cli(net, "h1", "verify", "clirx", "--seed", "3")
    assert ok.returncode == 0 and json.loads(ok.stdout)["match"] is True
    bad = cli(net, "h1", "verify", "clirx", "--seed", "4")
    assert bad.returncode == 1 and json.loads(bad.stdout)["match"] is False
    paths = cli(net, "h0", "paths", "--peer", "h1")
    assert set(json.loads(paths.stdout)["paths"]["h1"]["paths"]) == {"p0", "p1"}
    err = cli(net, "h0", "transfer", "--peer", "h9", "--addr", "0", "--rkey", "1", "--size", "1")
    assert err.returncode == 1 and "peer" in err.stderr and len(err.stderr.splitlines()) == 1


def test_start_errors_name_the_problem(net: BackToBack, tmp_path: Path) -> None:
    def start(host: str, ns_host: str, control: Path) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "host.agent.cli", "--topo", str(SMALL_TOPOLOGY), "--host", host,
                "--control", str(control), "--direct"]  # fmt: skip
        return subprocess.run(
            net.exec_argv(ns_host, argv), capture_output=True, text=True, timeout=60, check=False
        )

    missing = start("h2", "h0", tmp_path / "h2.sock")  # h2's NICs are not in h0's namespace
    assert missing.returncode == 1
    assert "interface 'h2-p0'" in missing.stderr and len(missing.stderr.splitlines()) == 1
    in_use = start("h0", "h0", net.control("h0"))
    assert in_use.returncode == 1 and "in use" in in_use.stderr
    assert net.client("h0").info()["host"] == "h0"  # the running agent is unharmed


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed")
def test_agent_capture_dissects_as_roce(net: BackToBack, tmp_path: Path) -> None:
    """h0 runs with --pcap: its capture of a transfer dissects as IPv6 / UDP / InfiniBand BTH."""
    from test_agent_capture import check_dissection

    with net.client("h0") as h0, net.client("h1") as h1:
        region = h1.register("captured", 1 << 16)
        started = h0.transfer("h1", region["addr"], region["rkey"], 1 << 16, seed=2, imm=9)
        assert h0.wait([started["transfer"]], timeout=30)["complete"]
        assert h0.stats()["stats"]["agent"]["pcap_frames"] > 0
    # keep the frames the codec accepts (other tests inject garbage into h0 on purpose)
    clean = tmp_path / "clean.pcap"
    writer = PcapWriter(clean)
    for frame in read_pcap(net.workdir / "h0.pcap"):
        try:
            wire.parse(frame)
        except wire.WireError:
            continue
        writer.write(frame)
    writer.close()
    assert check_dissection(clean) >= 16  # data packets of this transfer at least


def test_idle_agent_sleeps(net: BackToBack) -> None:
    """No busy polling: an idle agent wakes up only for what it is asked (here: two requests)."""
    with net.client("h0") as h0:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # EVs being probed back keep timers running
            tables = [h0.paths(policy=p)["paths"] for p in ("mrc", "no-trim-nack")]
            states = {e["state"] for t in tables for peer in t.values() for e in peer["evs"]}
            if states == {"good"}:
                break
            time.sleep(0.2)
        first = h0.stats()["stats"]["agent"]
        time.sleep(1.0)
        second = h0.stats()["stats"]["agent"]
    assert second["loop_wakeups"] - first["loop_wakeups"] <= 5
    assert second["timer_runs"] - first["timer_runs"] <= 2


def test_stats_file_is_rewritten(net: BackToBack) -> None:
    import json

    path = net.workdir / "h1-stats.json"
    deadline = time.monotonic() + 10
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    data = json.loads(path.read_text())
    assert data["host"] == "h1" and set(data["planes"]) == {"0", "1"}
    assert "retransmits" in data["core"] and "ev_transitions" in data["core"]


def test_bad_rkey_fails_the_transfer_not_the_agent(net: BackToBack) -> None:
    with net.client("h0") as h0, net.client("h1") as h1:
        region = h1.register("guarded", 1 << 16)
        wrong = (region["rkey"] + 1) & 0xFFFFFFFF
        started = h0.transfer("h1", region["addr"], wrong, 1 << 16, seed=4, policy="ecmp")
        done = h0.wait([started["transfer"]], timeout=60)
        assert done["complete"] and done["failed"] == [started["transfer"]], done
        summary = done["transfers"][str(started["transfer"])]
        assert "remote_access_error" in summary["error"]
        assert h1.verify("guarded", sha256="0" * 64)["match"] is False
        assert h1.stats()["stats"]["core"]["drops"].get("bad_rkey", 0) >= 1
        # the agent (and the QP) go on: the right key works
        again = h0.transfer("h1", region["addr"], region["rkey"], 1 << 16, seed=4, policy="ecmp")
        assert h0.wait([again["transfer"]], timeout=60)["failed"] == []
        assert h1.verify("guarded", seed=4)["match"]
