"""The agent's local control interface: JSON lines over a Unix stream socket.

A client (the experiment runner, ``mrc-host transfer``, tests) sends one JSON object per line,
``{"cmd": "stats"}``, optionally with an ``"id"`` that is echoed back; the agent answers one JSON
object per line, ``{"ok": true, ...}`` or ``{"ok": false, "error": "...", "field": "..."}``. The
commands and their fields are listed in docs/host-agent.md; this module is only the transport:

- :class:`ControlServer` -- the listening socket and its connections, driven by the agent's
  ``selectors`` loop (non-blocking reads and writes, no thread);
- :class:`Deferred` -- a reply a handler gives later (``wait`` answers when transfers finish);
- :class:`BadRequest` and the ``get_*`` helpers -- field validation whose errors name the field.

Requests on one connection are answered in order: while a reply is deferred, the connection's
later requests wait for it.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import logging
import os
import selectors
import socket
import stat
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger("mrc.host.agent.control")

MAX_LINE = 1 << 20  # bytes in one request line
MAX_CONNECTIONS = 64

Reply = dict[str, Any]


class BadRequest(ValueError):
    """A request that cannot be carried out; ``field`` names the offending field, if any."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field

    def reply(self) -> Reply:
        """The JSON error reply for this request."""
        reply: Reply = {"ok": False, "error": str(self)}
        if self.field is not None:
            reply["field"] = self.field
        return reply


class SocketInUse(RuntimeError):
    """The control socket path is held by a live agent (or is not a socket)."""


class Deferred:
    """A reply that a handler will give later with :meth:`resolve`."""

    def __init__(self) -> None:
        self._reply: Reply | None = None
        self._listeners: list[Callable[[Reply], None]] = []

    @property
    def done(self) -> bool:
        """True once resolved."""
        return self._reply is not None

    def resolve(self, reply: Reply) -> None:
        """Give the reply (only the first call counts)."""
        if self._reply is not None:
            return
        self._reply = reply
        for listener in self._listeners:
            listener(reply)
        self._listeners.clear()

    def add_listener(self, listener: Callable[[Reply], None]) -> None:
        """Call ``listener(reply)`` when resolved (at once if already resolved)."""
        if self._reply is not None:
            listener(self._reply)
        else:
            self._listeners.append(listener)


Handler = Callable[[Mapping[str, Any]], "Reply | Deferred"]


# -- field helpers -----------------------------------------------------------------------------


def _describe(value: object) -> str:
    text = json.dumps(value) if not isinstance(value, bytes) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def get_int(
    request: Mapping[str, Any],
    name: str,
    *,
    default: int | None = None,
    low: int | None = None,
    high: int | None = None,
    required: bool = False,
) -> int | None:
    """Field ``name`` as an integer within [low, high]; :class:`BadRequest` names the field."""
    if name not in request or request[name] is None:
        if required:
            raise BadRequest(f"field '{name}' is required (an integer)", name)
        return default
    value = request[name]
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"field '{name}': expected an integer, got {_describe(value)}", name)
    if (low is not None and value < low) or (high is not None and value > high):
        span = (
            f"between {low} and {high}"
            if low is not None and high is not None
            else (f">= {low}" if low is not None else f"<= {high}")
        )
        raise BadRequest(f"field '{name}': expected an integer {span}, got {value}", name)
    return value


def require_int(
    request: Mapping[str, Any], name: str, *, low: int | None = None, high: int | None = None
) -> int:
    """A required integer field."""
    value = get_int(request, name, low=low, high=high, required=True)
    assert value is not None
    return value


def get_float(request: Mapping[str, Any], name: str, *, default: float, low: float = 0.0) -> float:
    """Field ``name`` as a number >= low."""
    if name not in request or request[name] is None:
        return default
    value = request[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise BadRequest(f"field '{name}': expected a number, got {_describe(value)}", name)
    if value < low:
        raise BadRequest(f"field '{name}': expected a number >= {low}, got {value}", name)
    return float(value)


def get_str(
    request: Mapping[str, Any],
    name: str,
    *,
    default: str | None = None,
    choices: tuple[str, ...] | None = None,
    required: bool = False,
) -> str | None:
    """Field ``name`` as a string (one of ``choices`` when given)."""
    if name not in request or request[name] is None:
        if required:
            expected = f"one of {', '.join(choices)}" if choices else "a string"
            raise BadRequest(f"field '{name}' is required ({expected})", name)
        return default
    value = request[name]
    if not isinstance(value, str) or not value:
        raise BadRequest(f"field '{name}': expected a string, got {_describe(value)}", name)
    if choices is not None and value not in choices:
        raise BadRequest(
            f"field '{name}': expected one of {', '.join(choices)}, got {_describe(value)}", name
        )
    return value


def require_str(
    request: Mapping[str, Any], name: str, *, choices: tuple[str, ...] | None = None
) -> str:
    """A required string field."""
    value = get_str(request, name, choices=choices, required=True)
    assert value is not None
    return value


def get_int_list(request: Mapping[str, Any], name: str) -> list[int] | None:
    """Field ``name`` as a list of non-negative integers (a single integer is a list of one)."""
    if name not in request or request[name] is None:
        return None
    value = request[name]
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value
    ):
        raise BadRequest(
            f"field '{name}': expected a list of transfer ids (integers), got {_describe(value)}",
            name,
        )
    return list(value)


