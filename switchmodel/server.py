"""The ``p4.v1.P4Runtime`` gRPC service of one switch: arbitration, config, writes, reads.

:class:`P4RuntimeServicer` adapts :class:`~switchmodel.runtime.SwitchRuntime` to gRPC and adds
what only the RPC layer knows about:

- device id: every request must name this switch's device id (NOT_FOUND otherwise);
- client arbitration on StreamChannel, per role: the stream with the highest election id is the
  primary; every participant is told (MasterArbitrationUpdate) when the primary changes, with
  status OK for the primary, ALREADY_EXISTS for a backup while a primary exists, NOT_FOUND when
  there is none; a second stream with an election id already in use is refused
  (INVALID_ARGUMENT); a stream whose later messages name another device or role is closed
  (FAILED_PRECONDITION);
- Write and SetForwardingPipelineConfig only from the primary (PERMISSION_DENIED otherwise);
- Write errors as the spec asks: RPC status UNKNOWN whose ``grpc-status-details-bin`` carries a
  ``google.rpc.Status`` with one ``p4.v1.Error`` per update, in order (OK for those applied).

Write and Read take their requests as bytes (:func:`add_to_server` registers them so) and parse
them with the protobuf classes: bytes that are not a protobuf message are refused with
INVALID_ARGUMENT (gRPC itself would answer INTERNAL).

:func:`serve` starts a gRPC server for a servicer on an address (``host:port``).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf import any_pb2

from p4src.proto import p4r, p4r_grpc
from p4src.proto import rpc_code as code_pb2
from p4src.proto import rpc_status as status_pb2
from switchmodel.runtime import RuntimeStatus, SwitchRuntime, Target

log = logging.getLogger("switchmodel.server")

API_VERSION = "1.4.1"
_STATUS_BY_CODE = {status.value[0]: status for status in grpc.StatusCode}


def grpc_status(code: int) -> grpc.StatusCode:
    """The grpc.StatusCode of a google.rpc.Code number."""
    return _STATUS_BY_CODE.get(code, grpc.StatusCode.UNKNOWN)


def election_value(election_id: p4r.Uint128) -> int:
    """A Uint128 as an int."""
    return int(election_id.high) << 64 | int(election_id.low)


class _Close:
    """Sentinel put on a stream's queue to end it with a status."""

    def __init__(self, code: grpc.StatusCode | None = None, message: str = "") -> None:
        self.code = code
        self.message = message


@dataclass(eq=False)
class _Session:
    """One StreamChannel."""

    outbox: queue.Queue[p4r.StreamMessageResponse | _Close] = field(default_factory=queue.Queue)
    arbitrated: bool = False
    role: str = ""
    election: int | None = None  # None: no election id (never primary)
    peer: str = ""


