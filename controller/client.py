"""A P4Runtime client for one switch, on grpcio: arbitration, pipeline, writes, reads.

The controller talks to every switch of a fabric at once, so it holds one :class:`SwitchClient`
per switch (p4runtime-shell keeps one global client), each with its own gRPC channel and
StreamChannel. The stream is opened in a background thread, which sends the
MasterArbitrationUpdate (device id, election id) and keeps the stream open for as long as the
client lives; :meth:`SwitchClient.connect` waits for the arbitration response with a bounded
timeout.

Errors are decoded for people:

- :class:`SwitchUnreachable` names the switch and its address when nothing answers in time;
- :class:`P4RuntimeError` carries one :class:`UpdateError` per failed update of a Write, read
  from the ``google.rpc.Status`` details (one ``p4.v1.Error`` per update): which entry
  (described by name through the P4Info), which canonical code and which message.

Usage::

    c = SwitchClient("127.0.0.1:50001", device_id=1, election_id=1, timeout=5.0, name="t0-p0-r0")
    c.connect()
    c.set_pipeline(info)                  # P4Info (+ BMv2 JSON as device_config for BMv2)
    c.insert([info.table_entry(...)])
    c.read_table_entries("MrcIngress.ipv6_lpm")
    c.close()
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from controller.p4info import P4Info
from p4src.proto import p4r, p4r_grpc
from p4src.proto import rpc_code as code_pb2
from p4src.proto import rpc_status as status_pb2

#: gRPC messages can be large: a read of a full LPM table, a BMv2 JSON.
MAX_MESSAGE_BYTES = 256 * 1024 * 1024
_CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    # a refused batch carries one p4.v1.Error per update in the status details (trailing
    # metadata); gRPC's default 8 KiB limit would turn a large one into RESOURCE_EXHAUSTED
    ("grpc.max_metadata_size", MAX_MESSAGE_BYTES),
    # a restarted switch is found again quickly (gRPC's default backoff starts at 1 s)
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]
_STREAM_END = object()
#: Deadline (s) of Write, Read and SetForwardingPipelineConfig: a bulk write or a read of a full
#: table takes seconds on a software target; connecting uses the client's own timeout.
BULK_DEADLINE = 300.0


def code_name(code: int) -> str:
    """Name of a ``google.rpc.Code`` number (``ALREADY_EXISTS``)."""
    try:
        return str(code_pb2.Code.Name(code))
    except ValueError:
        return f"code {code}"


class SwitchUnreachable(ConnectionError):
    """No P4Runtime server answered at a switch's address in time."""

    def __init__(self, name: str, address: str, reason: str) -> None:
        self.name = name
        self.address = address
        self.reason = reason
        super().__init__(f"switch {name} at {address} is unreachable: {reason}")


@dataclass(frozen=True)
class UpdateError:
    """The failure of one update of a Write request."""

    index: int  # position of the update in the request
    code: int  # google.rpc.Code
    message: str
    entry: str  # the entry the update was about, described by name
    update_type: str  # INSERT, MODIFY or DELETE

    @property
    def code_name(self) -> str:
        """The code's name, e.g. ``ALREADY_EXISTS``."""
        return code_name(self.code)

    def __str__(self) -> str:
        return f"{self.update_type} {self.entry}: {self.code_name}: {self.message}"


class P4RuntimeError(RuntimeError):
    """A P4Runtime RPC failed; ``errors`` lists each failed update of a Write."""

    def __init__(
        self,
        switch: str,
        rpc: str,
        code: str,
        details: str,
        errors: Sequence[UpdateError] = (),
    ) -> None:
        self.switch = switch
        self.rpc = rpc
        self.code = code  # grpc.StatusCode name
        self.details = details
        self.errors = list(errors)
        if self.errors:
            lines = [f"{switch}: {rpc}: {len(self.errors)} update(s) failed"]
            lines += [f"  {e}" for e in self.errors]
            text = "\n".join(lines)
        else:
            text = f"{switch}: {rpc} failed: {code}: {details}"
        super().__init__(text)