def reject_unknown(request: Mapping[str, Any], allowed: set[str]) -> None:
    """:class:`BadRequest` naming the first field that is not in ``allowed``."""
    extra = sorted(set(request) - allowed - {"cmd", "id"})
    if extra:
        raise BadRequest(
            f"field '{extra[0]}' is not a field of '{request.get('cmd')}' "
            f"(fields: {', '.join(sorted(allowed)) or 'none'})",
            extra[0],
        )


# -- the server --------------------------------------------------------------------------------


def bind_unix(path: Path) -> socket.socket:
    """A listening Unix socket at ``path``; :class:`SocketInUse` when a live agent holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        if not stat.S_ISSOCK(path.lstat().st_mode):
            raise SocketInUse(f"control socket path {path} exists and is not a socket")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.settimeout(1.0)
        try:
            probe.connect(str(path))
        except OSError:
            path.unlink()  # stale socket of an agent that is gone
        else:
            raise SocketInUse(
                f"control socket {path} is in use by a running agent "
                "(stop it with 'mrc-host quit --control PATH' or choose another --control)"
            )
        finally:
            probe.close()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(str(path))
        os.chmod(path, 0o660)
        server.listen(16)
    except OSError:
        server.close()
        raise
    server.setblocking(False)
    return server


class _Connection:
    """One client connection: input line buffer, queued requests and output buffer."""

    def __init__(self, server: ControlServer, sock: socket.socket) -> None:
        self.server = server
        self.sock = sock
        self.inbuf = bytearray()
        self.outbuf = bytearray()
        self.queue: deque[bytes] = deque()
        self.waiting: Deferred | None = None
        self.closing = False  # close once the output is flushed
        self.closed = False

    def on_ready(self, mask: int) -> None:
        if mask & selectors.EVENT_READ:
            self._read()
        if mask & selectors.EVENT_WRITE and not self.closed:
            self._flush()

    def _read(self) -> None:
        while True:
            try:
                chunk = self.sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self.close()
                return
            if not chunk:
                self.closing = True
                break
            self.inbuf += chunk
            if len(self.inbuf) > MAX_LINE and b"\n" not in self.inbuf:
                self.send_reply(
                    {"ok": False, "error": f"request line longer than {MAX_LINE} bytes"}
                )
                self.inbuf.clear()
                self.closing = True
                break
        while b"\n" in self.inbuf:
            line, _, rest = bytes(self.inbuf).partition(b"\n")
            self.inbuf = bytearray(rest)
            if line.strip():
                self.queue.append(line)
        self._process()
        if self.closing and self.waiting is None and not self.queue:
            self._flush()

    def _process(self) -> None:
        while self.waiting is None and self.queue and not self.closed:
            line = self.queue.popleft()
            self.server.requests += 1
            reply, request_id = self.server.dispatch(line)
            if isinstance(reply, Deferred):
                self.waiting = reply
                reply.add_listener(functools.partial(self._resolved, request_id=request_id))
            else:
                self.send_reply(reply, request_id)

    def _resolved(self, reply: Reply, *, request_id: object) -> None:
        self.waiting = None
        self.send_reply(reply, request_id)
        self._process()
        if self.closing and not self.queue:
            self._flush()

    def send_reply(self, reply: Reply, request_id: object = None) -> None:
        if self.closed:
            return
        if request_id is not None:
            reply = {**reply, "id": request_id}
        try:
            text = json.dumps(reply, separators=(",", ":"), default=str)
        except (TypeError, ValueError) as exc:
            text = json.dumps({"ok": False, "error": f"reply not serialisable: {exc}"})
        self.outbuf += text.encode() + b"\n"
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
        # A peer that has shut down its side stays readable forever: stop reading from it.
        reading = 0 if self.closing else selectors.EVENT_READ
        if self.outbuf:
            self.server.watch(self, reading | selectors.EVENT_WRITE)
        elif self.closing and self.waiting is None and not self.queue:
            self.close()
        else:
            self.server.watch(self, reading)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.server.forget(self)
        with contextlib.suppress(OSError):
            self.sock.close()


class ControlServer:
    """The control socket of an agent, served from the agent's selector loop.

    ``handler(request)`` gets each decoded request (a JSON object with a string ``cmd``) and
    returns a reply dict or a :class:`Deferred`. :class:`BadRequest` raised by the handler
    becomes an error reply naming the field; any other exception becomes an error reply too
    (and is logged), so no request can stop the agent.
    """

    def __init__(self, path: Path, handler: Handler) -> None:
        self.path = Path(path)
        self.handler = handler
        self.selector: selectors.BaseSelector | None = None
        self.sock = bind_unix(self.path)
        self.connections: dict[int, _Connection] = {}
        self.requests = 0
        self.errors = 0
        self._watching: dict[int, int] = {}

    def register(self, selector: selectors.BaseSelector) -> None:
        """Serve from ``selector``: key.data of every registration is a ``callback(mask)``."""
        self.selector = selector
        selector.register(self.sock, selectors.EVENT_READ, self._accept)

    def _accept(self, mask: int) -> None:
        while True:
            try:
                sock, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE):
                    log.warning("control: cannot accept a connection: %s", exc.strerror)
                return
            if len(self.connections) >= MAX_CONNECTIONS:
                with contextlib.suppress(OSError):
                    sock.sendall(b'{"ok":false,"error":"too many control connections"}\n')
                sock.close()
                continue
            sock.setblocking(False)
            conn = _Connection(self, sock)
            self.connections[sock.fileno()] = conn
            self._watching[sock.fileno()] = selectors.EVENT_READ
            if self.selector is not None:
                self.selector.register(sock, selectors.EVENT_READ, conn.on_ready)

    def watch(self, conn: _Connection, events: int) -> None:
        """Select ``events`` on a connection (0: none, until it has something to write)."""
        fd = conn.sock.fileno()
        if self.selector is None or fd < 0:
            return
        before = self._watching.get(fd, 0)
        if before == events:
            return
        self._watching[fd] = events
        if not events:
            self.selector.unregister(conn.sock)
        elif not before:
            self.selector.register(conn.sock, events, conn.on_ready)
        else:
            self.selector.modify(conn.sock, events, conn.on_ready)

    def forget(self, conn: _Connection) -> None:
        fd = conn.sock.fileno()
        self.connections.pop(fd, None)
        if self._watching.pop(fd, 0) and self.selector is not None and fd >= 0:
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(conn.sock)

    def dispatch(self, line: bytes) -> tuple[Reply | Deferred, object]:
        """Decode one request line and hand it to the handler; never raises."""
        try:
            request = json.loads(line)
        except (UnicodeDecodeError, ValueError) as exc:
            self.errors += 1
            return {"ok": False, "error": f"request is not valid JSON ({exc})"}, None
        if not isinstance(request, dict):
            self.errors += 1
            return {
                "ok": False,
                "error": f"request must be a JSON object with a 'cmd' field, got {_describe(request)}",
            }, None
        request_id = request.get("id")
        if not isinstance(request.get("cmd"), str):
            self.errors += 1
            return BadRequest(
                "field 'cmd' is required (a command name string)", "cmd"
            ).reply(), request_id
        try:
            reply = self.handler(request)
        except BadRequest as exc:
            self.errors += 1
            return exc.reply(), request_id
        except Exception as exc:  # a handler bug must not take the agent down
            self.errors += 1
            log.exception("control: command %r failed", request.get("cmd"))
            return {"ok": False, "error": f"{request['cmd']}: internal error: {exc}"}, request_id
        if isinstance(reply, dict) and reply.get("ok") is False:
            self.errors += 1
        return reply, request_id

    def close(self) -> None:
        """Close every connection and the listening socket, and remove the socket file."""
        for conn in list(self.connections.values()):
            conn._flush()
            conn.close()
        if self.selector is not None:
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(self.sock)
        self.sock.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


__all__ = [
    "BadRequest",
    "ControlServer",
    "Deferred",
    "Reply",
    "SocketInUse",
    "bind_unix",
    "get_float",
    "get_int",
    "get_int_list",
    "get_str",
    "reject_unknown",
    "require_int",
    "require_str",
]
