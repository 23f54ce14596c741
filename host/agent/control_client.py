"""Client of an agent's control socket (JSON lines over a Unix socket).

Used by the experiment runner, the tests and ``mrc-host transfer|stats|...``::

    from host.agent.control_client import ControlClient
    with ControlClient("/run/mrc-testbed/h1.sock") as h1, ControlClient(".../h0.sock") as h0:
        region = h1.register("rx", 1 << 20)                  # {"addr": ..., "rkey": ..., ...}
        t = h0.transfer("h1", region["addr"], region["rkey"], 1 << 20, seed=7)
        h0.wait([t["transfer"]], timeout=30)
        assert h1.verify("rx", size=1 << 20, seed=7)["match"]

Every method returns the reply dict (``"ok": true`` and the command's fields). A reply with
``"ok": false`` raises :class:`ControlError` carrying the agent's message and the field it named;
an agent that cannot be reached raises :class:`ControlUnavailable` naming the socket path.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from types import TracebackType
from typing import Any

DEFAULT_TIMEOUT = 10.0


class ControlError(RuntimeError):
    """The agent answered ``{"ok": false}``: ``field`` names the bad field when it said one."""

    def __init__(self, message: str, field: str | None = None, reply: dict[str, Any] | None = None):
        super().__init__(message)
        self.field = field
        self.reply = reply or {}


class ControlUnavailable(ControlError):
    """No agent answers on the control socket."""


class ControlClient:
    """A connection to one agent's control socket (reconnects lazily; one request at a time)."""

    def __init__(self, path: str | Path, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.path = Path(path)
        self.timeout = timeout
        self._sock: socket.socket | None = None
        self._buffer = bytearray()
        self._next_id = 1

    # -- connection --------------------------------------------------------------------------

    def connect(self) -> None:
        """Connect now (requests connect on their own when needed)."""
        if self._sock is not None:
            return
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(str(self.path))
        except OSError as exc:
            sock.close()
            raise self._unavailable(exc, "cannot reach the agent") from None
        self._sock = sock
        self._buffer.clear()

    def _unavailable(self, exc: OSError, doing: str, answer: bool = False) -> ControlUnavailable:
        """The error of a connection that failed with ``exc`` while ``doing`` something
        (``answer``: waiting for the agent's answer)."""
        if isinstance(exc, FileNotFoundError):
            return ControlUnavailable(f"no agent control socket at {self.path}")
        if isinstance(exc, TimeoutError) and answer:
            return ControlUnavailable(f"the agent at {self.path} did not answer in time")
        return ControlUnavailable(f"{doing} at {self.path}: {exc.strerror or exc}")

    def close(self) -> None:
        """Close the connection."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> ControlClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- requests ----------------------------------------------------------------------------

    def request(self, cmd: str, **fields: Any) -> dict[str, Any]:
        """Send ``{"cmd": cmd, **fields}`` (None fields left out) and return the reply.

        Raises :class:`ControlError` when the agent answers ``ok: false``.
        """
        message = {"cmd": cmd, **{k: v for k, v in fields.items() if v is not None}}
        return self._request_timed(message, self.timeout)

    def send_raw(self, data: bytes, *, timeout: float | None = None) -> dict[str, Any]:
        """Send raw bytes (one line) and return the decoded reply without checking ``ok``."""
        self.connect()
        assert self._sock is not None
        self._sock.settimeout(self.timeout if timeout is None else timeout)
        try:
            self._sock.sendall(data)
            line = self._read_line()
        except OSError as exc:
            self.close()
            raise self._unavailable(exc, "lost the agent", answer=True) from None
        try:
            reply = json.loads(line)
        except ValueError:
            raise ControlError(f"the agent at {self.path} sent a line that is not JSON") from None
        if not isinstance(reply, dict):
            raise ControlError(f"the agent at {self.path} sent a reply that is not an object")
        return reply

    def _read_line(self) -> bytes:
        assert self._sock is not None
        end = self._buffer.find(b"\n")
        while end < 0:  # each byte looked at once, however long the reply
            chunk = self._sock.recv(65536)
            if not chunk:
                self.close()
                raise ControlUnavailable(f"the agent at {self.path} closed the connection")
            start = len(self._buffer)
            self._buffer += chunk
            end = self._buffer.find(b"\n", start)
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 1]
        return line

    # -- commands ----------------------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        """Host name, NICs, topology and process id of the agent."""
        return self.request("info")

    def register(self, name: str, size: int) -> dict[str, Any]:
        """Register a memory region; the reply carries its ``addr`` and ``rkey``."""
        return self.request("register", name=name, size=size)

    def transfer(
        self,
        peer: str,
        addr: int,
        rkey: int,
        size: int | None = None,
        *,
        policy: str | None = None,
        message_size: int | None = None,
        imm: int | None = None,
        seed: int | None = None,
        file: str | Path | None = None,
        offset: int | None = None,
    ) -> dict[str, Any]:
        """Start writing ``size`` bytes (pattern ``seed``, or ``file``) to a peer's region."""
        return self.request(
            "transfer",
            peer=peer,
            addr=addr,
            rkey=rkey,
            size=size,
            policy=policy,
            message_size=message_size,
            imm=imm,
            seed=seed,
            file=str(file) if file is not None else None,
            offset=offset,
        )

    def wait(self, transfers: list[int], timeout: float = 60.0) -> dict[str, Any]:
        """Wait until the transfers complete (``complete`` is false in the reply on timeout)."""
        return self._request_timed(
            {"cmd": "wait", "transfers": list(transfers), "timeout": timeout},
            timeout + max(self.timeout, 5.0),
        )

    def _request_timed(self, message: dict[str, Any], socket_timeout: float) -> dict[str, Any]:
        reply = self.send_raw((json.dumps(message) + "\n").encode(), timeout=socket_timeout)
        if not reply.get("ok"):
            raise ControlError(str(reply.get("error", "request failed")), reply.get("field"), reply)
        return reply

    def stats(self, counters: bool = False) -> dict[str, Any]:
        """The agent's statistics (``reply["stats"]``); ``counters``: the core's integer
        counters only (``reply["stats"]["core"]``)."""
        if counters:
            return self.request("stats", counters=True)
        return self.request("stats")

    def paths(self, peer: str | None = None, policy: str | None = None) -> dict[str, Any]:
        """The EV -> path -> state table of one policy's QPs (``reply["paths"]``)."""
        return self.request("paths", peer=peer, policy=policy)

    def set_ev(
        self,
        peer: str,
        state: str,
        *,
        ev: int | None = None,
        path: str | None = None,
        policy: str | None = None,
    ) -> dict[str, Any]:
        """Set EVs towards ``peer`` (one EV, or every EV of a path label) DENIED or GOOD."""
        return self.request("set-ev", peer=peer, state=state, ev=ev, path=path, policy=policy)

    def verify(
        self,
        region: str,
        *,
        size: int | None = None,
        offset: int | None = None,
        seed: int | None = None,
        sha256: str | None = None,
    ) -> dict[str, Any]:
        """Check a region's bytes against pattern ``seed`` or a SHA-256 (``reply["match"]``)."""
        return self.request(
            "verify", region=region, size=size, offset=offset, seed=seed, sha256=sha256
        )

    def ev_format(self, fmt: str | None = None, fields: list[int] | None = None) -> dict[str, Any]:
        """The agents' EV format; with ``fmt``, set it (srv6, stev, udp) first."""
        if fmt is None:
            return self.request("ev-format")
        return self.request("ev-format", format=fmt, fields=list(fields or []))

    def ev_events(self, since: int = 0) -> dict[str, Any]:
        """EV state changes after sequence number ``since``."""
        return self.request("ev-events", since=since)

    def received(self, since: int = 0, timeout: float = 0.0) -> dict[str, Any]:
        """WRITE_IMMs received after sequence number ``since`` (``reply["received"]``),
        waiting up to ``timeout`` seconds for one when there is none yet."""
        return self._request_timed(
            {"cmd": "received", "since": since, "timeout": timeout},
            timeout + max(self.timeout, 5.0),
        )

    def quit(self) -> dict[str, Any]:
        """Ask the agent to exit."""
        return self.request("quit")


__all__ = ["ControlClient", "ControlError", "ControlUnavailable", "DEFAULT_TIMEOUT"]
