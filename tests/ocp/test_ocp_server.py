"""The OCP provider's socket (host/agent/ocp_server.py) on a real Unix socket, without a provider.

The socket shares its line handling with the control socket (host/agent/control.LineServer);
these tests pin what the OCP side does differently: errno replies, no echoed ids, events pushed
between replies, the peer's credentials, and a connection that ends when its process goes away.
"""

from __future__ import annotations

import json
import os
import selectors
import socket
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from host.agent.control import Deferred
from host.agent.ocp_server import OcpConnection, OcpServer, Reply


class OcpLoop:
    """An OCP server on its own selector loop in a thread (the agent's loop in miniature)."""

    def __init__(self, path: Path) -> None:
        self.deferred: list[Deferred] = []
        self.release = threading.Event()  # resolve the deferred replies
        self.closed: list[int] = []
        self.server = OcpServer(path, self.dispatch, lambda conn: self.closed.append(conn.pid))
        self.selector = selectors.DefaultSelector()
        self.server.register(self.selector)
        self.running = True
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def dispatch(self, conn: OcpConnection, request: Mapping[str, Any]) -> Reply | Deferred:
        cmd = request["cmd"]
        if cmd == "who":
            return {"ok": True, "pid": conn.pid, "uid": conn.uid}
        if cmd == "event":
            conn.push({"event": "cq", "cq": 1})
            return {"ok": True}
        if cmd == "later":
            deferred = Deferred()
            self.deferred.append(deferred)
            return deferred
        if cmd == "crash":
            raise RuntimeError("handler bug")
        return {"ok": False, "errno": 95, "error": f"unknown command {cmd!r}"}

    def loop(self) -> None:
        while self.running:
            for key, mask in self.selector.select(0.02):
                key.data(mask)
            if self.release.is_set():
                for deferred in self.deferred:
                    deferred.resolve({"ok": True, "late": True})
                self.deferred.clear()

    def close(self) -> None:
        self.running = False
        self.thread.join(5)
        self.server.close()
        self.selector.close()


@pytest.fixture
def ocp_loop(tmp_path: Path) -> Iterator[OcpLoop]:
    loop = OcpLoop(tmp_path / "h0.ocp.sock")
    yield loop
    loop.close()


def exchange(path: Path, payload: bytes, *, shut: bool = True) -> list[Any]:
    """Send ``payload``, (with ``shut``) end the input, and read the lines until EOF."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(path))
    sock.settimeout(10)
    sock.sendall(payload)
    if shut:
        sock.shutdown(socket.SHUT_WR)
    data = b""
    while not data.endswith(b"\n") or shut:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    sock.close()
    return [json.loads(line) for line in data.splitlines()]


def test_replies_in_order_with_events_between_and_no_ids(ocp_loop: OcpLoop) -> None:
    lines = b'{"cmd":"who","id":5}\n\n{"cmd":"event"}\n{"cmd":"nope"}\n'
    assert exchange(ocp_loop.server.path, lines) == [
        {"ok": True, "pid": os.getpid(), "uid": os.geteuid()},
        {"event": "cq", "cq": 1},
        {"ok": True},
        {"ok": False, "errno": 95, "error": "unknown command 'nope'"},
    ]


def test_errors_carry_an_errno(ocp_loop: OcpLoop) -> None:
    path = ocp_loop.server.path
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


def test_a_deferred_reply_holds_later_requests(ocp_loop: OcpLoop) -> None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(ocp_loop.server.path))
    sock.settimeout(10)
    sock.sendall(b'{"cmd":"later"}\n{"cmd":"who"}\n')
    ocp_loop.release.set()
    reader = sock.makefile("rb")
    assert json.loads(reader.readline()) == {"ok": True, "late": True}
    assert json.loads(reader.readline())["pid"] == os.getpid()
    reader.close()
    sock.close()


def test_a_connection_ends_with_its_process(ocp_loop: OcpLoop) -> None:
    # the input ends while a reply is deferred: the connection closes without it
    assert exchange(ocp_loop.server.path, b'{"cmd":"later"}\n{"cmd":"who"}\n') == []
    assert ocp_loop.closed == [os.getpid()]
    assert not ocp_loop.server.connections
