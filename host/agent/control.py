"""The agent's local control interface: JSON lines over a Unix stream socket.

A client (the experiment runner, ``mrc-host transfer``, tests) sends one JSON object per line,
``{"cmd": "stats"}``, optionally with an ``"id"`` that is echoed back; the agent answers one JSON
object per line, ``{"ok": true, ...}`` or ``{"ok": false, "error": "...", "field": "..."}``. The
commands and their fields are listed in docs/host-agent.md; this module is only the transport:

- :class:`LineServer` and :class:`LineConnection` -- a listening socket of JSON lines and its
  connections, driven by the agent's ``selectors`` loop (non-blocking reads and writes, no
  thread), requests answered in order; the OCP provider's socket (:mod:`host.agent.ocp.server`)
  is one too;
- :class:`ControlServer` -- the control socket: a :class:`LineServer` whose handler takes the
  request alone;
- :class:`Deferred` -- a reply a handler gives later (``wait`` answers when transfers finish),
  :func:`deferred_until` and :func:`ep_batch_reply` (an endpoint batch's responses, for both
  sockets);
- :class:`BadRequest` and the ``get_*`` helpers -- field validation whose errors name the field.

Requests on one connection are answered in order: while a reply is deferred, the connection's
later requests wait for it.

What one client can take of the agent is bounded (docs/ocp-api.md, "Limits and isolation"): a
line is at most :data:`MAX_LINE` bytes (a longer one is answered ``E2BIG`` and skipped, and the
connection goes on); splitting input into lines costs time linear in the input; a client that
does not read its replies stops being read once :data:`OUTPUT_HIGH` bytes wait for it (the
kernel's socket buffer then holds its requests back) and is dropped, with a log line, when what
waits for it passes :data:`MAX_OUTPUT` (lines it did not ask for, such as events); and each
process may hold :attr:`LineServer.max_per_process` connections of a socket, whatever others
hold.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import functools
import json
import logging
import os
import selectors
import socket
import stat
import struct
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

if TYPE_CHECKING:
    from host.transport.api import Context
    from host.transport.endpoint import EpRequest
    from host.transport.events import EndpointResponse

log = logging.getLogger("mrc.host.agent.control")

MAX_LINE = 1 << 20  # bytes in one request line
MAX_CONNECTIONS = 1024  # of a socket, all processes together: a backstop for descriptors
MAX_PER_PROCESS = 16  # connections of one process to the control socket
OUTPUT_HIGH = 1 << 20  # bytes waiting for a client above which its requests wait
MAX_OUTPUT = 32 << 20  # bytes waiting for a client above which it is dropped
MAX_QUEUED = 256  # requests of a connection waiting behind a deferred reply
READ_CHUNK = 65536
_PEERCRED = struct.Struct("3i")
_TOO_LONG = None  # in a connection's queue: a request line longer than MAX_LINE

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


class CoreDriver(Protocol):
    """What a socket's commands use of the agent to run a host operation on its transport."""

    @property
    def context(self) -> Context: ...
    def now(self) -> float: ...
    def after_core(self, now: float) -> None: ...
    def add_waiter(self, check: Callable[[float], bool], deadline: float | None) -> None: ...


def deferred_until(
    agent: CoreDriver, answer: Callable[[float], Reply | None], deadline: float | None
) -> Deferred:
    """A reply that is ``answer(now)`` the first time that is not None, asked as the agent runs
    (and at ``deadline``)."""
    reply = Deferred()

    def check(now: float) -> bool:
        if not reply.done:
            out = answer(now)
            if out is None:
                return False
            reply.resolve(out)
        return True

    agent.add_waiter(check, deadline)
    return reply


def ep_batch_reply(
    agent: CoreDriver, op: str, requests: Sequence[EpRequest], *, dscp: int, timeout: float,
    render: Callable[[list[EndpointResponse], bool], Reply],
) -> Deferred:  # fmt: skip
    """Send a batch of endpoint requests (``Context.ep_batch_send``: EndpointError if the
    context refuses one) and reply with ``render(responses, complete)`` when every request is
    answered or ``timeout`` (protocol seconds) passes."""
    now = agent.now()
    batch = agent.context.ep_batch_send(op, requests, dscp=dscp, timeout=timeout, now=now)
    agent.after_core(now)

    def answer(at: float) -> Reply | None:
        if not batch.complete() and at < batch.deadline_driver:
            return None
        responses = agent.context.ep_batch_end(batch)
        return render(responses, len(responses) >= len(batch.requests))

    return deferred_until(agent, answer, batch.deadline_driver)


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


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """The process id, user id and group id of a Unix socket's peer (``SO_PEERCRED``)."""
    pid, uid, gid = _PEERCRED.unpack(
        sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
    )
    return pid, uid, gid


