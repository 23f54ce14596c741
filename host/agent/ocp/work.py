"""Work requests of the application API (:mod:`.app_api`): ``post_send`` (RDMA WRITE and WRITE
with immediate, gathered from the application's memory as a NIC's DMA read would, in place) and
``post_recv`` (the receives a WRITE with immediate consumes). A QP in ERR flushes what is posted
to it; errors name the failing work request (``bad``).

What a post may take of the agent is bounded before anything is read (docs/ocp-api.md, "Limits
and isolation"): an SGE and a message at most ``max_msg_sz`` (:data:`.abi.MAX_MESSAGE`) bytes,
inline data at most the QP's ``max_inline_data`` (checked before it is read), and the bytes
posted and not yet completed at most :data:`.abi.MAX_HELD_QP` per QP and
:data:`.abi.MAX_HELD_SESSION` per session (``ENOMEM``, as a full send queue). A message is read
in pieces of :data:`.abi.READ_CHUNK` bytes straight into its buffer.
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Mapping
from typing import Any

from host.agent.ocp.abi import (
    MAX_HELD_QP,
    MAX_HELD_SESSION,
    MAX_MESSAGE,
    READ_CHUNK,
    U32_MAX,
    U64_MAX,
    OcpError,
    QpState,
    Reply,
    SendFlag,
    SendOps,
    WcOpcode,
    WrOpcode,
    field_list,
)
from host.agent.ocp.mem import MemoryAccessError
from host.agent.ocp.objects import Qp, SendWr, Session, WorkCompletion
from host.agent.ocp.state import ProviderState

Refusal = Callable[..., OcpError]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _sge(sge: Any, bad: Refusal) -> tuple[int, int, int]:
    """An SGE ``[addr, length, lkey]`` of ``ibv_sge``'s ranges (``bad`` refuses it else)."""
    if not (isinstance(sge, list) and len(sge) == 3 and all(_is_int(v) for v in sge)):
        raise bad("SGE must be [addr, length, lkey]")
    addr, length, lkey = sge
    if not (0 <= addr <= U64_MAX and 0 <= length <= U32_MAX and 0 <= lkey <= U32_MAX):
        raise bad(f"SGE {sge!r}: address, length or lkey out of range (64, 32, 32 bits)")
    if length > MAX_MESSAGE:
        raise bad(f"SGE of {length} bytes: at most {MAX_MESSAGE} (max_msg_sz)")
    return addr, length, lkey


def _gather_spans(
    session: Session, qp: Qp, sges: Any, inline: bool, bad: Refusal
) -> tuple[list[tuple[int, int]], int]:
    """The memory a send WR reads (``(addr, length)`` pieces) and its total, checked against
    the regions, ``max_msg_sz`` and ``max_inline_data`` before anything is read."""
    if not isinstance(sges, list) or len(sges) > qp.max_send_sge:
        raise bad(f"at most {qp.max_send_sge} SGEs (max_send_sge)")
    spans = []
    total = 0
    for sge in sges:
        addr, length, lkey = _sge(sge, bad)
        if not inline:
            mr = session.mrs.get(lkey)
            if mr is None:
                raise bad(f"lkey {lkey:#x} is not a registered memory region")
            if not mr.covers(addr, length):
                raise bad(
                    f"{length} bytes at {addr:#x} are outside memory region "
                    f"[{mr.addr:#x}, {mr.addr + mr.length:#x}) of lkey {lkey:#x}"
                )
        total += length
        spans.append((addr, length))
    if total > MAX_MESSAGE:
        raise bad(f"{total} bytes: a message is at most {MAX_MESSAGE} bytes (max_msg_sz)")
    if inline and total > qp.max_inline:
        raise bad(f"{total} inline bytes, max_inline_data is {qp.max_inline}")
    return spans, total


def _read(session: Session, spans: list[tuple[int, int]], total: int, bad: Refusal) -> bytearray:
    """The bytes of ``spans`` of the session's process, read in pieces of READ_CHUNK."""
    data = bytearray(total)
    at = 0
    try:
        for addr, length in spans:
            for offset in range(0, length, READ_CHUNK):
                n = min(READ_CHUNK, length - offset)
                data[at : at + n] = session.process.read(addr + offset, n)
                at += n
    except MemoryAccessError as exc:
        raise bad(f"{exc.strerror}", errno.EFAULT) from None
    return data


