"""An application written for real MRC NICs, unmodified, on the running fabric, and the
management network it needs (experiments/mgmtnet.py), on both switch targets.

The small fabric (switch model, then BMv2) with its management network: every host resolves
every host's name through its /etc/hosts to its management addresses and has no default route;
TCP connects between hosts by name over IPv4 and IPv6; the verbs device's GID table answers at
every index below ``gid_tbl_len``, each the plane address; ``capi/examples/mrc_bw.c`` runs
between h0 (rack 0) and h2 (rack 1), exchanging its QP details over TCP on the management
network, on GID index 3, INIT without profile ids, verbs timeout and retries at RTS, a sweep from
1 byte to 64 MiB with every byte checked; and a capture on the management bridge meanwhile holds
the exchange and not one MRC frame. Skipped, saying why, where a fabric cannot be built.
"""

from __future__ import annotations

import ipaddress
import shutil
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_ocp_fabric import MRC_H_PATH, ROOT, skip_reason

from experiments.mgmtnet import BRIDGE, IPV4_NET, IPV6_NET, addresses
from p4src.contract import ROCEV2_UDP_PORT
from topologies import load_topology
from topologies.config import shipped_topology

pytestmark = pytest.mark.netns

ETH_IPV4, ETH_IPV6, ETH_ARP = 0x0800, 0x86DD, 0x0806
BW_PORT = 18515
#: the sizes mrc_bw sweeps: 1 byte to 64 MiB, doubling
SWEEP = [1 << k for k in range(27)]


@pytest.fixture(scope="module", params=["model", "bmv2"])
def running(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    """The small fabric on one target, up, with mrc_bw built."""
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    if not (MRC_H_PATH / "mrc.h").is_file():
        pytest.skip(f"no OCP MRC API headers at {MRC_H_PATH} (set MRC_H_PATH)")
    if request.param == "bmv2" and shutil.which("simple_switch_grpc") is None:
        pytest.skip("BMv2 (simple_switch_grpc) is not installed")
    from experiments.testbed import Testbed

    subprocess.run(
        ["make", "-C", str(ROOT / "capi"), f"MRC_H_PATH={MRC_H_PATH}"],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    topology = load_topology(shipped_topology("small")).with_(link={"rate_mbps": 20, "delay_us": 0})
    tb = Testbed(topology, request.param, state_path=tmp_path_factory.mktemp("tb") / "state.json")
    try:
        tb.up()
        yield tb
    finally:
        tb.down()


def exec_in(tb: Any, host: str, *argv: str, **kwargs: Any) -> subprocess.Popen[str]:
    """``mrc-testbed exec HOST -- ARGV``, its output (both streams) piped."""
    return subprocess.Popen(
        [sys.executable, "-m", "experiments.cli", "exec", host, "--", *argv],
        cwd=ROOT, env=tb.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        **kwargs,
    )  # fmt: skip


def output(proc: subprocess.Popen[str], timeout: float = 60.0) -> str:
    out = proc.communicate(timeout=timeout)[0]
    assert proc.returncode == 0, out
    return out


RESOLVE = """
import socket, sys
for name in sys.argv[1:]:
    v4 = socket.getaddrinfo(name, None, socket.AF_INET)[0][4][0]
    v6 = socket.getaddrinfo(name, None, socket.AF_INET6)[0][4][0]
    print(name, v4, v6)
"""


def test_every_host_resolves_every_host_and_routes_nowhere_else(running: Any) -> None:
    names = [h.name for h in running.fabric.hosts]
    expected = {a.host: (str(a.ipv4), str(a.ipv6)) for a in addresses(names)}
    for host in names:
        out = output(exec_in(running, host, "python3", "-c", RESOLVE, *names))
        got = {line.split()[0]: tuple(line.split()[1:]) for line in out.splitlines()}
        assert got == expected, (host, out)
        routes = output(exec_in(running, host, "sh", "-c", "ip route; ip -6 route"))
        assert "default" not in routes, (host, routes)
    # the Mininet CLI's commands run in the hosts' shells: the same names there
    assert f"{expected['h2'][0]} " in running.host("h0").cmd("getent ahostsv4 h2")
    for line in output(exec_in(running, "h0", "ip", "-4", "route")).splitlines():
        assert line.startswith(str(IPV4_NET)), line  # h0: only the LAN's own prefix


SERVE = """
import socket, sys
family = socket.AF_INET6 if sys.argv[1] == "6" else socket.AF_INET
with socket.socket(family, socket.SOCK_STREAM) as s:
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", int(sys.argv[2])))
    s.listen(1)
    print("listening", flush=True)
    conn, peer = s.accept()
    conn.sendall(b"hello " + conn.recv(64))
    print("served", peer[0])
"""
CONNECT = """
import socket, sys
family = socket.AF_INET6 if sys.argv[1] == "6" else socket.AF_INET
addr = socket.getaddrinfo(sys.argv[3], int(sys.argv[2]), family, socket.SOCK_STREAM)[0][4]
with socket.create_connection(addr[:2], timeout=10) as s:
    s.sendall(sys.argv[4].encode())
    print(s.recv(64).decode())
"""


@pytest.mark.parametrize(("client", "server", "family"), [("h0", "h3", "4"), ("h1", "h2", "6")])
def test_tcp_connects_between_hosts_by_name(
    running: Any, client: str, server: str, family: str
) -> None:
    serving = exec_in(running, server, "python3", "-c", SERVE, family, "18600")
    assert serving.stdout is not None and serving.stdout.readline().strip() == "listening"
    out = output(
        exec_in(running, client, "python3", "-c", CONNECT, family, "18600", server, client)
    )
    assert out.strip() == f"hello {client}"
    served = output(serving)
    client_addr = {a.host: a for a in addresses(h.name for h in running.fabric.hosts)}[client]
    assert served.split()[-1] == str(client_addr.ipv6 if family == "6" else client_addr.ipv4)


@pytest.fixture(scope="module")
def gid_check(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/ocp/c/gid_check.c, built against Debian's libibverbs (run with the testbed's)."""
    out = tmp_path_factory.mktemp("gid") / "gid_check"
    subprocess.run(["cc", "-Wall", "-Wextra", "-Werror", "-o", str(out),
                    str(ROOT / "tests" / "ocp" / "c" / "gid_check.c"), "-libverbs"],
                   check=True, capture_output=True, timeout=120)  # fmt: skip
    return out


def test_gid_table_answers_at_every_index_with_the_plane_address(
    running: Any, gid_check: Path
) -> None:
    for host in running.fabric.hosts:
        out = output(exec_in(running, host.name, str(gid_check)))
        expected = [
            f"port {nic.plane + 1} gid_tbl_len 4 gid {ipaddress.IPv6Address(nic.address)}"
            for nic in sorted(host.nics, key=lambda n: n.plane)
        ]
        assert out.splitlines() == expected, out


CAPTURE = """
import select, socket, sys
socket.if_nametoindex(sys.argv[1])  # the bridge is here
sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))  # every interface
print("capturing", flush=True)
while True:
    ready = select.select([sock, sys.stdin], [], [])[0]
    if sock in ready:
        print(sock.recv(65535).hex(), flush=True)
    elif not sys.stdin.read(1):
        break