class LineConnection:
    """One client connection of a :class:`LineServer`: who is on the other end (``pid``,
    ``uid``, ``gid``), input line buffer, requests queued in order, output buffer.

    A connection that ``lingers`` (the control socket's) still answers every queued request
    after the client's end of input, a deferred one too, and closes once the answers are
    written; a failed read closes it at once. One that does not (the OCP socket's) answers
    what it can at once after the end of input or a failed read, writes what the socket takes
    and closes.

    Reading pauses while :data:`OUTPUT_HIGH` bytes wait to be written or a deferred reply
    holds :data:`MAX_QUEUED` requests back, and resumes when the client catches up.
    """

    lingers = True

    def __init__(
        self, server: LineServer[Any], sock: socket.socket,
        credentials: tuple[int, int, int] | None = None,
    ) -> None:  # fmt: skip
        self.server = server
        self.sock = sock
        self.pid, self.uid, self.gid = credentials or peer_credentials(sock)
        self.inbuf = bytearray()  # the start of a line whose end has not come yet
        self.discarding = False  # skipping the rest of a line longer than MAX_LINE
        self.outbuf = bytearray()
        self.queue: deque[bytes | None] = deque()
        self.waiting: Deferred | None = None
        self.closing = False  # close once the output is flushed
        self.closed = False

    def on_ready(self, mask: int) -> None:
        if mask & selectors.EVENT_READ:
            self._read()
        if mask & selectors.EVENT_WRITE and not self.closed:
            self._flush()
            if self.queue and not self.closed:
                self._process()
                self._flush()

    @property
    def paused(self) -> bool:
        """True while the connection takes no more input: its client does not read its
        replies, or a deferred reply holds many requests back."""
        return len(self.outbuf) >= OUTPUT_HIGH or len(self.queue) >= MAX_QUEUED

    def _read(self) -> None:
        ended = False  # the client's end of input
        while not self.closed and not self.paused:
            try:
                chunk = self.receive()
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                if self.lingers:
                    self.close()
                    return
                ended = True
                break
            if not chunk:
                ended = True
                break
            self.take(chunk)
            self._process()
        if self.closed:
            return
        if ended and self.lingers:
            self.closing = True
        if ended and not self.lingers:
            self._flush()
            self.close()
        else:
            self._flush()

    def receive(self) -> bytes:
        """The next bytes of the client (``b""`` at its end of input); raises as ``recv``."""
        return self.sock.recv(READ_CHUNK)

    def take(self, chunk: bytes) -> None:
        """Split input into request lines, each byte looked at once (a line longer than
        :data:`MAX_LINE` is queued as a refusal and its bytes are skipped)."""
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            if end < 0:
                break
            if self.discarding:
                self.discarding = False
            elif self.inbuf:
                self.inbuf += memoryview(chunk)[start:end]
                self._line(bytes(self.inbuf))
                self.inbuf.clear()
            else:
                self._line(chunk[start:end])
            start = end + 1
        if self.discarding or start == len(chunk):
            return
        self.inbuf += memoryview(chunk)[start:]
        if len(self.inbuf) > MAX_LINE:
            self.inbuf.clear()
            self.discarding = True
            self.queue.append(_TOO_LONG)

    def _line(self, line: bytes) -> None:
        if len(line) > MAX_LINE:
            self.queue.append(_TOO_LONG)
        elif line.strip():
            self.queue.append(line)

    def _process(self) -> None:
        while (
            self.waiting is None and self.queue and not self.closed
            and len(self.outbuf) < OUTPUT_HIGH
        ):  # fmt: skip
            line = self.queue.popleft()
            self.server.requests += 1
            if line is _TOO_LONG:
                self.server.errors += 1
                self.push(self.server.error_reply(errno.E2BIG, self.server.too_long))
                continue
            reply, request_id = self.server.dispatch(line, self)
            if isinstance(reply, Deferred):
                self.waiting = reply
                reply.add_listener(functools.partial(self._resolved, request_id=request_id))
            else:
                self.push(reply, request_id)

    def _resolved(self, reply: Reply, *, request_id: object) -> None:
        if self.closed:
            return
        self.waiting = None
        self.push(reply, request_id)
        self._process()
        self._flush()

    def push(self, message: Mapping[str, Any], request_id: object = None) -> None:
        """Send one JSON line: a reply (``request_id``, when not None, echoed as ``id``) or a
        line the client did not ask for. A client with more than :data:`MAX_OUTPUT` bytes
        waiting is dropped."""
        if self.closed:
            return
        if request_id is not None:
            message = {**message, "id": request_id}
        self.outbuf += self.encode(message)
        if len(self.outbuf) > MAX_OUTPUT:
            self.server.logger.warning(
                "%s: dropping the connection of process %d: %d bytes wait for it and it does "
                "not read them (at most %d)", self.server.name, self.pid, len(self.outbuf),
                MAX_OUTPUT,
            )  # fmt: skip
            self.server.dropped += 1
            self.close()
            return
        self._flush()

    def encode(self, message: Mapping[str, Any]) -> bytes:
        """One JSON line; a reply that cannot be serialised becomes an error reply."""
        try:
            text = json.dumps(message, separators=(",", ":"), default=str)
        except (TypeError, ValueError) as exc:
            text = json.dumps({"ok": False, "error": f"reply not serialisable: {exc}"})
        return text.encode() + b"\n"

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
        reading = 0 if self.closing or self.paused else selectors.EVENT_READ
        if self.outbuf:
            self.server.watch(self, reading | selectors.EVENT_WRITE)
        elif self.closing and self.waiting is None and not self.queue:
            self.close()
        else:
            self.server.watch(self, reading)

    def close(self) -> None:
        """Close the connection (the server forgets it)."""
        if self.closed:
            return
        self.closed = True
        self.server.forget(self)
        with contextlib.suppress(OSError):
            self.sock.close()


