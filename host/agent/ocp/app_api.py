"""The application API of the OCP MRC provider (``mrc.h`` and the verbs ``lib_mrc.so`` and
``libibverbs.so.1`` send): sessions, device and port queries, memory registrations, CQs, QPs
and their state machine (:mod:`.qp_states`), work requests. :data:`COMMANDS` are its rows.

Work requests (:mod:`.work`) are RDMA WRITE and WRITE with immediate only; a WRITE_IMM
consumes a posted receive at the responder. Send completions are delivered in posting order
per QP, whatever order the core finishes the messages in (multipath).
"""

from __future__ import annotations

import errno
import logging
import secrets
from collections.abc import Mapping
from typing import Any

from host.agent.ocp import abi
from host.agent.ocp.abi import (
    MAX_CQE,
    MAX_INLINE,
    MAX_MPR,
    MAX_SGE,
    MAX_WIMM,
    MAX_WR,
    PROTOCOL_VERSION_1,
    U32_MAX,
    Access,
    DeviceCap,
    OcpError,
    QpCap,
    QpState,
    Reply,
    SendOps,
    field_int,
)
from host.agent.ocp.mem import AppMemory, AppProcess, MemoryAccessError
from host.agent.ocp.objects import Channel, Cq, Mr, Qp, Session
from host.agent.ocp.qp_states import QpChange, check_modify
from host.agent.ocp.server import OcpConnection
from host.agent.ocp.state import Command, ProviderState
from host.agent.ocp.work import post_recv, post_send
from host.transport.evs import GeneratedEvProfile

log = logging.getLogger("mrc.host.agent.ocp")


# -- sessions ----------------------------------------------------------------------------------


def hello(p: ProviderState, conn: OcpConnection, request: Mapping[str, Any]) -> Reply:
    """Open a session for the calling process (one per connection)."""
    if conn.owner is not None:
        raise OcpError(errno.EINVAL, "hello: this connection already has a session")
    try:  # the session is the process's, not its id's (a pidfd)
        process = AppProcess(conn.pid)
    except MemoryAccessError as exc:
        raise OcpError(errno.ESRCH, f"hello: {exc.strerror}") from None
    session = Session(p.next_session, secrets.randbits(48), conn, process)
    p.next_session += 1
    conn.owner = session
    p.sessions[session.id] = session
    log.info("ocp: session %d for process %d (uid %d)", session.id, conn.pid, conn.uid)
    return {
        "ok": True, "session": session.id, "token": session.token,
        "host": p.agent.host.name, "pid": conn.pid, "ports": p.ports(),
    }  # fmt: skip


def attach(p: ProviderState, conn: OcpConnection, request: Mapping[str, Any]) -> Reply:
    """Join a session as its completion channel (``role: channel``) or async events."""
    sid = field_int(request, "session")
    session = p.sessions.get(sid)
    if session is None or session.token != request.get("token"):
        raise OcpError(errno.EINVAL, f"attach: no session {sid} with that token")
    if conn.owner is not None:
        raise OcpError(errno.EINVAL, "attach: this connection already belongs to a session")
    role = request.get("role")
    if role == "async":
        session.async_conn = conn
        conn.owner = (session, None)
        return {"ok": True}
    if role == "channel":
        channel = Channel(session.new_id(), conn)
        session.channels[channel.id] = channel
        conn.owner = (session, channel)
        return {"ok": True, "channel": channel.id}
    raise OcpError(errno.EINVAL, f"attach: field 'role': expected channel or async, got {role!r}")


def query_device(p: ProviderState, session: Session, request: Mapping[str, Any]) -> Reply:
    return {
        "ok": True, "protocol_version": PROTOCOL_VERSION_1, "max_wimm": MAX_WIMM,
        "max_wimm_dest": MAX_WIMM, "max_mpr": MAX_MPR, "mpr_resolution": 1,
        "cap": int(DeviceCap.TRIM_NACK), "max_cqe": MAX_CQE, "max_wr": MAX_WR,
        "max_sge": MAX_SGE, "ports": p.ports(), "ev_count": p.agent.context.config.ev_count,
        "cc": p.agent.cc_profile.name, **abi.device_limits(),
    }  # fmt: skip


def query_port(p: ProviderState, session: Session, request: Mapping[str, Any]) -> Reply:
    port = field_int(request, "port", 1, 255)
    ports = p.ports()
    for entry in ports:
        if entry["port"] == port:
            return {"ok": True, **entry}
    raise OcpError(
        errno.EINVAL,
        f"field 'port': {p.agent.host.name} has ports 1..{len(ports)}, got {port}",
    )


def stats(p: ProviderState, session: Session, request: Mapping[str, Any]) -> Reply:
    return {
        "ok": True, "sessions": len(p.sessions), "qps": len(p.qps),
        "session": {"mrs": len(session.mrs), "cqs": len(session.cqs), "qps": len(session.qps)},
        "counters": dict(p.counters),
        "write_errors": sum(m.mem.write_errors for s in p.sessions.values() for m in s.mrs.values()),
        "foreign_bytes": session.conn.foreign_bytes,
    }  # fmt: skip


