"""Work requests of the application API (:mod:`.app_api`): ``post_send`` (RDMA WRITE and WRITE
with immediate, gathered from the application's memory as a NIC's DMA read would, in place) and
``post_recv`` (the receives a WRITE with immediate consumes). A QP in ERR flushes what is posted
to it; errors name the failing work request (``bad``).
"""

from __future__ import annotations

import errno
from collections.abc import Mapping
from typing import Any

from host.agent.ocp.abi import (
    MAX_MESSAGE,
    U32_MAX,
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


def _gather(session: Session, qp: Qp, sges: Any, inline: bool, index: int) -> bytes:
    def bad(message: str, code: int = errno.EINVAL) -> OcpError:
        return OcpError(code, f"post_send: WR {index}: {message}", index)

    if not isinstance(sges, list) or len(sges) > qp.max_send_sge:
        raise bad(f"at most {qp.max_send_sge} SGEs (max_send_sge)")
    parts = []
    total = 0
    for sge in sges:
        if not (isinstance(sge, list) and len(sge) == 3 and all(isinstance(v, int) for v in sge)):
            raise bad("SGE must be [addr, length, lkey]")
        addr, length, lkey = sge
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
        if total > MAX_MESSAGE:
            raise bad(f"more than {MAX_MESSAGE} bytes")
        try:
            parts.append(bytes(session.process.read(addr, length)))
        except MemoryAccessError as exc:
            raise bad(f"{exc.strerror}", errno.EFAULT) from None
    if inline and total > qp.max_inline:
        raise bad(f"{total} inline bytes, max_inline_data is {qp.max_inline}")
    return b"".join(parts)


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
    posted = 0
    try:
        for index, wr in enumerate(wrs):

            def bad(message: str, code: int = errno.EINVAL, index: int = index) -> OcpError:
                return OcpError(code, f"post_send: WR {index}: {message}", index)

            if not (
                isinstance(wr, list) and len(wr) == 7 and all(isinstance(v, int) for v in wr[:6])
            ):
                raise bad("expected [wr_id, opcode, flags, imm, remote_addr, rkey, sges]")
            wr_id, opcode, flags, imm, remote_addr, rkey, sges = wr
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
            data = _gather(session, qp, sges, bool(flags & SendFlag.INLINE), index)
            signaled = qp.sq_sig_all or bool(flags & SendFlag.SIGNALED)
            record = SendWr(wr_id, is_imm, signaled, len(data))
            token = id(record)
            if is_imm:
                core.post_write_imm(data, remote_addr, rkey, imm & 0xFFFFFFFF, wr_id=token)
                qp.wimm_inflight += 1
            else:
                core.post_write(data, remote_addr, rkey, wr_id=token)
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
            isinstance(wr, list) and len(wr) == 2 and isinstance(wr[0], int)
            and isinstance(wr[1], list)
        ):  # fmt: skip
            raise bad("expected [wr_id, sges]")
        if len(wr[1]) > qp.max_recv_sge:
            raise bad(f"at most {qp.max_recv_sge} SGEs (max_recv_sge)")
        for sge in wr[1]:
            ok = isinstance(sge, list) and len(sge) == 3 and all(isinstance(v, int) for v in sge)
            mr = session.mrs.get(sge[2]) if ok else None
            if mr is None or not mr.covers(sge[0], sge[1]):
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
