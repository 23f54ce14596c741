"""The socket of the OCP MRC API provider: JSON lines over a Unix stream socket, one session per
process, served from the agent's ``selectors`` loop.

This is the second control socket of an agent (``HOST.ocp.sock`` next to ``HOST.sock``), the
one ``lib_mrc.so`` and the testbed's ``libibverbs.so.1`` talk to (docs/ocp-api.md). It differs
from :mod:`host.agent.control` in what a provider needs and a command interface does not:

- the server knows who is on the other end (``SO_PEERCRED``: the process id whose memory the
  agent reads and writes, and its user id for the controller API's privilege check), and who
  wrote each piece of input (``SO_PASSCRED``): what another process writes on a connection
  (a forked child, a process the descriptor was passed to) is dropped, counted and logged, as
  the session's memory is that of the process that connected (docs/ocp-api.md, "Memory");
- a connection can receive lines it did not ask for (:meth:`OcpConnection.push`: completion
  channel and asynchronous events);
- the provider hears when a connection closes, so a process that exits or crashes leaves no
  QP, CQ or memory registration behind.

The line buffering, in-order answers and non-blocking writes are those of the control socket
(:class:`host.agent.control.LineServer`). Requests are answered in order; a handler may answer
later (a :class:`host.agent.control.Deferred`, e.g. endpoint probes that wait for their
replies), and the connection's next requests wait for it. Errors carry an ``errno``; requests'
ids are not echoed. Nothing blocks the loop.
"""

from __future__ import annotations

import errno
import json
import logging
import socket
import struct
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from host.agent.control import (
    MAX_LINE,
    READ_CHUNK,
    Deferred,
    LineConnection,
    LineServer,
    Reply,
)

log = logging.getLogger("mrc.host.agent.ocp")

MAX_CONNECTIONS = 1024  #: of every process together (descriptors)
#: of one process: its context, its async events and its completion channels
MAX_PER_PROCESS = 64
_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


class OcpConnection(LineConnection):
    """One client connection: who it is, its buffers, and what it belongs to.

    It does not linger: when the process goes away its session ends, and nothing it asked is
    answered any more.
    """

    lingers = False

    def __init__(
        self, server: LineServer[Any], sock: socket.socket,
        credentials: tuple[int, int, int] | None = None,
    ) -> None:  # fmt: skip
        super().__init__(server, sock, credentials)
        self.owner: Any = None  # what the provider attached to this connection
        self.foreign_bytes = 0  # written by another process than the one that connected
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)

    def receive(self) -> bytes:
        """The next bytes the connecting process wrote: the kernel hands each writer's bytes
        over apart, with its credentials, and another process's are dropped (counted in
        :attr:`foreign_bytes`, logged once): it would act on the connecting process's
        session, and the agent would read and write that process's memory for it."""
        while True:
            data, ancillary, _, _ = self.sock.recvmsg(READ_CHUNK, socket.CMSG_SPACE(_UCRED.size))
            writer = self.pid
            for level, kind, value in ancillary:
                if (level, kind) == (socket.SOL_SOCKET, socket.SCM_CREDENTIALS):
                    writer = _UCRED.unpack(value[: _UCRED.size])[0]
            # pid 0: the kernel had no process id to give the agent (the writer is in a pid
            # namespace the agent cannot see into, as in some containers); taken as the
            # connecting process's, or such a program's requests went unanswered and it hung
            if not data or writer in (self.pid, 0):
                return data
            if not self.foreign_bytes:
                log.warning(
                    "ocp: process %d wrote on a connection of process %d: ignored (a forked "
                    "child or another process opens a device of its own)", writer, self.pid,
                )  # fmt: skip
            self.foreign_bytes += len(data)

    def encode(self, message: Mapping[str, Any]) -> bytes:
        """One JSON line (replies and events are plain JSON)."""
        return json.dumps(message, separators=(",", ":")).encode() + b"\n"


Dispatcher = Callable[[OcpConnection, Mapping[str, Any]], "Reply | Deferred"]
Closer = Callable[[OcpConnection], None]


class OcpServer(LineServer[OcpConnection]):
    """The listening socket; ``dispatch(conn, request)`` answers, ``on_close(conn)`` cleans up."""

    name = "ocp"
    logger = log
    max_connections = MAX_CONNECTIONS
    max_per_process = MAX_PER_PROCESS
    too_many = "too many connections"
    too_long = f"request longer than {MAX_LINE} bytes"
    echoes_id = False

    def __init__(self, path: Path, dispatch: Dispatcher, on_close: Closer) -> None:
        super().__init__(path, OcpConnection)
        # asked of the listening socket, credentials come with every byte: Linux passes the
        # flag on to each accepted socket (unix_sock_inherit_flags), and bytes written before
        # the accept carry them too. Asked only once a connection is accepted, a program's
        # first request written in between came without them (pid 0, as from a process that
        # has exited), was dropped as another process's, and the program waited forever
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self._dispatch = dispatch
        self._on_close = on_close

    def handle(self, request: Mapping[str, Any], conn: OcpConnection | None) -> Reply | Deferred:
        assert conn is not None, "an OCP request comes on a connection"
        return self._dispatch(conn, request)

    def error_reply(self, code: int, message: str) -> Reply:
        return {"ok": False, "errno": code, "error": message}

    def malformed(self, request: object) -> Reply:
        return self.error_reply(errno.EINVAL, "request must be an object with a 'cmd'")

    def forget(self, conn: OcpConnection) -> None:
        """A connection closed: stop selecting it and tell the provider."""
        super().forget(conn)
        try:
            self._on_close(conn)
        except Exception:  # noqa: BLE001 -- a clean-up bug must not take the agent down
            log.exception("ocp: clean-up after a connection failed")


__all__ = ["OcpConnection", "OcpServer", "Reply"]
