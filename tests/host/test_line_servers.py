"""What one client can take of the agent's line servers (the control socket and the OCP
provider's socket, :mod:`host.agent.control`): input split into lines in linear time, a line too
long skipped without ending the connection, replies with backpressure (a client that does not
read is no longer read, then dropped), connections capped per process; and the transport's log
of EV state changes bounded (docs/ocp-api.md, "Limits and isolation")."""

from __future__ import annotations

import json
import logging
import selectors
import socket
import subprocess
import sys
import time
from collections import deque
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.loop import SelectorLoop

from host.agent import control
from host.agent.control import ControlServer, Deferred, LineConnection, Reply
from host.agent.ocp.server import OcpConnection, OcpServer
from host.transport.stats import EV_TRANSITIONS, Stats

BIG = "x" * 4000  # a reply of some 4 KB


def answer(request: Mapping[str, Any]) -> Reply | Deferred:
    if request["cmd"] == "big":
        return {"ok": True, "value": BIG}
    return {"ok": True, "echo": request.get("value")}


@pytest.fixture
def control_served(tmp_path: Path) -> Iterator[SelectorLoop]:
    served = SelectorLoop(ControlServer(tmp_path / "h0.sock", answer))
    yield served
    served.close()
    served.server.close()


@pytest.fixture
def ocp_served(tmp_path: Path) -> Iterator[SelectorLoop]:
    server = OcpServer(tmp_path / "h0.ocp.sock", lambda c, r: answer(r), lambda c: None)
    served = SelectorLoop(server)
    yield served
    served.close()
    server.close()


