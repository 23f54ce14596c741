"""Agent pieces that need no namespace: control and OCP sockets, pattern data, pcap writer, QP
numbering."""

from __future__ import annotations

import json
import os
import shutil
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.fabric import small_fabric
from support.loop import SelectorLoop

from host.agent.agent import qp_number
from host.agent.control import (
    BadRequest,
    ControlServer,
    Deferred,
    LineServer,
    SocketInUse,
    require_int,
)
from host.agent.control_client import ControlClient, ControlError, ControlUnavailable
from host.agent.data import PATTERN_CACHE_BYTES, pattern, sha256_hex, verify_bytes
from host.agent.ocp.server import OcpConnection, OcpServer
from host.agent.sockets import is_mrc_frame
from host.transport.policy import HOST_POLICIES
from p4src.contract import ETHERTYPE_IPV6, IP_PROTO_ROUTING, IP_PROTO_UDP, ROCEV2_UDP_PORT
from targets.pcap import PcapWriter
from topologies import Fabric


class LoopThread(SelectorLoop):
    """A control server (with ``ocp``, an OCP provider's socket) on its own selector loop in a
    thread (the agent's loop in miniature)."""

    def __init__(self, path: Path, *, ocp: bool = False) -> None:
        self.deferred: list[Deferred] = []
        self.resolving = True  # deferred replies are given at the next turn of the loop
        self.closed: list[int] = []  # the OCP connections closed (their process ids)
        server: LineServer[Any] = (
            OcpServer(path, self.ocp_dispatch, lambda conn: self.closed.append(conn.pid))
            if ocp
            else ControlServer(path, self.handle)
        )
        super().__init__(server, self.resolve)

    def handle(self, request: Mapping[str, Any]) -> dict[str, Any] | Deferred:
        cmd = request["cmd"]
        if cmd == "echo":
            return {"ok": True, "echo": request.get("value")}
        if cmd == "size":
            return {"ok": True, "size": require_int(request, "size", low=1)}
        if cmd == "later":
            deferred = Deferred()
            self.deferred.append(deferred)
            return deferred
        if cmd == "crash":
            raise RuntimeError("handler bug")
        raise BadRequest(f"field 'cmd': unknown command {cmd!r}", "cmd")

    def ocp_dispatch(
        self, conn: OcpConnection, request: Mapping[str, Any]
    ) -> dict[str, Any] | Deferred:
        if request["cmd"] == "who":
            return {"ok": True, "pid": conn.pid, "uid": conn.uid}
        if request["cmd"] == "event":
            conn.push({"event": "cq", "cq": 1})
            return {"ok": True}
        return self.handle(request)

    def resolve(self) -> None:
        if not self.resolving:
            return
        for deferred in list(self.deferred):
            deferred.resolve({"ok": True, "late": True})
            self.deferred.remove(deferred)

    def close(self) -> None:
        super().close()
        self.server.close()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[LoopThread]:
    loop = LoopThread(tmp_path / "agent.sock")
    yield loop
    loop.close()


def test_control_round_trip_and_request_ids(served: LoopThread) -> None:
    with ControlClient(served.server.path) as client:
        assert client.request("echo", value=[1, "two"]) == {"ok": True, "echo": [1, "two"]}
        reply = client.send_raw(b'{"cmd": "echo", "value": 3, "id": "abc"}\n')
        assert reply == {"ok": True, "echo": 3, "id": "abc"}
        assert client.request("later") == {"ok": True, "late": True}


def test_control_errors_name_the_field(served: LoopThread) -> None:
    with ControlClient(served.server.path) as client:
        with pytest.raises(ControlError) as err:
            client.request("size", size="abc")
        assert err.value.field == "size"
        assert "expected an integer" in str(err.value)
        with pytest.raises(ControlError) as err:
            client.request("nope")
        assert err.value.field == "cmd"
        for raw, words in (
            (b"this is not json\n", "not valid JSON"),
            (b"[1, 2]\n", "JSON object"),
            (b'{"value": 1}\n', "'cmd' is required"),
            (b'{"cmd": 5}\n', "'cmd' is required"),
            (b"\xff\xfe\n", "not valid JSON"),
        ):
            reply = client.send_raw(raw)
            assert reply["ok"] is False and words in reply["error"], (raw, reply)
        reply = client.send_raw(b'{"cmd": "crash"}\n')
        assert reply["ok"] is False and "internal error" in reply["error"]
        # the server is still there and answers in order
        assert client.request("echo", value="after")["echo"] == "after"
    assert served.server.errors >= 8