def _status_details(error: grpc.RpcError) -> Any:
    """The ``google.rpc.Status`` in an RPC error's trailers, or None."""
    trailers = error.trailing_metadata() if hasattr(error, "trailing_metadata") else None
    for key, value in trailers or ():
        if key == "grpc-status-details-bin":
            status = status_pb2.Status()
            status.ParseFromString(value)
            return status
    return None


class SwitchClient:
    """A P4Runtime session with one switch (one device id), primary by election id."""

    def __init__(
        self,
        address: str,
        device_id: int,
        election_id: int = 1,
        timeout: float = 5.0,
        name: str | None = None,
        p4info: P4Info | None = None,
    ) -> None:
        self.address = address
        self.device_id = device_id
        self.election_id = election_id
        self.timeout = timeout
        self.name = name or address
        self.p4info = p4info  # used to describe entries in errors; set by set_pipeline too
        self._channel: Any = None
        self._stub: Any = None
        self._requests: queue.Queue[Any] = queue.Queue()
        self._arbitration: queue.Queue[Any] = queue.Queue()
        self._stream_call: Any = None
        self._reader: threading.Thread | None = None
        self._stream_error: str | None = None
        self._stream_code = ""
        self._stream_details = ""
        self._closed = False
        self.is_primary = False
        #: called (from the stream's thread) when the switch ends the stream, e.g. on restart
        self.on_stream_end: Callable[[], None] | None = None

    # -- session -----------------------------------------------------------------------------

    def _election(self) -> Any:
        election = p4r.Uint128()
        election.high = self.election_id >> 64
        election.low = self.election_id & ((1 << 64) - 1)
        return election

    def _request_iter(self) -> Iterator[Any]:
        while True:
            item = self._requests.get()
            if item is _STREAM_END:
                return
            yield item

    def _read_stream(self) -> None:
        try:
            for response in self._stream_call:
                if response.WhichOneof("update") == "arbitration":
                    self.is_primary = response.arbitration.status.code == code_pb2.OK
                    self._arbitration.put(response.arbitration)
        except grpc.RpcError as exc:
            if not self._closed:
                self._stream_code = exc.code().name
                self._stream_details = str(exc.details())
                self._stream_error = f"{exc.code().name}: {exc.details()}"
        finally:
            if not self._closed and self._stream_error is None:
                self._stream_error = "stream closed by the switch"
            self._arbitration.put(None)
            if not self._closed and self.on_stream_end is not None:
                self.on_stream_end()

    def connect(self, arbitrate: bool = True) -> SwitchClient:
        """Open the channel and the StreamChannel and win arbitration (or be backup).

        With ``arbitrate`` False no StreamChannel is opened: enough for reads, which need no
        arbitration, and it leaves the primary controller (e.g. ``mrc-ctl watch``) undisturbed.
        Raises :class:`SwitchUnreachable` (naming the switch and its address) when the server
        does not answer within ``timeout`` seconds.
        """
        self._channel = grpc.insecure_channel(self.address, options=_CHANNEL_OPTIONS)
        try:
            grpc.channel_ready_future(self._channel).result(timeout=self.timeout)
        except grpc.FutureTimeoutError:
            self._channel.close()
            raise SwitchUnreachable(
                self.name, self.address, f"no P4Runtime server answered within {self.timeout:g} s"
            ) from None
        self._stub = p4r_grpc.P4RuntimeStub(self._channel)
        if not arbitrate:
            return self
        self._stream_call = self._stub.StreamChannel(self._request_iter())
        self._reader = threading.Thread(
            target=self._read_stream, name=f"p4rt-stream-{self.name}", daemon=True
        )
        self._reader.start()
        request = p4r.StreamMessageRequest()
        request.arbitration.device_id = self.device_id
        request.arbitration.election_id.CopyFrom(self._election())
        self._requests.put(request)
        try:
            reply = self._arbitration.get(timeout=self.timeout)
        except queue.Empty:
            self.close()
            raise SwitchUnreachable(
                self.name,
                self.address,
                f"no arbitration response for device id {self.device_id} within {self.timeout:g} s",
            ) from None
        if reply is None:
            reason = self._stream_error or "stream closed"
            code = self._stream_code
            self.close()
            if code and code not in ("UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED"):
                raise P4RuntimeError(
                    self.name,
                    f"arbitration for device id {self.device_id}",
                    code,
                    self._stream_details,
                )
            raise SwitchUnreachable(
                self.name,
                self.address,
                f"arbitration for device id {self.device_id} refused ({reason})",
            )
        return self

    @property
    def stream_alive(self) -> bool:
        """True while the StreamChannel is open (False after the switch went away)."""
        return self._stream_call is not None and self._stream_error is None and not self._closed

    @property
    def stream_error(self) -> str | None:
        """Why the stream ended, when it did."""
        return self._stream_error

    def close(self) -> None:
        """End the stream and close the channel."""
        if self._closed:
            return
        self._closed = True
        self._requests.put(_STREAM_END)
        if self._stream_call is not None:
            self._stream_call.cancel()
        if self._reader is not None:
            self._reader.join(timeout=1.0)
        if self._channel is not None:
            self._channel.close()

    def __enter__(self) -> SwitchClient:
        return self.connect()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _rpc_error(self, rpc: str, exc: grpc.RpcError) -> Exception:
        code = exc.code()
        if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            return SwitchUnreachable(
                self.name, self.address, f"{rpc}: {code.name}: {exc.details()}"
            )
        return P4RuntimeError(self.name, rpc, code.name, str(exc.details()))

    # -- pipeline ----------------------------------------------------------------------------

    def set_pipeline(self, info: P4Info, device_config: bytes = b"", cookie: int = 0) -> None:
        """Install the forwarding pipeline (VERIFY_AND_COMMIT).

        ``device_config`` is the BMv2 JSON for BMv2 targets and empty for switchmodel.
        """
        request = p4r.SetForwardingPipelineConfigRequest()
        request.device_id = self.device_id
        request.election_id.CopyFrom(self._election())
        request.action = p4r.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT
        request.config.p4info.CopyFrom(info.proto)
        request.config.p4_device_config = device_config
        if cookie:
            request.config.cookie.cookie = cookie
        try:
            self._stub.SetForwardingPipelineConfig(
                request, timeout=max(self.timeout, BULK_DEADLINE)
            )
        except grpc.RpcError as exc:
            raise self._rpc_error("SetForwardingPipelineConfig", exc) from None
        self.p4info = info

    def get_pipeline_config(self) -> Any:
        """The installed ``p4r.ForwardingPipelineConfig`` (P4Info and cookie), or None."""
        request = p4r.GetForwardingPipelineConfigRequest()
        request.device_id = self.device_id
        request.response_type = p4r.GetForwardingPipelineConfigRequest.P4INFO_AND_COOKIE
        try:
            response = self._stub.GetForwardingPipelineConfig(request, timeout=self.timeout)
        except grpc.RpcError as exc:
            if exc.code() in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND):
                return None
            raise self._rpc_error("GetForwardingPipelineConfig", exc) from None
        if not response.HasField("config") or not response.config.p4info.ByteSize():
            return None
        return response.config

    def get_pipeline(self) -> Any:
        """The installed ``p4i.P4Info``, or None when the switch has no pipeline."""
        config = self.get_pipeline_config()
        return None if config is None else config.p4info

    # -- writes ------------------------------------------------------------------------------

    def write(self, updates: Sequence[Any]) -> None:
        """Send one Write request (CONTINUE_ON_ERROR) with these ``p4r.Update`` messages.

        Raises :class:`P4RuntimeError` listing every failed update when any fails.
        """
        if not updates:
            return
        request = self._write_request()
        request.updates.extend(updates)
        self._send_write(request)

    def _write_request(self) -> Any:
        request = p4r.WriteRequest(device_id=self.device_id, election_id=self._election())
        request.atomicity = p4r.WriteRequest.CONTINUE_ON_ERROR
        return request

    def _send_write(self, request: Any) -> None:
        try:
            self._stub.Write(request, timeout=max(self.timeout, BULK_DEADLINE))
        except grpc.RpcError as exc:
            raise self._write_error(request.updates, exc) from None

    def _write_error(self, updates: Sequence[Any], exc: grpc.RpcError) -> Exception:
        status = _status_details(exc)
        if status is None or not status.details:
            return self._rpc_error("Write", exc)
        errors = []
        for index, detail in enumerate(status.details):
            error = p4r.Error()
            if not detail.Unpack(error) or error.canonical_code == code_pb2.OK:
                continue
            update = updates[index] if index < len(updates) else None
            errors.append(
                UpdateError(
                    index=index,
                    code=int(error.canonical_code),
                    message=str(error.message),
                    entry=self._describe_update(update),
                    update_type=p4r.Update.Type.Name(update.type) if update is not None else "?",
                )
            )
        if not errors:
            return self._rpc_error("Write", exc)
        return P4RuntimeError(self.name, "Write", exc.code().name, str(exc.details()), errors)

    def _describe_update(self, update: Any) -> str:
        if update is None:
            return "<no such update>"
        entity = update.entity
        which = entity.WhichOneof("entity")
        if which == "table_entry":
            if self.p4info is not None:
                return self.p4info.describe(entity.table_entry)
            return f"table entry of table id {entity.table_entry.table_id}"
        if which == "action_profile_member" and self.p4info is not None:
            return str(self.p4info.decode_member(entity.action_profile_member))
        if which == "action_profile_group" and self.p4info is not None:
            return str(self.p4info.decode_group(entity.action_profile_group))
        return str(which)

    @staticmethod
    def _set_entity(entity: Any, entry: Any) -> None:
        """Put ``entry`` (``p4r.TableEntry``, ``ActionProfileMember``, ``ActionProfileGroup`` or
        ``Entity``) into the ``p4r.Entity`` ``entity``."""
        if isinstance(entry, p4r.TableEntry):
            entity.table_entry.CopyFrom(entry)
        elif isinstance(entry, p4r.Entity):
            entity.CopyFrom(entry)
        elif isinstance(entry, p4r.ActionProfileMember):
            entity.action_profile_member.CopyFrom(entry)
        elif isinstance(entry, p4r.ActionProfileGroup):
            entity.action_profile_group.CopyFrom(entry)
        else:
            raise TypeError(f"cannot write a {type(entry).__name__} as a P4Runtime entity")

    @classmethod
    def updates(cls, kind: int, entries: Iterable[Any]) -> list[Any]:
        """``p4r.Update`` messages of type ``kind`` (``p4r.Update.INSERT``...), one per
        ``p4r.TableEntry`` (``p4r.ActionProfileMember``, ``p4r.ActionProfileGroup``,
        ``p4r.Entity``) message."""
        updates = []
        for entry in entries:
            update = p4r.Update(type=kind)
            cls._set_entity(update.entity, entry)
            updates.append(update)
        return updates

    def write_entries(self, kind: int, entries: Iterable[Any]) -> None:
        """Send one Write request of updates of type ``kind`` (``p4r.Update.INSERT``...), one
        per ``p4r.TableEntry`` (``p4r.ActionProfileMember``, ``p4r.ActionProfileGroup``,
        ``p4r.Entity``) message; like :meth:`write`."""
        request = self._write_request()
        for entry in entries:
            self._set_entity(request.updates.add(type=kind).entity, entry)
        if request.updates:
            self._send_write(request)

    def insert(self, entries: Iterable[Any]) -> None:
        """INSERT these ``p4r.TableEntry`` messages in one Write (``p4r.ActionProfileMember``,
        ``p4r.ActionProfileGroup`` and ``p4r.Entity`` messages too)."""
        self.write_entries(p4r.Update.INSERT, entries)

    def modify(self, entries: Iterable[Any]) -> None:
        """MODIFY these ``p4r.TableEntry`` messages (default entries too; and the other kinds
        :meth:`insert` takes) in one Write."""
        self.write_entries(p4r.Update.MODIFY, entries)

    def delete(self, entries: Iterable[Any]) -> None:
        """DELETE these ``p4r.TableEntry`` messages (and the other kinds :meth:`insert` takes)
        in one Write."""
        self.write_entries(p4r.Update.DELETE, entries)

    # -- reads -------------------------------------------------------------------------------

    def read(self, entities: Sequence[Any]) -> list[Any]:
        """Read ``p4r.Entity`` patterns; returns every entity of every response."""
        request = p4r.ReadRequest()
        request.device_id = self.device_id
        request.entities.extend(entities)
        found: list[Any] = []
        try:
            for response in self._stub.Read(request, timeout=max(self.timeout, BULK_DEADLINE)):
                found.extend(response.entities)
        except grpc.RpcError as exc:
            raise self._rpc_error("Read", exc) from None
        return found

    def _info(self) -> P4Info:
        if self.p4info is None:
            raise ValueError(f"{self.name}: reading by name needs a P4Info (pass p4info=...)")
        return self.p4info

    def read_table_entries(self, table_name: str | None = None) -> list[Any]:
        """Installed ``p4r.TableEntry`` messages of one table (all tables when None)."""
        entity = p4r.Entity()
        entity.table_entry.table_id = self._info().table_id(table_name) if table_name else 0
        return [e.table_entry for e in self.read([entity])]

    def read_default_entry(self, table_name: str) -> Any:
        """The default entry of ``table_name`` (``p4r.TableEntry``), or None if not returned."""
        entity = p4r.Entity()
        entity.table_entry.table_id = self._info().table_id(table_name)
        entity.table_entry.is_default_action = True
        found = [e.table_entry for e in self.read([entity])]
        return found[0] if found else None

    def read_profile(self, profile: str) -> tuple[list[Any], list[Any]]:
        """The members (``p4r.ActionProfileMember``) and groups (``p4r.ActionProfileGroup``)
        of action profile ``profile``."""
        profile_id = self._info().action_profile_id(profile)
        members = p4r.Entity()
        members.action_profile_member.action_profile_id = profile_id
        groups = p4r.Entity()
        groups.action_profile_group.action_profile_id = profile_id
        found = self.read([members, groups])
        return (
            [e.action_profile_member for e in found if e.HasField("action_profile_member")],
            [e.action_profile_group for e in found if e.HasField("action_profile_group")],
        )

    def read_counter(self, name: str) -> dict[int, tuple[int, int]]:
        """Every cell of counter ``name``: index -> (packets, bytes)."""
        entity = p4r.Entity()
        entity.counter_entry.counter_id = self._info().counter_id(name)
        cells: dict[int, tuple[int, int]] = {}
        for found in self.read([entity]):
            entry = found.counter_entry
            cells[int(entry.index.index)] = (
                int(entry.data.packet_count),
                int(entry.data.byte_count),
            )
        return cells

    def write_register(self, name: str, index: int, value: int) -> None:
        """Set one cell of register ``name`` (a MODIFY of its RegisterEntry)."""
        update = p4r.Update()
        update.type = p4r.Update.MODIFY
        entry = update.entity.register_entry
        entry.register_id = self._info().register_id(name)
        entry.index.index = index
        width = self._info().register(name).type_spec.bitstring.bit.bitwidth
        entry.data.bitstring = value.to_bytes(max(1, (width + 7) // 8), "big")
        self.write([update])

    def read_register(self, name: str) -> dict[int, int]:
        """Every cell of register ``name``: index -> value."""
        entity = p4r.Entity()
        entity.register_entry.register_id = self._info().register_id(name)
        cells: dict[int, int] = {}
        for found in self.read([entity]):
            entry = found.register_entry
            cells[int(entry.index.index)] = int.from_bytes(entry.data.bitstring, "big")
        return cells