def connect(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(str(path))
    return sock


def read_lines(sock: socket.socket, count: int) -> list[Any]:
    reader = sock.makefile("rb")
    try:
        return [json.loads(reader.readline()) for _ in range(count)]
    finally:
        reader.close()


class ScriptedSocket:
    """A socket whose input is given at once and whose output is kept."""

    def __init__(self, data: bytes) -> None:
        self.data = memoryview(data)
        self.sent = bytearray()

    def recv(self, size: int) -> bytes:
        if not self.data:
            raise BlockingIOError
        chunk, self.data = bytes(self.data[:size]), self.data[size:]
        return chunk

    def send(self, data: bytes | bytearray) -> int:
        self.sent += data
        return len(data)

    def fileno(self) -> int:
        return -1

    def close(self) -> None:
        pass


def test_input_is_split_into_lines_in_linear_time(tmp_path: Path) -> None:
    # a million lines (most of them blank) in one read: each byte is looked at once (splitting
    # by copying the rest of the buffer for every line would copy a terabyte here)
    server = ControlServer(tmp_path / "h0.sock", answer)
    try:
        lines = b"\n" * (1 << 20) + b'{"cmd":"echo","value":1}\n' + b' {"cmd":"echo","value":2}'
        sock = ScriptedSocket(lines + b"\n")
        conn = LineConnection(server, sock, (1, 0, 0))  # type: ignore[arg-type]
        conn.on_ready(selectors.EVENT_READ)
        assert [json.loads(line) for line in sock.sent.splitlines()] == [
            {"ok": True, "echo": 1}, {"ok": True, "echo": 2},
        ]  # fmt: skip
        assert server.requests == 2 and not conn.inbuf
    finally:
        server.close()


@pytest.mark.parametrize("chunk", [1, 7, 65536])
def test_lines_split_across_reads_come_out_whole(tmp_path: Path, chunk: int) -> None:
    server = ControlServer(tmp_path / "h0.sock", answer)
    try:
        stream = b"".join(b'{"cmd":"echo","value":%d}\n' % i for i in range(50))
        sock = ScriptedSocket(b"")
        conn = LineConnection(server, sock, (1, 0, 0))  # type: ignore[arg-type]
        for start in range(0, len(stream), chunk):
            conn.take(stream[start : start + chunk])
        assert conn.queue == type(conn.queue)(stream.splitlines())
    finally:
        server.close()


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=20),
    cuts=st.lists(st.integers(0, 1000), max_size=8),
)
def test_any_cut_of_the_input_gives_the_same_lines(lines: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(line + b"\n" for line in lines)
    conn = LineConnection.__new__(LineConnection)  # the splitting alone: no server, no socket
    conn.inbuf, conn.discarding, conn.queue = bytearray(), False, deque()
    at = 0
    for cut in sorted(c % (len(stream) + 1) for c in cuts) + [len(stream)]:
        conn.take(stream[at:cut])
        at = max(at, cut)
    assert list(conn.queue) == [line for line in lines if line.strip()]
    assert not conn.inbuf


@pytest.mark.parametrize("fixture", ["control_served", "ocp_served"])
def test_a_line_too_long_is_refused_and_the_connection_goes_on(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    served: SelectorLoop = request.getfixturevalue(fixture)
    sock = connect(served.server.path)
    sock.sendall(b'{"cmd":"echo","value":"before"}\n' + b"x" * ((1 << 20) + 10))
    sock.sendall(b"y" * 100000 + b'\n{"cmd":"echo","value":"after"}\n')
    first, refusal, after = read_lines(sock, 3)
    sock.close()
    assert first["echo"] == "before" and after["echo"] == "after"
    assert refusal["ok"] is False and "longer than 1048576 bytes" in refusal["error"]
    if fixture == "ocp_served":
        assert refusal["errno"] == 7  # E2BIG


def fill(sock: socket.socket, line: bytes, limit: int) -> int:
    """Send ``line`` until the socket takes no more for a while (or ``limit`` lines); the count
    sent."""
    sock.setblocking(False)
    sent = 0
    pending = b""
    stalls = 0
    while sent < limit and stalls < 20:
        pending = pending or line
        try:
            n = sock.send(pending)
        except BlockingIOError:
            stalls += 1
            time.sleep(0.05)
            continue
        stalls = 0
        pending = pending[n:]
        if not pending:
            sent += 1
    return sent


def test_a_client_that_does_not_read_is_not_read_either(control_served: SelectorLoop) -> None:
    # 20000 requests (1 KB) of 4 KB replies (80 MB): the server stops reading once 1 MiB
    # waits for the client, so the socket buffers fill and the client's sends stall
    sock = connect(control_served.server.path)
    sent = fill(sock, b'{"cmd":"big","pad":"%s"}\n' % (b"p" * 1000), 20000)
    conns = list(control_served.server.connections.values())
    assert len(conns) == 1
    waiting = len(conns[0].outbuf)
    assert sent < 20000
    assert waiting <= control.OUTPUT_HIGH + 2 * len(BIG)
    # another client is served meanwhile; once the first one reads, it gets every reply
    other = connect(control_served.server.path)
    other.sendall(b'{"cmd":"echo","value":3}\n')
    assert read_lines(other, 1) == [{"ok": True, "echo": 3}]
    other.close()
    sock.setblocking(True)
    sock.settimeout(10)
    replies = read_lines(sock, sent)
    assert all(r == {"ok": True, "value": BIG} for r in replies)
    sock.close()


def test_a_client_that_lets_lines_pile_up_is_dropped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = OcpServer(tmp_path / "h0.ocp.sock", lambda c, r: answer(r), lambda c: None)
    ours, theirs = socket.socketpair()
    try:
        ours.setblocking(False)
        conn = OcpConnection(server, ours)
        server.connections[ours.fileno()] = conn
        with caplog.at_level(logging.WARNING, logger="mrc.host.agent.ocp"):
            for _ in range((control.MAX_OUTPUT // len(BIG)) + 2):  # events it never reads
                conn.push({"event": "async", "pad": BIG})
                if conn.closed:
                    break
        assert conn.closed and server.dropped == 1 and not server.connections
        assert "does not read them" in caplog.text
    finally:
        theirs.close()
        server.close()


def test_connections_are_capped_per_process(control_served: SelectorLoop) -> None:
    path = control_served.server.path
    cap = control_served.server.max_per_process
    mine = [connect(path) for _ in range(cap)]
    for sock in mine:  # every one is served
        sock.sendall(b'{"cmd":"echo","value":0}\n')
        assert read_lines(sock, 1)[0]["ok"]
    refused = connect(path)
    reply = read_lines(refused, 1)[0]
    refused.close()
    assert reply["ok"] is False and f"at most {cap} per process" in reply["error"]
    assert control_served.server.refused == 1
    # another process still gets in
    script = (
        "import socket, sys; s = socket.socket(socket.AF_UNIX); s.settimeout(10); "
        's.connect(sys.argv[1]); s.sendall(b\'{"cmd":"echo","value":5}\\n\'); '
        "print(s.makefile().readline().strip())"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=30,
        check=True,
    )  # fmt: skip
    assert json.loads(done.stdout) == {"ok": True, "echo": 5}
    mine.pop().close()
    while len(control_served.server.connections) >= cap:  # seen on the loop's next turn
        time.sleep(0.01)
    again = connect(path)
    again.sendall(b'{"cmd":"echo","value":6}\n')
    assert read_lines(again, 1) == [{"ok": True, "echo": 6}]
    again.close()
    for sock in mine:
        sock.close()


def test_the_log_of_ev_state_changes_is_bounded() -> None:
    stats = Stats()
    for i in range(EV_TRANSITIONS + 100):
        stats.ev_transitions.append({"time": float(i)})
    out = stats.as_dict()
    assert len(out["ev_transitions"]) == EV_TRANSITIONS
    assert out["ev_transitions"][0] == {"time": 100.0}  # the newest are kept
    assert out["ev_transitions_total"] == EV_TRANSITIONS + 100


def test_a_connection_carries_credentials_from_its_accept(tmp_path: Path) -> None:
    """A program writes its first request at once after connect. The listening socket asks for
    credentials, so the accepted socket has them from the accept on (a flag asked only in the
    connection's constructor left a window where a request came without them, was dropped as
    another process's, and the program waited forever)."""
    server = OcpServer(tmp_path / "h0.ocp.sock", lambda c, r: answer(r), lambda c: None)
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        client.connect(str(server.path))
        accepted, _ = server.sock.accept()
        with accepted:
            assert accepted.getsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED) == 1
            client.sendall(b'{"cmd":"hello"}\n')
            accepted.settimeout(5)
            conn = OcpConnection(server, accepted)
            assert conn.receive() == b'{"cmd":"hello"}\n' and conn.foreign_bytes == 0
    finally:
        client.close()
        server.close()