"""


class BridgeCapture:
    """Every frame on the management bridge's ports while it runs (an ``AF_PACKET`` socket on
    every interface of the bridge's namespace: the bridge device itself sees only what is
    addressed to it, not what it forwards between hosts; closing its input ends it)."""

    def __init__(self, tb: Any) -> None:
        pid = tb.network.mgmt.switch_pid
        self.proc = subprocess.Popen(
            ["nsenter", f"--target={pid}", "--net", sys.executable, "-c", CAPTURE, BRIDGE],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "capturing"

    def close(self) -> list[bytes]:
        out = self.proc.communicate(input="", timeout=30)[0]
        return [bytes.fromhex(line) for line in out.split()]


def mgmt_frame(frame: bytes) -> str | None:
    """None for a frame of the management LAN; else what it is."""
    ether = struct.unpack("!H", frame[12:14])[0]
    if ether == ETH_ARP:
        return None
    if ether == ETH_IPV4:
        src, dst = (ipaddress.IPv4Address(frame[o : o + 4]) for o in (26, 30))
        ok = all(a in IPV4_NET or a.is_unspecified or a.is_multicast for a in (src, dst))
        return (
            None
            if ok and not _mrc_udp(frame, 14 + (frame[14] & 0xF) * 4, frame[23])
            else (f"IPv4 {src} -> {dst}")
        )
    if ether == ETH_IPV6:
        src6, dst6 = (ipaddress.IPv6Address(frame[o : o + 16]) for o in (22, 38))
        ok = all(a in IPV6_NET or a.is_link_local or a.is_unspecified or a.is_multicast
                 for a in (src6, dst6))  # fmt: skip
        return None if ok and not _mrc_udp(frame, 54, frame[20]) else f"IPv6 {src6} -> {dst6}"
    return f"ether type {ether:#06x}"


def _mrc_udp(frame: bytes, offset: int, proto: int) -> bool:
    return proto == 17 and struct.unpack("!H", frame[offset + 2 : offset + 4])[0] == ROCEV2_UDP_PORT


@pytest.mark.timeout(900)
def test_mrc_bw_between_racks_every_byte_checked(running: Any) -> None:
    """The server on h2 (rack 1), the client on h0 (rack 0) naming it by host name; a sweep of
    1 byte to 64 MiB, every byte checked; the management bridge meanwhile carries the exchange
    and no MRC frame."""
    capture = BridgeCapture(running)
    bw = str(ROOT / "build" / "capi" / "mrc_bw")
    procs: list[subprocess.Popen[str]] = []
    try:
        procs.append(server := exec_in(running, "h2", bw, "-t", "800"))
        time.sleep(0.5)
        # verbs timeout 5 (131 us, the agents' own) on a fabric dilated thousands of times
        procs.append(client := exec_in(running, "h0", bw, "-n", "16", "-v", "262144", "-T", "5",
                                       "-t", "800", "h2"))  # fmt: skip
        out = output(client, timeout=820)
        served = output(server, timeout=60)
    finally:
        frames = capture.close()
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert "GID index      : 3" in out and "Server         : h2 (" in out, out
    rows = [line.split() for line in out.splitlines() if line[:2].strip().isdigit()]
    assert [int(r[0]) for r in rows] == SWEEP, out
    for size, count, peak, avg, _ in rows:  # MB/s with two decimals: 1 byte may show 0.00
        assert int(count) >= 1 and float(peak) >= float(avg) >= 0, out
        assert float(avg) > 0 or int(size) < 1024, out
    assert "every byte checked by the server" in out, out
    total = sum(int(r[0]) * int(r[1]) for r in rows)
    assert f"{len(SWEEP)} sizes, {total} bytes received, every byte checked" in served, served
    others = [what for f in frames if (what := mgmt_frame(f)) is not None]
    assert not others, others[:5]
    port = BW_PORT.to_bytes(2, "big")
    tcp = [f for f in frames if f[12:14] == b"\x08\x00" and f[23] == 6 and port in f[34:38]]
    assert tcp, "the QP details did not cross the management network"