# -- memory --------------------------------------------------------------------------------------


def reg_mr(p: ProviderState, session: Session, request: Mapping[str, Any]) -> Reply:
    addr = field_int(request, "addr")
    length = field_int(request, "length", 1, abi.MAX_MR_SIZE)
    access = field_int(request, "access", 0, U32_MAX)
    if addr + length > 1 << 64:
        raise OcpError(errno.EINVAL, f"reg_mr: {length} bytes at {addr:#x} leave the address space")
    domain = p.domain(session, request)
    writable = bool(access & Access.REMOTE_WRITE)
    try:  # every page must be mapped in the process, writable when written, as pinning would
        session.process.check_mapped(addr, length, writable)
    except MemoryAccessError as exc:
        raise OcpError(exc.errno or errno.EFAULT, f"reg_mr: {exc.strerror}") from None
    mr = Mr(p.next_lkey, addr, length, access, AppMemory(session.process, addr, length), domain)
    p.next_lkey += 1
    if access & Access.REMOTE_WRITE:
        mr.rkey = p.agent.context.register_region(addr, length, mr.mem, domain).rkey
    session.mrs[mr.lkey] = mr
    return {"ok": True, "lkey": mr.lkey, "rkey": mr.rkey}


def dereg_mr(p: ProviderState, session: Session, request: Mapping[str, Any]) -> Reply:
    lkey = field_int(request, "lkey", 0, U32_MAX)
    mr = session.mrs.pop(lkey, None)
    if mr is None:
        raise OcpError(errno.EINVAL, f"dereg_mr: no memory region with lkey {lkey}")
    p.drop_region(mr)
    return {"ok": True}


# -- completion queues ---------------------------------------------------------------------------


def create_cq(p: ProviderState, session: Session, request: Mapping[str, Any]) -> Reply:
    cqe = field_int(request, "cqe", 1, MAX_CQE)
    channel_id = field_int(request, "channel", default=0)
    channel = None
    if channel_id:
        channel = session.channels.get(channel_id)
        if channel is None:
            raise OcpError(errno.EINVAL, f"field 'channel': no completion channel {channel_id}")
    cq = Cq(session.new_id(), cqe, channel)
    session.cqs[cq.id] = cq
    return {"ok": True, "cq": cq.id, "cqe": cqe}


def destroy_cq(p: ProviderState, session: Session, request: Mapping[str, Any]) -> Reply:
    cq = session.cq(request)
    if cq.users:
        raise OcpError(errno.EBUSY, f"destroy_cq: CQ {cq.id} is used by {cq.users} QP(s)")
    del session.cqs[cq.id]
    return {"ok": True}


def poll_cq(p: ProviderState, session: Session, request: Mapping[str, Any]) -> Reply:
    cq = session.cq(request)
    n = field_int(request, "n", 0, MAX_CQE)
    out: list[list[Any]] = []
    while cq.entries and len(out) < n:
        out.append(cq.entries.popleft().wire())
    return {"ok": True, "wc": out}


def req_notify_cq(p: ProviderState, session: Session, request: Mapping[str, Any]) -> Reply:
    cq = session.cq(request)
    if cq.channel is None:
        raise OcpError(errno.EINVAL, f"req_notify_cq: CQ {cq.id} has no completion channel")
    cq.armed = True
    if cq.entries:  # completions already waiting: notify at once
        p.notify(cq)
    return {"ok": True}


# -- QPs -----------------------------------------------------------------------------------------


def create_qp(p: ProviderState, session: Session, request: Mapping[str, Any]) -> Reply:
    send_cq = session.cq(request, "send_cq")
    recv_cq = session.cq(request, "recv_cq")
    if send_cq.kind != "wc" or recv_cq.kind != "wc":
        raise OcpError(errno.EINVAL, "create_qp: an EV event CQ cannot take work completions")
    ops = field_int(request, "send_ops", default=0)
    every_op = SendOps.WRITE | SendOps.WRITE_WITH_IMM
    if ops & ~int(every_op):
        raise OcpError(
            errno.EOPNOTSUPP,
            f"field 'send_ops_flags' {ops:#x}: MRC QPs do RDMA WRITE and WRITE_WITH_IMM only",
        )
    version = field_int(request, "protocol_version", 0, U32_MAX, default=0)
    if version not in (0, PROTOCOL_VERSION_1):
        raise OcpError(errno.EINVAL, f"field 'protocol_version': expected 0 or 1, got {version}")
    qpn = p.new_qpn()
    qp = Qp(
        qpn, send_cq, recv_cq,
        max_send_wr=field_int(request, "max_send_wr", 1, MAX_WR),
        max_recv_wr=field_int(request, "max_recv_wr", 0, MAX_WR, default=0),
        max_send_sge=field_int(request, "max_send_sge", 0, MAX_SGE, default=1),
        max_recv_sge=field_int(request, "max_recv_sge", 0, MAX_SGE, default=1),
        max_inline=field_int(request, "max_inline", 0, MAX_INLINE, default=0),
        sq_sig_all=bool(field_int(request, "sq_sig_all", 0, 1 << 31, default=0)),
        send_ops=SendOps(ops) or every_op, domain=p.domain(session, request),
    ).fresh(p.agent.context.config)  # fmt: skip
    session.qps[qp.qpn] = qp
    p.qps[qp.qpn] = (session, qp)
    send_cq.users += 1
    recv_cq.users += 1
    return {"ok": True, **qp.describe()}