class P4RuntimeServicer(p4r_grpc.P4RuntimeServicer):
    """P4Runtime for one device running the mrc_switch program."""

    def __init__(self, target: Target, device_id: int) -> None:
        self.device_id = device_id
        self.runtime = SwitchRuntime(target)
        self._lock = threading.Lock()
        self._sessions: list[_Session] = []
        self._highest: dict[str, int] = {}  # highest election id seen per role

    # -- helpers -----------------------------------------------------------------------------

    def _check_device(self, device_id: int, context: grpc.ServicerContext) -> None:
        if device_id != self.device_id:
            context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"device id {device_id} is not this switch (device id {self.device_id})",
            )

    def _primary(self, role: str) -> _Session | None:
        best: _Session | None = None
        for session in self._sessions:
            if (
                session.arbitrated
                and session.role == role
                and session.election is not None
                and (best is None or session.election > (best.election or 0))
            ):
                best = session
        return best

    def _check_primary(self, role: str, wanted: int, context: grpc.ServicerContext) -> None:
        """PERMISSION_DENIED unless election id ``wanted`` is the primary's for ``role``."""
        with self._lock:
            primary = self._primary(role)
            if primary is None or primary.election != wanted:
                holder = (
                    "no primary" if primary is None else f"primary election id {primary.election}"
                )
                context.abort(
                    grpc.StatusCode.PERMISSION_DENIED,
                    f"election id {wanted} is not the primary's for role '{role}' ({holder})",
                )

    def _arbitration_update(
        self, session: _Session, primary: _Session | None
    ) -> p4r.StreamMessageResponse:
        response = p4r.StreamMessageResponse()
        update = response.arbitration
        update.device_id = self.device_id
        if session.role:
            update.role.name = session.role
        best = primary.election if primary is not None else self._highest.get(session.role)
        if best is not None:
            update.election_id.high = best >> 64
            update.election_id.low = best & ((1 << 64) - 1)
        if primary is None:
            update.status.code = code_pb2.NOT_FOUND
            update.status.message = "no primary controller"
        elif primary is session:
            update.status.code = code_pb2.OK
            update.status.message = "primary"
        else:
            update.status.code = code_pb2.ALREADY_EXISTS
            update.status.message = "backup: a primary controller exists"
        return response

    # -- StreamChannel -----------------------------------------------------------------------

    def StreamChannel(  # noqa: N802 - gRPC method name
        self, request_iterator: Iterator[p4r.StreamMessageRequest], context: grpc.ServicerContext
    ) -> Iterator[p4r.StreamMessageResponse]:
        """Arbitration (packet I/O and digests are not part of the program)."""
        session = _Session(peer=context.peer())
        with self._lock:
            self._sessions.append(session)

        def read_requests() -> None:
            try:
                for request in request_iterator:
                    self._on_stream_message(session, request)
            except grpc.RpcError:
                pass
            except Exception:  # pragma: no cover - never leave a stream hanging
                log.exception("stream from %s failed", session.peer)
            session.outbox.put(_Close())

        context.add_callback(lambda: session.outbox.put(_Close()))
        reader = threading.Thread(target=read_requests, name="p4rt-stream", daemon=True)
        reader.start()
        try:
            while True:
                item = session.outbox.get()
                if isinstance(item, _Close):
                    if item.code is not None:
                        context.abort(item.code, item.message)
                    return
                yield item
        finally:
            self._leave(session)

    def _leave(self, session: _Session) -> None:
        with self._lock:
            if session not in self._sessions:
                return
            before = self._primary(session.role)
            self._sessions.remove(session)
            after = self._primary(session.role)
            if session.arbitrated:
                log.info("controller %s (election id %s) left", session.peer, session.election)
            if before is not after:
                self._notify_role(session.role, after)

    def _notify_role(self, role: str, primary: _Session | None) -> None:
        for other in self._sessions:
            if other.arbitrated and other.role == role:
                other.outbox.put(self._arbitration_update(other, primary))

    def _on_stream_message(self, session: _Session, request: p4r.StreamMessageRequest) -> None:
        kind = request.WhichOneof("update")
        if kind != "arbitration":
            if not session.arbitrated:
                session.outbox.put(
                    _Close(
                        grpc.StatusCode.FAILED_PRECONDITION,
                        "the first stream message must be arbitration",
                    )
                )
                return
            response = p4r.StreamMessageResponse()
            response.error.canonical_code = code_pb2.UNIMPLEMENTED
            response.error.message = f"stream message '{kind}' is not supported by this program"
            session.outbox.put(response)
            return
        arbitration = request.arbitration
        role = arbitration.role.name if arbitration.HasField("role") else ""
        if arbitration.device_id != self.device_id:
            session.outbox.put(
                _Close(
                    grpc.StatusCode.NOT_FOUND,
                    f"device id {arbitration.device_id} is not this switch (device id {self.device_id})",
                )
            )
            return
        election = (
            election_value(arbitration.election_id) if arbitration.HasField("election_id") else None
        )
        with self._lock:
            if session.arbitrated and role != session.role:
                session.outbox.put(
                    _Close(
                        grpc.StatusCode.FAILED_PRECONDITION, "role changed on an arbitrated stream"
                    )
                )
                return
            if election is not None:
                for other in self._sessions:
                    if (
                        other is not session
                        and other.arbitrated
                        and other.role == role
                        and other.election == election
                    ):
                        session.outbox.put(
                            _Close(
                                grpc.StatusCode.INVALID_ARGUMENT,
                                f"election id {election} is already used by another controller",
                            )
                        )
                        return
            before = self._primary(role)
            session.arbitrated = True
            session.role = role
            session.election = election
            if election is not None:
                self._highest[role] = max(self._highest.get(role, 0), election)
            after = self._primary(role)
            log.info(
                "controller %s arbitrated with election id %s: %s",
                session.peer,
                election,
                "primary" if after is session else "backup",
            )
            if before is not after:
                self._notify_role(role, after)
            else:
                session.outbox.put(self._arbitration_update(session, after))

    # -- unary RPCs --------------------------------------------------------------------------

    def Capabilities(
        self, request: p4r.CapabilitiesRequest, context: grpc.ServicerContext
    ) -> p4r.CapabilitiesResponse:  # noqa: N802
        """The P4Runtime API version implemented."""
        return p4r.CapabilitiesResponse(p4runtime_api_version=API_VERSION)

    def SetForwardingPipelineConfig(  # noqa: N802
        self, request: p4r.SetForwardingPipelineConfigRequest, context: grpc.ServicerContext
    ) -> p4r.SetForwardingPipelineConfigResponse:
        """Verify, save and/or commit the mrc_switch program's P4Info."""
        self._check_device(request.device_id, context)
        self._check_primary(request.role, election_value(request.election_id), context)
        try:
            self.runtime.set_pipeline(request.action, request.config)
        except RuntimeStatus as exc:
            log.warning("SetForwardingPipelineConfig refused: %s", exc.message)
            context.abort(grpc_status(exc.code), exc.message)
        log.info(
            "pipeline config %s",
            p4r.SetForwardingPipelineConfigRequest.Action.Name(request.action),
        )
        return p4r.SetForwardingPipelineConfigResponse()

    def GetForwardingPipelineConfig(  # noqa: N802
        self, request: p4r.GetForwardingPipelineConfigRequest, context: grpc.ServicerContext
    ) -> p4r.GetForwardingPipelineConfigResponse:
        """The committed config."""
        self._check_device(request.device_id, context)
        try:
            config = self.runtime.get_pipeline(request.response_type)
        except RuntimeStatus as exc:
            context.abort(grpc_status(exc.code), exc.message)
        return p4r.GetForwardingPipelineConfigResponse(config=config)

    def Write(  # noqa: N802
        self, request: bytes | p4r.WriteRequest, context: grpc.ServicerContext
    ) -> p4r.WriteResponse:
        """Apply the updates in order; per-update errors in the status details.

        ``request``: the serialised ``p4r.WriteRequest`` (or the message).
        """
        if isinstance(request, bytes):
            request = _parse(p4r.WriteRequest, request, context)
        self._check_device(request.device_id, context)
        self._check_primary(request.role, election_value(request.election_id), context)
        if request.atomicity != p4r.WriteRequest.CONTINUE_ON_ERROR:
            context.abort(
                grpc.StatusCode.UNIMPLEMENTED,
                f"atomicity {p4r.WriteRequest.Atomicity.Name(request.atomicity)} is not supported",
            )
        if self.runtime.binding is None:
            context.abort(
                grpc.StatusCode.FAILED_PRECONDITION, "no forwarding pipeline config has been set"
            )
        write = self.runtime.write
        failed: list[tuple[int, int, str]] = []  # (index, code, message) of refused updates
        for index, update in enumerate(request.updates):
            try:
                write(update)
            except RuntimeStatus as exc:
                failed.append((index, exc.code, exc.message))
            except Exception as exc:  # a bug must not cost the other updates their answer
                log.exception("write: update %d failed unexpectedly", index)
                failed.append((index, code_pb2.INTERNAL, f"internal error: {exc!r}"))
        if failed:
            self._refuse_write(len(request.updates), failed, context)
        return p4r.WriteResponse()

    @staticmethod
    def _refuse_write(
        count: int, failed: list[tuple[int, int, str]], context: grpc.ServicerContext
    ) -> None:
        """End a Write with UNKNOWN and one p4r.Error per update (OK for the applied ones)."""
        status = status_pb2.Status(
            code=code_pb2.UNKNOWN, message=f"{len(failed)} of {count} updates failed"
        )
        refused = {index: (code, message) for index, code, message in failed}
        applied = any_pb2.Any()
        applied.Pack(p4r.Error(canonical_code=code_pb2.OK))
        for index in range(count):
            if index in refused:
                code, message = refused[index]
                detail = any_pb2.Any()
                detail.Pack(p4r.Error(canonical_code=code, message=message, space="switchmodel"))
                status.details.append(detail)
            else:
                status.details.append(applied)
        log.warning("write: %s", "; ".join(message for _, _, message in failed))
        context.set_trailing_metadata((("grpc-status-details-bin", status.SerializeToString()),))
        context.abort(grpc.StatusCode.UNKNOWN, status.message)

    def Read(  # noqa: N802
        self, request: bytes | p4r.ReadRequest, context: grpc.ServicerContext
    ) -> Iterator[p4r.ReadResponse]:
        """Table entries, counters and the register (wildcards allowed).

        ``request``: the serialised ``p4r.ReadRequest`` (or the message); yields one
        ``p4r.ReadResponse``.
        """
        if isinstance(request, bytes):
            request = _parse(p4r.ReadRequest, request, context)
        self._check_device(request.device_id, context)
        response = p4r.ReadResponse()
        try:
            for entity in request.entities:
                response.entities.extend(self.runtime.read(entity))
        except RuntimeStatus as exc:
            context.abort(grpc_status(exc.code), exc.message)
        yield response