def post_send(p: ProviderState, session: Session, request: Mapping[str, Any]) -> Reply:
    qp = session.qp(request)
    wrs = field_list(request, "wrs")
    if qp.state == QpState.ERR:
        for wr in wrs:
            wr_id = wr[0] if isinstance(wr, list) and wr and isinstance(wr[0], int) else 0
            p.complete(
                session, qp.send_cq, WorkCompletion.flushed(wr_id, WcOpcode.RDMA_WRITE, qp.qpn)
            )
        return {"ok": True, "posted": 0, "flushed": len(wrs)}
    core = qp.core
    if qp.state != QpState.RTS or core is None:
        raise OcpError(
            errno.EINVAL, f"post_send: QP {qp.qpn:#x} is {qp.state.name}, sends need RTS", 0
        )
    if not qp.sends:
        qp.held = 0  # a flush completed them all
    session_held = sum(q.held for q in session.qps.values() if q.sends)
    posted = 0
    try:
        for index, wr in enumerate(wrs):

            def bad(message: str, code: int = errno.EINVAL, index: int = index) -> OcpError:
                return OcpError(code, f"post_send: WR {index}: {message}", index)

            if not (isinstance(wr, list) and len(wr) == 7 and all(_is_int(v) for v in wr[:6])):
                raise bad("expected [wr_id, opcode, flags, imm, remote_addr, rkey, sges]")
            wr_id, opcode, flags, imm, remote_addr, rkey, sges = wr
            if not 0 <= wr_id <= U64_MAX:
                raise bad(f"wr_id {wr_id}: expected a 64-bit unsigned value")
            if opcode == WrOpcode.RDMA_WRITE and qp.send_ops & SendOps.WRITE:
                is_imm = False
            elif opcode == WrOpcode.RDMA_WRITE_WITH_IMM and qp.send_ops & SendOps.WRITE_WITH_IMM:
                is_imm = True
            else:
                raise bad(
                    f"opcode {opcode} not allowed (MRC: IBV_WR_RDMA_WRITE and "
                    "IBV_WR_RDMA_WRITE_WITH_IMM, as enabled by send_ops_flags)"
                )
            if len(qp.sends) >= qp.max_send_wr:
                raise bad(
                    f"send queue full ({qp.max_send_wr} outstanding, max_send_wr)", errno.ENOMEM
                )
            if is_imm and qp.wimm_inflight >= qp.max_wimm:
                raise bad(
                    f"{qp.wimm_inflight} WRITE_IMMs in flight, max_wimm is {qp.max_wimm}",
                    errno.ENOMEM,
                )
            if not 0 <= rkey <= U32_MAX or not 0 <= remote_addr < 1 << 64:
                raise bad("bad rkey or remote address")
            spans, total = _gather_spans(session, qp, sges, bool(flags & SendFlag.INLINE), bad)
            if qp.held + total > MAX_HELD_QP:
                raise bad(
                    f"{qp.held} bytes of this QP's sends are not completed yet: {total} more "
                    f"would hold more than {MAX_HELD_QP}", errno.ENOMEM,
                )  # fmt: skip
            if session_held + total > MAX_HELD_SESSION:
                raise bad(
                    f"{session_held} bytes of this context's sends are not completed yet: "
                    f"{total} more would hold more than {MAX_HELD_SESSION}", errno.ENOMEM,
                )  # fmt: skip
            data = _read(session, spans, total, bad)
            signaled = qp.sq_sig_all or bool(flags & SendFlag.SIGNALED)
            record = SendWr(wr_id, is_imm, signaled, total)
            token = id(record)
            try:
                if is_imm:
                    core.post_write_imm(data, remote_addr, rkey, imm & 0xFFFFFFFF, wr_id=token)
                else:
                    core.post_write(data, remote_addr, rkey, wr_id=token)
            except (RuntimeError, ValueError) as exc:  # the core's QP failed meanwhile
                raise bad(str(exc)) from None
            if is_imm:
                qp.wimm_inflight += 1
            qp.held += total
            session_held += total
            qp.sends.append(record)
            qp.by_token[token] = record
            posted += 1
    finally:
        if posted:
            p.kick()
    return {"ok": True, "posted": posted}


def post_recv(p: ProviderState, session: Session, request: Mapping[str, Any]) -> Reply:
    qp = session.qp(request)
    wrs = field_list(request, "wrs")
    if qp.state == QpState.RESET:
        raise OcpError(
            errno.EINVAL, f"post_recv: QP {qp.qpn:#x} is RESET, receives need INIT or later", 0
        )
    for index, wr in enumerate(wrs):

        def bad(message: str, code: int = errno.EINVAL, index: int = index) -> OcpError:
            return OcpError(code, f"post_recv: WR {index}: {message}", index)

        if not (
            isinstance(wr, list) and len(wr) == 2 and _is_int(wr[0]) and 0 <= wr[0] <= U64_MAX
            and isinstance(wr[1], list)
        ):  # fmt: skip
            raise bad("expected [wr_id, sges] (wr_id a 64-bit unsigned value)")
        if len(wr[1]) > qp.max_recv_sge:
            raise bad(f"at most {qp.max_recv_sge} SGEs (max_recv_sge)")
        for sge in wr[1]:
            addr, length, lkey = _sge(sge, bad)
            mr = session.mrs.get(lkey)
            if mr is None or not mr.covers(addr, length):
                raise bad(f"SGE {sge!r} is not inside a registered memory region")
        if qp.state == QpState.ERR:
            p.complete(
                session,
                qp.recv_cq,
                WorkCompletion.flushed(wr[0], WcOpcode.RECV_RDMA_WITH_IMM, qp.qpn),
            )
            continue
        limit = min(qp.max_recv_wr, qp.max_wimm_dest)
        if len(qp.recvs) >= limit:
            raise bad(
                f"{len(qp.recvs)} receives posted, the limit is {limit} (max_recv_wr, "
                "max_wimm_dest)",
                errno.ENOMEM,
            )
        qp.recvs.append(wr[0])
    return {"ok": True}