ConnT = TypeVar("ConnT", bound=LineConnection)


class LineServer(Generic[ConnT]):
    """A listening Unix socket of JSON lines and its connections, served from the agent's
    selector loop; a subclass answers the requests (:meth:`handle`) and words its errors.

    :meth:`dispatch` never raises: a line that is not a JSON object with a string ``cmd`` and
    a handler that raises get error replies (the exception is logged), so no request can stop
    the agent.
    """

    name = "control"  #: in log lines
    logger = log
    max_connections = MAX_CONNECTIONS  #: of every process together (descriptors)
    max_per_process = MAX_PER_PROCESS  #: of one process
    too_many = "too many control connections"  #: the refusal beyond a connection cap
    too_long = f"request line longer than {MAX_LINE} bytes"
    echoes_id = True  #: a request's ``id`` comes back in its reply

    def __init__(self, path: Path, connection: type[ConnT]) -> None:
        self.path = Path(path)
        self.selector: selectors.BaseSelector | None = None
        self.sock = bind_unix(self.path)
        self.connections: dict[int, ConnT] = {}
        self.requests = 0
        self.errors = 0
        self.refused = 0  # connections refused by a connection cap
        self.dropped = 0  # connections dropped because their client did not read
        self._connection = connection
        self._per_process: collections.Counter[int] = collections.Counter()
        self._watching: dict[int, int] = {}

    # -- what a subclass gives ------------------------------------------------------------------

    def handle(self, request: Mapping[str, Any], conn: ConnT | None) -> Reply | Deferred:
        """The reply to a request (a JSON object with a string ``cmd``) of ``conn``."""
        raise NotImplementedError

    def error_reply(self, code: int, message: str) -> Reply:
        """An error reply of the server itself (``code``: the errno value, for replies that
        carry one)."""
        return {"ok": False, "error": message}

    def malformed(self, request: object) -> Reply:
        """The error reply to a JSON value that is not an object with a string ``cmd``."""
        if isinstance(request, dict):
            return BadRequest("field 'cmd' is required (a command name string)", "cmd").reply()
        return self.error_reply(
            errno.EINVAL,
            f"request must be a JSON object with a 'cmd' field, got {_describe(request)}",
        )

    # -- the socket -----------------------------------------------------------------------------

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
                    self.logger.warning(
                        "%s: cannot accept a connection: %s", self.name, exc.strerror
                    )
                return
            try:
                credentials = peer_credentials(sock)
            except OSError:
                sock.close()
                continue
            refusal = self._refusal(credentials[0])
            if refusal is not None:
                self.refused += 1
                self.logger.warning("%s: refused a connection: %s", self.name, refusal)
                reply = self.error_reply(errno.EMFILE, refusal)
                with contextlib.suppress(OSError):
                    sock.setblocking(False)
                    sock.send(json.dumps(reply, separators=(",", ":")).encode() + b"\n")
                sock.close()
                continue
            sock.setblocking(False)
            conn = self._connection(self, sock, credentials)
            self.connections[sock.fileno()] = conn
            self._per_process[conn.pid] += 1
            self.watch(conn, selectors.EVENT_READ)

    def _refusal(self, pid: int) -> str | None:
        """Why a new connection of process ``pid`` is refused (None: it is not)."""
        if self._per_process[pid] >= self.max_per_process:
            return (
                f"{self.too_many}: process {pid} has {self._per_process[pid]} "
                f"(at most {self.max_per_process} per process)"
            )
        if len(self.connections) >= self.max_connections:
            return f"{self.too_many}: {len(self.connections)} (at most {self.max_connections})"
        return None

    def watch(self, conn: LineConnection, events: int) -> None:
        """Select ``events`` on a connection (0: none, until it has something to write)."""
        fd = conn.sock.fileno()
        if self.selector is None or fd < 0 or conn.closed:
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

    def forget(self, conn: ConnT) -> None:
        """A connection closed: stop selecting it."""
        fd = conn.sock.fileno()
        if self.connections.pop(fd, None) is not None:
            self._per_process[conn.pid] -= 1
            if self._per_process[conn.pid] <= 0:
                del self._per_process[conn.pid]
        if self._watching.pop(fd, 0) and self.selector is not None and fd >= 0:
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(conn.sock)

    def dispatch(self, line: bytes, conn: ConnT | None = None) -> tuple[Reply | Deferred, object]:
        """Decode one request line of ``conn`` and answer it, with the id to echo; never
        raises."""
        reply, request_id = self._answer(line, conn)
        if isinstance(reply, dict) and reply.get("ok") is False:
            self.errors += 1
        return reply, request_id

    def _answer(self, line: bytes, conn: ConnT | None) -> tuple[Reply | Deferred, object]:
        try:
            request = json.loads(line)
        except (UnicodeDecodeError, ValueError) as exc:
            return self.error_reply(errno.EINVAL, f"request is not valid JSON ({exc})"), None
        request_id = request.get("id") if self.echoes_id and isinstance(request, dict) else None
        if not isinstance(request, dict) or not isinstance(request.get("cmd"), str):
            return self.malformed(request), request_id
        try:
            return self.handle(request, conn), request_id
        except Exception as exc:  # a handler bug must not take the agent down
            self.logger.exception("%s: command %r failed", self.name, request["cmd"])
            error = self.error_reply(errno.EIO, f"{request['cmd']}: internal error: {exc}")
            return error, request_id

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


class ControlServer(LineServer[LineConnection]):
    """The control socket of an agent, served from the agent's selector loop.

    ``handler(request)`` gets each decoded request (a JSON object with a string ``cmd``) and
    returns a reply dict or a :class:`Deferred`. :class:`BadRequest` raised by the handler
    becomes an error reply naming the field; any other exception becomes an error reply too
    (and is logged), so no request can stop the agent.
    """

    def __init__(self, path: Path, handler: Handler) -> None:
        super().__init__(path, LineConnection)
        self.handler = handler

    def handle(self, request: Mapping[str, Any], conn: LineConnection | None) -> Reply | Deferred:
        try:
            return self.handler(request)
        except BadRequest as exc:
            return exc.reply()


__all__ = [
    "BadRequest",
    "ControlServer",
    "Deferred",
    "LineConnection",
    "LineServer",
    "Reply",
    "SocketInUse",
    "bind_unix",
    "get_float",
    "get_int",
    "get_int_list",
    "get_str",
    "peer_credentials",
    "reject_unknown",
    "require_int",
    "require_str",
]
