"""The OCP MRC provider of one agent: its socket (:mod:`.server`), the dispatch of requests to
the rows of the application API (:mod:`.app_api`) and the controller API (:mod:`.ctl_api`) --
whether a command needs a session and root, and whether its session may make one more region,
CQ or QP (:data:`QUOTAS`), is checked here, once, for every row -- and what the transport core
reports: work completions in posting order, EV events.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from host.agent.control import Deferred
from host.agent.ocp import app_api, ctl_api
from host.agent.ocp.abi import (
    MAX_CQ,
    MAX_MR,
    MAX_QP,
    AsyncEvent,
    OcpError,
    QpState,
    Reply,
    WcFlag,
    WcOpcode,
    WcStatus,
)
from host.agent.ocp.objects import Qp, Session, WorkCompletion
from host.agent.ocp.server import OcpConnection, OcpServer
from host.agent.ocp.state import AgentLike, ProviderState
from host.transport.events import (
    STATUS_OK,
    STATUS_REMOTE_ACCESS_ERROR,
    STATUS_RETRY_EXCEEDED,
    Completion,
    Event,
    PlacementFault,
)

log = logging.getLogger("mrc.host.agent.ocp")

_STATUS = {
    STATUS_OK: WcStatus.SUCCESS,
    STATUS_REMOTE_ACCESS_ERROR: WcStatus.REM_ACCESS_ERR,
    STATUS_RETRY_EXCEEDED: WcStatus.RETRY_EXC_ERR,
}


#: what a session may hold of each kind: the command that makes one -> the session's
#: objects, the ``ibv_device_attr`` field of the limit, the limit
QUOTAS: dict[str, tuple[str, str, int]] = {
    "reg_mr": ("mrs", "max_mr", MAX_MR),
    "create_cq": ("cqs", "max_cq", MAX_CQ),
    "create_qp": ("qps", "max_qp", MAX_QP),
}


def check_quota(name: str, session: Session) -> None:
    """ENOMEM when command ``name`` would make one object more than its session may hold
    (ibv_reg_mr(3), ibv_create_cq(3), ibv_create_qp(3): "insufficient resources")."""
    quota = QUOTAS.get(name)
    if quota is None:
        return
    kind, attribute, limit = quota
    held = len(getattr(session, kind))
    if held >= limit:
        raise OcpError(
            errno.ENOMEM, f"{name}: this context holds {held} already ({attribute} is {limit})"
        )


def ocp_socket_path(control: Path) -> Path:
    """The provider's socket next to the control socket: ``h0.sock`` -> ``h0.ocp.sock``."""
    return control.with_name(f"{control.stem}.ocp{control.suffix or '.sock'}")


class OcpProvider(ProviderState):
    """The OCP MRC API provider of one agent."""

    def __init__(self, agent: AgentLike, path: Path) -> None:
        super().__init__(agent)
        self.path = path
        self.server = OcpServer(path, self.dispatch, self.closed)
        self.commands = {c.name: c for c in (*app_api.COMMANDS, *ctl_api.COMMANDS)}

    def dispatch(self, conn: OcpConnection, request: Mapping[str, Any]) -> Reply | Deferred:
        """Run one request: the command's row says whether it needs a session and root."""
        name = request["cmd"]
        command = self.commands.get(name)
        try:
            if command is None:
                raise OcpError(
                    errno.EOPNOTSUPP,
                    f"unknown command {name!r} (commands: {', '.join(sorted(self.commands))})",
                )
            if not command.session:
                return command.handler(self, conn, request)
            session = conn.owner
            if not isinstance(session, Session):
                raise OcpError(
                    errno.EINVAL, f"{name}: say 'hello' first (no session on this connection)"
                )
            if command.needs_root(request) and not session.root:
                raise OcpError(
                    errno.EPERM, f"{name}: the controller API needs root (CAP_NET_ADMIN)"
                )
            check_quota(name, session)
            return command.handler(self, session, request)
        except OcpError as exc:
            return exc.reply()

    def close(self) -> None:
        for session in list(self.sessions.values()):
            self.end_session(session)
        self.server.close()

    # -- core events ------------------------------------------------------------------------------

    def on_event(self, event: Event) -> bool:
        """Take the core's events of this provider's QPs; False for anything else."""
        if isinstance(event, Completion):
            found = self.qps.get(event.qpn)
            if found is None or event.cq != self.core_cq.number:
                return False
            self.core_cq.poll(len(self.core_cq))  # delivered here, as events
            session, qp = found
            if event.opcode == "recv_write_imm":
                self._on_recv(session, qp, event)
            else:
                self._on_send(session, qp, event)
            return True
        if isinstance(event, PlacementFault):
            return self._on_fault(event)
        ctl_api.on_ev_state(self, event)
        return False  # the agent logs it too

    def _on_fault(self, fault: PlacementFault) -> bool:
        """A write into the application's memory failed (it unmapped or write-protected a
        registered buffer, or exited): the packet was refused (the requester's WR fails
        with IBV_WC_REM_ACCESS_ERR); this QP goes to ERR with IBV_EVENT_QP_ACCESS_ERR."""
        found = self.qps.get(fault.qpn)
        if found is None:
            return False
        session, qp = found
        log.warning("ocp: QP %#x of process %d: %s", qp.qpn, session.pid, fault.error)
        self.counters["access_faults"] += 1
        if qp.state != QpState.ERR:
            self.fail_qp(session, qp, AsyncEvent.QP_ACCESS_ERR)
        return True

    def _on_recv(self, session: Session, qp: Qp, done: Completion) -> None:
        if qp.state == QpState.ERR:
            return
        entry = WorkCompletion(0, WcStatus.LOC_QP_OP_ERR, WcOpcode.RECV_RDMA_WITH_IMM, qp.qpn,
                               done.byte_len, (done.imm or 0) & 0xFFFFFFFF, WcFlag.WITH_IMM)  # fmt: skip
        if not qp.recvs:
            # MRC has no RNR: a WRITE_IMM needs a receive posted beforehand
            self.counters["recv_without_buffer"] += 1
            self.complete(session, qp.recv_cq, entry)
            self.fail_qp(session, qp)
            return
        status = _STATUS.get(done.status, WcStatus.LOC_QP_OP_ERR)
        self.complete(
            session, qp.recv_cq, WorkCompletion(qp.recvs.popleft(), status, entry.opcode, qp.qpn,
                                                entry.byte_len, entry.imm, entry.flags),
        )  # fmt: skip

    def _on_send(self, session: Session, qp: Qp, done: Completion) -> None:
        record = qp.by_token.pop(done.wr_id, None)
        if record is None:
            return  # flushed already
        record.status = _STATUS.get(done.status, WcStatus.LOC_QP_OP_ERR)
        failed = False
        while qp.sends and qp.sends[0].status is not None:
            wr = qp.sends.popleft()
            qp.held -= wr.byte_len
            status = wr.status if wr.status is not None else WcStatus.SUCCESS
            if wr.imm:
                qp.wimm_inflight -= 1
            if wr.signaled or status != WcStatus.SUCCESS:
                # wc_flags WITH_IMM is for the responder's completion only
                self.complete(
                    session, qp.send_cq,
                    WorkCompletion(wr.wr_id, status, WcOpcode.RDMA_WRITE, qp.qpn, wr.byte_len),
                )  # fmt: skip
            if status != WcStatus.SUCCESS:
                failed = True
                break
        if failed and qp.state != QpState.ERR:
            self.fail_qp(session, qp)