def destroy_qp(p: ProviderState, session: Session, request: Mapping[str, Any]) -> Reply:
    p.drop_qp(session, session.qp(request))
    p.kick()
    return {"ok": True}


def query_qp(p: ProviderState, session: Session, request: Mapping[str, Any]) -> Reply:
    return {"ok": True, **session.qp(request).describe()}


def modify_qp(p: ProviderState, session: Session, request: Mapping[str, Any]) -> Reply:
    """Attributes and state transitions: checked by :func:`.qp_states.check_modify`, then
    applied here."""
    qp = session.qp(request)
    try:
        change = check_modify(qp, request, p)
        for note in change.notes:
            log.info("ocp: QP %#x: %s", qp.qpn, note)
        return {"ok": True, **_apply(p, session, qp, change).describe()}
    except OcpError as exc:
        raise exc.prefixed("modify_qp") from None


def _apply(p: ProviderState, session: Session, qp: Qp, change: QpChange) -> Qp:
    if change.new == QpState.RESET:
        p.flush(session, qp)
        p.release_core(qp)
        fresh = qp.fresh(p.agent.context.config)
        session.qps[qp.qpn] = fresh
        p.qps[qp.qpn] = (session, fresh)
        return fresh
    for name, value in change.values.items():
        setattr(qp, name, value)
    if change.remote_host is not None:
        qp.remote_host = change.remote_host
    reconfigured = False
    if change.makes_core:
        assert change.config is not None
        _make_core(p, qp, change)
    elif change.config is not None:
        # RTS -> RTS (or RTR -> RTS) with new timeout, retry counts or mpr: at once
        p.agent.context.configure_qp(qp.qpn, change.config)
        reconfigured = True
    core = qp.core
    rts = (change.old, change.new) == (QpState.RTR, QpState.RTS)
    if rts and core is not None and qp.sq_psn != core.first_psn:
        assert qp.dest_qpn is not None
        try:
            core.connect(qp.dest_qpn, send_psn=qp.sq_psn, expect_psn=qp.rq_psn)
        except RuntimeError:
            raise OcpError(
                errno.EINVAL,
                "the peer's first packets already arrived: give IBV_QP_SQ_PSN with the RTR "
                "transition",
            ) from None
    qp.state = change.new
    if change.new == QpState.ERR and change.old != QpState.ERR:
        p.flush(session, qp)
    if reconfigured:
        p.kick()  # the ACK timeout may now be due sooner
    return qp


def _make_core(p: ProviderState, qp: Qp, change: QpChange) -> None:
    """INIT -> RTR: the transport core's QP, with the QP's profiles, towards its peer."""
    agent = p.agent
    assert qp.remote_host is not None and qp.dest_qpn is not None and change.config is not None
    policy = "no-trim-nack" if qp.cap & QpCap.TRIM_NACK_DEST_UNSUPPORTED else "mrc"
    p.cc_profiles.check_usable(qp.cc_profile or 0)
    cc = p.cc_profiles.profile_for(qp.cc_profile or 0)
    ev_profile: GeneratedEvProfile | int | None = GeneratedEvProfile(
        count=agent.context.config.ev_count
    )
    if qp.ev_profile:
        p.ev_profiles.check_usable(qp.ev_profile)
        p.ev_profiles.check_destination(qp.ev_profile, qp.remote_host)
        ev_profile = p.ev_profiles.core_profile(qp.ev_profile)
    try:
        core = agent.context.create_qp(
            qp.remote_host, agent.fabric.paths(agent.host.name, qp.remote_host),
            cq=p.core_cq, policy=policy, cc=cc, ev_profile=ev_profile, qpn=qp.qpn,
            config=change.config, domain=qp.domain,
        )  # fmt: skip
    except ValueError as exc:  # an EV profile the paths to this peer cannot take
        raise OcpError(errno.EINVAL, f"EV profile {qp.ev_profile}: {exc}") from None
    core.connect(qp.dest_qpn, send_psn=qp.sq_psn, expect_psn=qp.rq_psn)
    qp.core = core


COMMANDS = (
    Command("hello", hello, session=False),
    Command("attach", attach, session=False),
    Command("query_device", query_device),
    Command("query_port", query_port),
    Command("stats", stats),
    Command("reg_mr", reg_mr),
    Command("dereg_mr", dereg_mr),
    Command("create_cq", create_cq),
    Command("destroy_cq", destroy_cq),
    Command("poll_cq", poll_cq),
    Command("req_notify_cq", req_notify_cq),
    Command("create_qp", create_qp),
    Command("destroy_qp", destroy_qp),
    Command("query_qp", query_qp),
    Command("modify_qp", modify_qp),
    Command("post_send", post_send),
    Command("post_recv", post_recv),
)