def test_control_survives_abrupt_clients_and_long_lines(served: LoopThread) -> None:
    path = str(served.server.path)
    for payload in (b'{"cmd": "echo"', b"\x00" * 100, b'{"cmd": "later"}\n'):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
        sock.sendall(payload)
        sock.close()  # gone before (or while) the answer is written
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(path)
    sock.sendall(b"x" * ((1 << 20) + 10))
    answer = b""
    while not answer.endswith(b"\n"):
        chunk = sock.recv(4096)
        if not chunk:
            break
        answer += chunk
    sock.close()
    assert json.loads(answer)["ok"] is False
    with ControlClient(path) as client:
        assert client.request("echo", value=1)["ok"] is True


@pytest.fixture
def ocp_served(tmp_path: Path) -> Iterator[LoopThread]:
    loop = LoopThread(tmp_path / "h0.ocp.sock", ocp=True)
    yield loop
    loop.close()


def exchange(path: Path, payload: bytes, *, shut: bool = True) -> list[Any]:
    """Send ``payload``, (with ``shut``) end the input, and read the lines until EOF (without
    ``shut``, the first line)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(path))
    sock.settimeout(10)
    sock.sendall(payload)
    if shut:
        sock.shutdown(socket.SHUT_WR)
    data = b""
    while shut or not data.endswith(b"\n"):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    sock.close()
    return [json.loads(line) for line in data.splitlines()]


def test_ocp_socket_replies_in_order_with_events_between_and_no_ids(
    ocp_served: LoopThread,
) -> None:
    lines = b'{"cmd":"who","id":5}\n\n{"cmd":"event"}\n{"cmd":"later"}\n{"cmd":"echo","value":2}\n'
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(ocp_served.server.path))
    sock.settimeout(10)
    sock.sendall(lines)
    reader = sock.makefile("rb")
    assert [json.loads(reader.readline()) for _ in range(5)] == [
        {"ok": True, "pid": os.getpid(), "uid": os.geteuid()},
        {"event": "cq", "cq": 1},
        {"ok": True},
        {"ok": True, "late": True},  # a deferred reply holds the next request
        {"ok": True, "echo": 2},
    ]
    reader.close()
    sock.close()


def test_ocp_socket_errors_carry_an_errno(ocp_served: LoopThread) -> None:
    path = ocp_served.server.path
    assert exchange(path, b"not json\n")[0]["errno"] == 22
    for raw in (b"[1]\n", b'{"value": 1}\n', b'{"cmd": 5}\n'):
        assert exchange(path, raw) == [
            {"ok": False, "errno": 22, "error": "request must be an object with a 'cmd'"}
        ]
    assert exchange(path, b'{"cmd":"crash"}\n') == [
        {"ok": False, "errno": 5, "error": "crash: internal error: handler bug"}
    ]
    assert exchange(path, b"x" * ((1 << 20) + 10), shut=False) == [
        {"ok": False, "errno": 7, "error": "request longer than 1048576 bytes"}
    ]


def test_ocp_connection_ends_with_its_process(ocp_served: LoopThread) -> None:
    ocp_served.resolving = False
    # the input ends while a reply is deferred: the connection closes without it
    assert exchange(ocp_served.server.path, b'{"cmd":"later"}\n{"cmd":"who"}\n') == []
    assert ocp_served.closed == [os.getpid()]
    assert not ocp_served.server.connections


def test_socket_in_use_and_stale_socket(tmp_path: Path, served: LoopThread) -> None:
    with pytest.raises(SocketInUse, match="in use"):
        ControlServer(served.server.path, served.handle)
    stale = tmp_path / "stale.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(stale))
    sock.close()  # a socket file nobody listens on: taken over
    server = ControlServer(stale, served.handle)
    server.close()
    assert not stale.exists()
    regular = tmp_path / "file"
    regular.write_text("x")
    with pytest.raises(SocketInUse, match="not a socket"):
        ControlServer(regular, served.handle)


def test_client_names_a_missing_socket(tmp_path: Path) -> None:
    with pytest.raises(ControlUnavailable, match="no agent control socket"):
        ControlClient(tmp_path / "none.sock").info()


def test_pattern_is_deterministic_and_verify_finds_mismatches() -> None:
    data = pattern(7, 10000)
    assert data == pattern(7, 10000) and data != pattern(8, 10000)
    assert pattern(7, 100) == data[:100]
    assert verify_bytes(data, seed=7).match
    damaged = bytearray(data)
    damaged[5000] ^= 0xFF
    damaged[9999] ^= 0x01
    result = verify_bytes(damaged, seed=7)
    assert not result.match
    assert result.first_mismatch == 5000 and result.mismatched_bytes == 2
    assert verify_bytes(data, sha256=sha256_hex(data)).match
    assert not verify_bytes(damaged, sha256=sha256_hex(data)).match


def test_a_message_sized_pattern_is_drawn_once() -> None:
    """A workload writes the same seed and message size again and again: the pattern is kept,
    not drawn anew (a large one is drawn each time, and equals the kept prefix)."""
    message = pattern(11, PATTERN_CACHE_BYTES)
    assert pattern(11, PATTERN_CACHE_BYTES) is message
    large = pattern(11, PATTERN_CACHE_BYTES + 1)
    assert large is not pattern(11, PATTERN_CACHE_BYTES + 1)
    assert large[:PATTERN_CACHE_BYTES] == message


def test_pcap_writer_writes_readable_records(tmp_path: Path) -> None:
    path = tmp_path / "c.pcap"
    writer = PcapWriter(path, flush_every=2)
    frames = [bytes(range(60)), b"\xaa" * 1500, b"\x01" * 14]
    for i, frame in enumerate(frames):
        writer.write(frame, 1000.0 + i * 0.5)
    writer.close()
    raw = path.read_bytes()
    magic, major, minor, _, _, snaplen, linktype = struct.unpack_from("<IHHiIII", raw)
    assert (magic, major, minor, linktype) == (0xA1B2C3D4, 2, 4, 1)
    off = 24
    seen = []
    while off < len(raw):
        sec, usec, incl, orig = struct.unpack_from("<IIII", raw, off)
        off += 16
        seen.append((sec, usec, raw[off : off + incl]))
        assert incl == orig
        off += incl
    assert [f for _, _, f in seen] == frames
    assert seen[1][:2] == (1000, 500000)


def test_prefilter_accepts_only_ipv6_udp_4791_or_srh() -> None:
    eth = b"\x02" * 12 + ETHERTYPE_IPV6.to_bytes(2, "big")

    def ipv6(next_header: int, dport: int) -> bytes:
        header = bytes([0x60, 0, 0, 0, 0, 16, next_header, 64]) + b"\x00" * 32
        return eth + header + struct.pack("!HHHH", 49152, dport, 16, 0) + b"\x00" * 8

    assert is_mrc_frame(ipv6(IP_PROTO_UDP, ROCEV2_UDP_PORT))
    assert not is_mrc_frame(ipv6(IP_PROTO_UDP, ROCEV2_UDP_PORT + 1))
    assert not is_mrc_frame(ipv6(58, ROCEV2_UDP_PORT))  # ICMPv6
    assert is_mrc_frame(ipv6(IP_PROTO_ROUTING, 0))  # SRH first: the core parses it
    assert not is_mrc_frame(b"\x02" * 12 + b"\x08\x00" + b"\x45" * 60)
    assert not is_mrc_frame(eth + b"\x60")


def test_qp_numbers_are_unique_per_host_and_agree_between_ends(fabric: Fabric) -> None:
    hosts = [h.index for h in fabric.hosts]
    for a in hosts:
        numbers = [qp_number(a, b, p) for b in hosts if b != a for p in HOST_POLICIES]
        assert len(set(numbers)) == len(numbers)
        assert all(0 < n < 1 << 24 for n in numbers)
    with pytest.raises(ValueError, match="itself"):
        qp_number(1, 1, "mrc")


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "host.agent.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_cli_errors_are_one_line(tmp_path: Path) -> None:
    done = run_cli("--topo", "small", "--host", "h9", "--control", str(tmp_path / "s"))
    assert done.returncode == 1 and "no host 'h9'" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    done = run_cli("--topo", str(tmp_path / "none.yaml"), "--host", "h0")
    assert done.returncode == 1 and "none.yaml" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    done = run_cli("stats", "--control", str(tmp_path / "none.sock"))
    assert done.returncode == 1 and "no agent control socket" in done.stderr
    done = run_cli("--topo", "small", "--host", "h0", "--cc", "vegas")
    assert done.returncode == 1 and "--cc vegas" in done.stderr


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="needs root and setpriv to run the command line as an unprivileged user",
)
def test_cli_says_it_needs_root(tmp_path: Path) -> None:
    done = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable,
         "-m", "host.agent.cli", "--topo", "small", "--host", "h0",
         "--control", str(tmp_path / "x.sock")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    if "Permission denied" in done.stderr and "needs root" not in done.stderr:
        pytest.skip("the unprivileged user cannot read the Python environment")
    assert done.returncode == 1
    assert "needs root" in done.stderr and len(done.stderr.strip().splitlines()) == 1


# -- the real command handlers, fuzzed (an agent without sockets: no root needed) -------------

FIELDS = ["name", "size", "peer", "addr", "rkey", "policy", "message_size", "imm", "seed",
          "file", "transfers", "timeout", "region", "offset", "sha256", "state", "ev", "path",
          "algorithm", "config", "counters"]  # fmt: skip
COMMANDS = ["info", "register", "regions", "transfer", "write", "wait", "stats", "paths",
            "set-ev", "verify", "cc-profile", "nope", ""]  # fmt: skip


def json_values() -> st.SearchStrategy[Any]:
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-3, 70_000),
        st.sampled_from([1 << 40, -(1 << 63), 2**64, 0xFFFFFFFF]),
        st.floats(allow_nan=False, allow_infinity=False, min_value=-1e6, max_value=1e6),
        st.text(max_size=12),
        st.sampled_from(
            [
                "h0",
                "h1",
                "h3",
                "h9",
                "mrc",
                "ecmp",
                "p0",
                "p1-s0",
                "DENIED",
                "good",
                "/dev/zero",
                "/nonexistent",
                "0" * 64,
                "rx",
            ]
        ),  # fmt: skip
    )
    return st.recursive(scalars, lambda inner: st.lists(inner, max_size=3), max_leaves=4)


requests_strategy = st.fixed_dictionaries(
    {"cmd": st.sampled_from(COMMANDS)},
    optional={f: json_values() for f in FIELDS},
)


@pytest.fixture(scope="module")
def commands_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ControlServer, Any]]:
    from host.agent.agent import Agent, AgentOptions
    from host.agent.commands import Commands

    work = tmp_path_factory.mktemp("commands")
    fabric = small_fabric()
    agent = Agent(fabric, AgentOptions(host="h0", control=work / "h0.sock", ev_count=8))
    agent.regions["rx"] = agent.context.register_region(1 << 32, 4096)
    server = ControlServer(work / "h0.sock", Commands(agent).handle)
    yield server, agent
    server.close()


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(request=requests_strategy)
def test_commands_answer_every_request(
    commands_server: tuple[ControlServer, Any], request: dict[str, Any]
) -> None:
    server, agent = commands_server
    reply, _ = server.dispatch(json.dumps(request).encode())
    if isinstance(reply, Deferred):
        assert request["cmd"] == "wait"
        return
    assert isinstance(reply["ok"], bool)
    if not reply["ok"]:
        assert reply["error"] and "internal error" not in reply["error"], (request, reply)
    json.dumps(reply)  # JSON-ready
    agent.stopping = False


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(line=st.binary(max_size=80))
def test_control_lines_of_garbage_get_errors(
    commands_server: tuple[ControlServer, Any], line: bytes
) -> None:
    server, _ = commands_server
    reply, _ = server.dispatch(line)
    if isinstance(reply, dict) and not reply["ok"]:
        assert reply["error"]


def test_stats_counters_are_the_full_stats_integers(
    commands_server: tuple[ControlServer, Any],
) -> None:
    server, _ = commands_server

    def ask(**request: Any) -> dict[str, Any]:
        reply, _ = server.dispatch(json.dumps({"cmd": "stats", **request}).encode())
        assert isinstance(reply, dict)
        return reply

    full = ask()["stats"]["core"]
    brief = ask(counters=True)
    assert brief["ok"] and set(brief["stats"]) == {"core"}
    counters = brief["stats"]["core"]
    assert counters == {k: v for k, v in full.items() if type(v) is int}
    assert "payload_bytes_placed" in counters and "qps" not in counters
    assert ask(counters=False)["stats"]["core"].keys() == full.keys()
    bad = ask(counters="yes")
    assert not bad["ok"] and bad["field"] == "counters"


# -- CC profiles on the control interface ------------------------------------------------------

#: a profile with every field of struct mrc_ctl_cc_nscc_cfg (mrc_ctl.h), in its units
NSCC_CFG = {
    "disable_qa": 0, "adjust_bytes_threshold": 32768, "adjust_period_threshold": 3000,
    "base_rtt": 3000, "eta": 200.0, "fi": 6000.0, "fi_scale": 0.08, "gamma": 0.8,
    "max_md_jump": 0.5, "max_cwnd": 100000, "qa_gate": 3, "qa_threshold": 9000,
    "target_delay": 2250,
}  # fmt: skip


def test_cc_profile_round_trips_with_the_ocp_field_names(
    commands_server: tuple[ControlServer, Any],
) -> None:
    from host.transport.cc.nscc import NSCC_FIELDS

    server, agent = commands_server
    assert set(NSCC_CFG) == set(NSCC_FIELDS)

    def ask(**request: Any) -> dict[str, Any]:
        reply, _ = server.dispatch(json.dumps({"cmd": "cc-profile", **request}).encode())
        assert isinstance(reply, dict)
        return reply

    # by default: NSCC, every field derived from the fabric in protocol (real-fabric) units
    default = ask()
    assert default["ok"] and default["algorithm"] == "nscc"
    assert set(default["config"]) == set(NSCC_FIELDS)
    topo = agent.topology
    assert default["config"]["base_rtt"] < topo.base_rtt / 1e-9  # dilated: ns of the real fabric
    set_all = ask(algorithm="nscc", config=NSCC_CFG)
    assert set_all == {"ok": True, "algorithm": "nscc", "config": NSCC_CFG}
    assert ask() == set_all
    for qp in agent.qps.values():
        assert qp.cc.params == NSCC_CFG and qp.cc.max_cwnd == 100000
    # a partial profile keeps the fabric's values for the fields it leaves out
    partial = ask(algorithm="uet-1.0-nscc", config={"gamma": 0.5})
    assert partial["config"]["gamma"] == 0.5
    assert partial["config"]["base_rtt"] == default["config"]["base_rtt"]
    other = ask(algorithm="ecn-delay", config={})
    assert other == {"ok": True, "algorithm": "ecn-delay", "config": {}}
    # unknown fields and algorithms are refused, naming the field
    bad = ask(algorithm="nscc", config={"base_rtt": 3000, "gama": 0.5})
    assert not bad["ok"] and bad["field"] == "config.gama" and "gama" in bad["error"]
    bad = ask(algorithm="cubic")
    assert not bad["ok"] and bad["field"] == "algorithm"
    bad = ask(algorithm="nscc", config={"gamma": 2})
    assert not bad["ok"] and bad["field"] == "config.gamma"
    assert ask()["algorithm"] == "ecn-delay"  # nothing changed by the refusals
    ask(algorithm="nscc")