def _parse(kind: Any, data: bytes, context: grpc.ServicerContext) -> Any:
    """``data`` parsed as a ``kind`` message; INVALID_ARGUMENT when protobuf cannot parse it."""
    try:
        return kind.FromString(data)
    except Exception as exc:  # DecodeError, or UnicodeDecodeError for a bad string
        context.abort(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"{kind.DESCRIPTOR.name}: not a valid protobuf message ({exc})",
        )


def _serialize(message: Any) -> bytes:
    return bytes(message.SerializeToString())


def _raw(data: bytes) -> bytes:
    return data


def add_to_server(servicer: P4RuntimeServicer, server: Any) -> None:
    """Register ``servicer`` as the p4.v1.P4Runtime service of ``server``, Write and Read
    taking their requests as bytes."""
    unary, stream = grpc.unary_unary_rpc_method_handler, grpc.unary_stream_rpc_method_handler
    methods: dict[str, tuple[Any, Any]] = {  # name -> (handler kind, request class or None)
        "Write": (unary, None),
        "Read": (stream, None),
        "SetForwardingPipelineConfig": (unary, p4r.SetForwardingPipelineConfigRequest),
        "GetForwardingPipelineConfig": (unary, p4r.GetForwardingPipelineConfigRequest),
        "StreamChannel": (grpc.stream_stream_rpc_method_handler, p4r.StreamMessageRequest),
        "Capabilities": (unary, p4r.CapabilitiesRequest),
    }
    handlers = {
        name: kind(
            getattr(servicer, name),
            request_deserializer=_raw if request is None else request.FromString,
            response_serializer=_serialize,
        )
        for name, (kind, request) in methods.items()
    }
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("p4.v1.P4Runtime", handlers),)
    )


class AddressInUse(OSError):
    """The gRPC address cannot be bound (the message names it)."""


def serve(servicer: P4RuntimeServicer, address: str, workers: int = 16) -> Any:
    """Start a gRPC server for ``servicer`` on ``address``; the started grpc.Server.

    Raises AddressInUse naming the address when it cannot be bound.
    """
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="p4rt"),
        options=[("grpc.so_reuseport", 0)],
    )
    add_to_server(servicer, server)
    try:
        port = server.add_insecure_port(address)
    except RuntimeError as exc:
        raise AddressInUse(f"cannot listen on {address}: {exc}") from None
    if port == 0:
        raise AddressInUse(f"cannot listen on {address}: address in use or invalid")
    server.start()
    return server
