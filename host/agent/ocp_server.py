"""The socket of the OCP MRC API provider: JSON lines over a Unix stream socket, one session per
process, served from the agent's ``selectors`` loop.

This is the second control socket of an agent (``HOST.ocp.sock`` next to ``HOST.sock``), the
one ``lib_mrc.so`` and the testbed's ``libibverbs.so.1`` talk to (docs/ocp-api.md). It differs
from :mod:`host.agent.control` in what a provider needs and a command interface does not:

- the server knows who is on the other end (``SO_PEERCRED``: the process id whose memory the
  agent reads and writes, and its user id for the controller API's privilege check);
- a connection can receive lines it did not ask for (:meth:`OcpConnection.push`: completion
  channel and asynchronous events);
- the provider hears when a connection closes, so a process that exits or crashes leaves no
  QP, CQ or memory registration behind.

Requests are answered in order; a handler may answer later (a :class:`host.agent.control.Deferred`,
e.g. endpoint probes that wait for their replies), and the connection's next requests wait for
it. Nothing blocks the loop.
"""

from __future__ import annotations

import contextlib
import json
import logging
import selectors
import socket
import struct
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from host.agent.control import Deferred, bind_unix

log = logging.getLogger("mrc.host.agent.ocp")

MAX_LINE = 1 << 20
MAX_CONNECTIONS = 256
_PEERCRED = struct.Struct("3i")

Reply = dict[str, Any]


class OcpConnection:
    """One client connection: who it is, its buffers, and what it belongs to."""

    def __init__(self, server: OcpServer, sock: socket.socket) -> None:
        self.server = server
        self.sock = sock
        self.pid, self.uid, self.gid = _PEERCRED.unpack(
            sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
        )
        self.inbuf = bytearray()
        self.outbuf = bytearray()
        self.closed = False
        self.owner: Any = None  # what the provider attached to this connection
        self.queue: list[bytes] = []  # requests waiting for a deferred reply
        self.waiting: Deferred | None = None

    def on_ready(self, mask: int) -> None:
        if mask & selectors.EVENT_READ:
            self._read()
        if mask & selectors.EVENT_WRITE and not self.closed:
            self._flush()

    def _read(self) -> None:
        eof = False
        while True:
            try:
                chunk = self.sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                eof = True
                break
            if not chunk:
                eof = True
                break
            self.inbuf += chunk
            if len(self.inbuf) > MAX_LINE and b"\n" not in self.inbuf:
                self.push(
                    {"ok": False, "errno": 7, "error": f"request longer than {MAX_LINE} bytes"}
                )
                eof = True
                break
        while not self.closed and b"\n" in self.inbuf:
            line, _, rest = bytes(self.inbuf).partition(b"\n")
            self.inbuf = bytearray(rest)
            if line.strip():
                self.queue.append(line)
        self._process()
        if eof:
            self._flush()
            self.close()

    def _process(self) -> None:
        while self.waiting is None and self.queue and not self.closed:
            reply = self.server.dispatch(self, self.queue.pop(0))
            if isinstance(reply, Deferred):
                self.waiting = reply
                reply.add_listener(self._resolved)
            else:
                self.push(reply)

    def _resolved(self, reply: Reply) -> None:
        self.waiting = None
        self.push(reply)
        self._process()

    def push(self, message: Mapping[str, Any]) -> None:
        """Send one JSON line (a reply, or an event the client did not ask for)."""
        if self.closed:
            return
        self.outbuf += json.dumps(message, separators=(",", ":")).encode() + b"\n"
        self._flush()

    def _flush(self) -> None:
        while self.outbuf:
            try:
                sent = self.sock.send(self.outbuf)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self.close()
                return
            del self.outbuf[:sent]
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if self.outbuf else 0)
        self.server.watch(self, events)

    def close(self) -> None:
        """Close the connection and tell the provider."""
        if self.closed:
            return
        self.closed = True
        self.server.forget(self)
        with contextlib.suppress(OSError):
            self.sock.close()


Dispatcher = Callable[[OcpConnection, Mapping[str, Any]], "Reply | Deferred"]
Closer = Callable[[OcpConnection], None]


class OcpServer:
    """The listening socket; ``dispatch(conn, request)`` answers, ``on_close(conn)`` cleans up."""

    def __init__(self, path: Path, dispatch: Dispatcher, on_close: Closer) -> None:
        self.path = Path(path)
        self._dispatch = dispatch
        self._on_close = on_close
        self.sock = bind_unix(self.path)
        self.selector: selectors.BaseSelector | None = None
        self.connections: dict[int, OcpConnection] = {}
        self._watching: dict[int, int] = {}
        self.requests = 0
        self.errors = 0

    def register(self, selector: selectors.BaseSelector) -> None:
        """Serve from ``selector`` (key.data is a ``callback(mask)``)."""
        self.selector = selector
        selector.register(self.sock, selectors.EVENT_READ, self._accept)

    def _accept(self, mask: int) -> None:
        while True:
            try:
                sock, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                log.warning("ocp: cannot accept a connection: %s", exc.strerror)
                return
            if len(self.connections) >= MAX_CONNECTIONS:
                with contextlib.suppress(OSError):
                    sock.sendall(b'{"ok":false,"errno":24,"error":"too many connections"}\n')
                sock.close()
                continue
            sock.setblocking(False)
            conn = OcpConnection(self, sock)
            self.connections[sock.fileno()] = conn
            self.watch(conn, selectors.EVENT_READ)

    def watch(self, conn: OcpConnection, events: int) -> None:
        fd = conn.sock.fileno()
        if self.selector is None or fd < 0 or conn.closed:
            return
        before = self._watching.get(fd, 0)
        if before == events:
            return
        self._watching[fd] = events
        if not before:
            self.selector.register(conn.sock, events, conn.on_ready)
        else:
            self.selector.modify(conn.sock, events, conn.on_ready)

    def forget(self, conn: OcpConnection) -> None:
        fd = conn.sock.fileno()
        self.connections.pop(fd, None)
        if self._watching.pop(fd, 0) and self.selector is not None:
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(conn.sock)
        try:
            self._on_close(conn)
        except Exception:  # noqa: BLE001 -- a clean-up bug must not take the agent down
            log.exception("ocp: clean-up after a connection failed")

    def dispatch(self, conn: OcpConnection, line: bytes) -> Reply | Deferred:
        """Decode one request and answer it; never raises."""
        self.requests += 1
        try:
            request = json.loads(line)
        except (UnicodeDecodeError, ValueError) as exc:
            self.errors += 1
            return {"ok": False, "errno": 22, "error": f"request is not valid JSON ({exc})"}
        if not isinstance(request, dict) or not isinstance(request.get("cmd"), str):
            self.errors += 1
            return {"ok": False, "errno": 22, "error": "request must be an object with a 'cmd'"}
        try:
            reply = self._dispatch(conn, request)
        except Exception as exc:  # noqa: BLE001 -- a handler bug must not take the agent down
            self.errors += 1
            log.exception("ocp: command %r failed", request.get("cmd"))
            reply = {"ok": False, "errno": 5, "error": f"{request['cmd']}: internal error: {exc}"}
        if isinstance(reply, dict) and not reply.get("ok"):
            self.errors += 1
        return reply

    def close(self) -> None:
        """Close every connection and the socket; remove the socket file."""
        for conn in list(self.connections.values()):
            conn.close()
        if self.selector is not None:
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(self.sock)
        self.sock.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
