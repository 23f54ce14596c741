"""The state of the OCP MRC provider of one agent, and what its two APIs (:mod:`.app_api`,
:mod:`.ctl_api`) share: the sessions and every QP, the profile stores, what the host gives QPs
and profiles, the delivery of completions, EV events and asynchronous events; the rows a command
of either API is (:class:`Command`: its handler, whether it needs a session and root).
"""

from __future__ import annotations

import contextlib
import enum
import errno
import logging
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from host.agent.control import CoreDriver, Deferred
from host.agent.ocp.abi import (
    FIRST_OCP_QPN,
    GID_TABLE_LEN,
    MAX_PD,
    QPN_MAX,
    U32_MAX,
    AsyncEvent,
    OcpError,
    QpState,
    Reply,
    WcOpcode,
    field_int,
)
from host.agent.ocp.cc_profiles import CcProfileStore
from host.agent.ocp.ev_profiles import EvProfileStore
from host.agent.ocp.objects import Cq, EvEvent, Mr, Qp, Session, WorkCompletion
from host.agent.ocp.server import OcpConnection
from host.transport.cc import CcProfile
from host.transport.config import StackConfig
from topologies import Fabric, Host
from topologies import Path as TopoPath

log = logging.getLogger("mrc.host.agent.ocp")


class AgentLike(CoreDriver, Protocol):
    """What the provider uses of :class:`host.agent.agent.Agent`: its transport
    (:class:`host.agent.control.CoreDriver`) and the rest below."""

    @property
    def fabric(self) -> Fabric: ...
    @property
    def host(self) -> Host: ...
    @property
    def cc_profile(self) -> CcProfile: ...
    def fit_cc(self, profile: CcProfile) -> CcProfile: ...


class Privilege(enum.Enum):
    """Who may run a command."""

    ANYONE = "anyone"
    ROOT = "root"
    ROOT_TO_MODIFY = "root to modify"  #: anyone queries, root modifies (``op: modify``)


@dataclass(frozen=True)
class Command:
    """A command of the provider's socket: its handler and who may run it. A handler without
    a session (``hello``, ``attach``) takes the connection instead."""

    name: str
    handler: Callable[[ProviderState, Any, Mapping[str, Any]], Reply | Deferred]
    privilege: Privilege = Privilege.ANYONE
    session: bool = True

    def needs_root(self, request: Mapping[str, Any]) -> bool:
        if self.privilege is Privilege.ROOT_TO_MODIFY:
            return request.get("op") == "modify"
        return self.privilege is Privilege.ROOT


class ProviderState:
    """The provider's sessions, QPs and profile stores, and the delivery of what happens."""

    def __init__(self, agent: AgentLike) -> None:
        self.agent = agent
        self.sessions: dict[int, Session] = {}
        self.qps: dict[int, tuple[Session, Qp]] = {}  # by QP number, every session
        self.next_session = 1
        self.next_lkey = 1
        # QP numbers start at a random place and are never handed out twice while the agent
        # runs: a peer still sending to a destroyed QP, or to one of an earlier run of the
        # agent, reaches no QP (docs/ocp-api.md, "Limits and isolation")
        self.first_qpn = FIRST_OCP_QPN + secrets.randbelow(QPN_MAX - FIRST_OCP_QPN + 1)
        self.next_qpn = self.first_qpn
        self.qpns_wrapped = False
        self.next_domain = 1  # protection domains: 0 is the agent's own QPs' and regions'
        self.core_cq = agent.context.create_cq()
        self.counters = {
            "recv_without_buffer": 0, "cq_overflows": 0, "flushed": 0, "access_faults": 0,
        }  # fmt: skip
        self.ev_profiles = EvProfileStore(
            agent.context, agent.now, agent.context.config.ev_count, self.peer_paths
        )
        self._paths: dict[str, list[TopoPath]] | None = None
        self.cc_profiles = CcProfileStore(
            lambda: agent.cc_profile, agent.fit_cc, agent.context.config.mtu, self._cc_users
        )
        #: every NIC address of the fabric -> (its host, its plane)
        self.nics_by_address: dict[bytes, tuple[str, int]] = {
            nic.address.packed: (host.name, nic.plane)
            for host in agent.fabric.hosts
            for nic in host.nics
        }

    def closed(self, conn: OcpConnection) -> None:
        """A connection went away: a session's main connection ends the session."""
        owner = conn.owner
        if isinstance(owner, Session) and owner.conn is conn:
            self.end_session(owner)
        elif isinstance(owner, tuple):
            session, channel = owner
            if channel is None:
                session.async_conn = None
            else:
                session.channels.pop(channel.id, None)
                for cq in session.cqs.values():
                    if cq.channel is channel:
                        cq.channel = None

    def end_session(self, session: Session) -> None:
        for qp in list(session.qps.values()):
            self.drop_qp(session, qp)
        for mr in session.mrs.values():
            self.drop_region(mr)
        self.sessions.pop(session.id, None)
        session.process.close()
        log.info("ocp: session %d of process %d ended", session.id, session.pid)

    def drop_region(self, mr: Mr) -> None:
        if mr.rkey:
            with contextlib.suppress(ValueError):
                self.agent.context.deregister_region(mr.rkey)
            mr.rkey = 0

    def drop_qp(self, session: Session, qp: Qp) -> None:
        self.release_core(qp)
        session.qps.pop(qp.qpn, None)
        self.qps.pop(qp.qpn, None)
        qp.send_cq.users -= 1
        qp.recv_cq.users -= 1

    def release_core(self, qp: Qp) -> None:
        if qp.core is not None:
            with contextlib.suppress(KeyError):
                self.agent.context.destroy_qp(qp.qpn)
            qp.core = None

    def new_qpn(self) -> int:
        """A QP number no QP of the core has and none had since the agent started: counting
        up from :attr:`first_qpn` (random), round to FIRST_OCP_QPN once, up to where it
        started."""
        core_qpns = {qp.qpn for qp in self.agent.context.qps}
        while True:
            qpn = self.next_qpn
            if qpn > QPN_MAX:
                if self.qpns_wrapped:
                    break
                self.qpns_wrapped = True
                qpn = self.next_qpn = FIRST_OCP_QPN
            if self.qpns_wrapped and qpn >= self.first_qpn:
                break
            self.next_qpn = qpn + 1
            if qpn not in core_qpns:
                return qpn
        raise OcpError(
            errno.ENOMEM, "create_qp: every QP number was handed out since the agent started"
        )

    def domain(self, session: Session, request: Mapping[str, Any]) -> int:
        """The protection domain of a request's field ``pd`` (the library's handle of an
        ``ibv_alloc_pd``; 0 or none: the session's default one) as a number of this host's,
        a new one the first time a session names it: no two sessions share one."""
        handle = field_int(request, "pd", 0, U32_MAX, default=0)
        number = session.domains.get(handle)
        if number is None:
            if len(session.domains) >= MAX_PD:
                raise OcpError(errno.ENOMEM, f"field 'pd': at most {MAX_PD} protection domains")
            number = session.domains[handle] = self.next_domain
            self.next_domain += 1
        return number

    def push_async(self, session: Session, event: AsyncEvent, **element: int) -> None:
        if session.async_conn is not None:
            session.async_conn.push({"event": "async", "type": int(event), **element})

    def kick(self) -> None:
        """The core has work (or a sooner timer): let the agent run it."""
        self.agent.after_core(self.agent.now())

    # -- what the host gives QPs and profiles -------------------------------------------------------

    def ports(self) -> list[Reply]:
        context = self.agent.context
        return [
            {
                "port": nic.plane + 1, "plane": nic.plane, "intf": nic.intf,
                "gid": nic.address.packed.hex(), "address": str(nic.address), "mac": nic.mac,
                "active": context.port_admin(nic.plane), "mtu": context.config.mtu,
                "gid_tbl_len": GID_TABLE_LEN,
            }
            for nic in self.agent.host.nics
        ]  # fmt: skip

    def _cc_users(self, profile_id: int) -> int:
        return sum(1 for _, qp in self.qps.values() if qp.cc_profile == profile_id)

    def peer_paths(self) -> dict[str, list[TopoPath]]:
        """The fabric model's paths from this host to every other host (computed once)."""
        if self._paths is None:
            fabric, me = self.agent.fabric, self.agent.host.name
            self._paths = {h.name: fabric.paths(me, h.name) for h in fabric.hosts if h.name != me}
        return self._paths

    # the QP state machine's view of the host (qp_states.QpHost)

    @property
    def host_name(self) -> str:
        return self.agent.host.name

    @property
    def host_config(self) -> StackConfig:
        return self.agent.context.config

    def peer_of(self, gid: bytes) -> str | None:
        found = self.nics_by_address.get(gid)
        return None if found is None else found[0]

    def check_ev_profile(self, profile_id: int) -> None:
        self.ev_profiles.check_usable(profile_id)

    def check_cc_profile(self, profile_id: int) -> None:
        self.cc_profiles.check_usable(profile_id)

    # -- completions ------------------------------------------------------------------------------

    def notify(self, cq: Cq) -> None:
        if cq.armed and cq.channel is not None:
            cq.armed = False
            cq.channel.conn.push({"event": "cq", "cq": cq.id})

    def complete(self, session: Session, cq: Cq, entry: WorkCompletion) -> None:
        if len(cq.entries) >= cq.cqe:
            self.counters["cq_overflows"] += 1
            if not cq.overflowed:
                cq.overflowed = True
                self.push_async(session, AsyncEvent.CQ_ERR, cq=cq.id)
            return
        cq.entries.append(entry)
        self.notify(cq)

    def deliver_ev_event(self, event: EvEvent) -> None:
        """An EV event to every EV event CQ of every session (a full one counts it dropped)."""
        for session in self.sessions.values():
            for cq in session.cqs.values():
                if cq.kind != "ev":
                    continue
                if len(cq.entries) >= cq.cqe:
                    cq.dropped += 1
                    continue
                cq.entries.append(EvEvent(event.profile_id, event.ev, event.port, cq.dropped,
                                          event.state, event.ev_hex))  # fmt: skip
                cq.dropped = 0
                self.notify(cq)

    def flush(self, session: Session, qp: Qp) -> None:
        """Every outstanding work request completes with IBV_WC_WR_FLUSH_ERR (QP to ERR/RESET)."""
        for wr in qp.sends:
            self.complete(
                session, qp.send_cq, WorkCompletion.flushed(wr.wr_id, WcOpcode.RDMA_WRITE, qp.qpn)
            )
            self.counters["flushed"] += 1
        qp.sends.clear()
        qp.by_token.clear()
        qp.wimm_inflight = 0
        for wr_id in qp.recvs:
            self.complete(
                session,
                qp.recv_cq,
                WorkCompletion.flushed(wr_id, WcOpcode.RECV_RDMA_WITH_IMM, qp.qpn),
            )
            self.counters["flushed"] += 1
        qp.recvs.clear()

    def fail_qp(self, session: Session, qp: Qp, event: AsyncEvent = AsyncEvent.QP_FATAL) -> None:
        """The QP goes to ERR on its own (a failed send, a WRITE_IMM without a receive, a
        write into the application's memory that failed: ``event``)."""
        qp.state = QpState.ERR
        self.flush(session, qp)
        self.push_async(session, event, qpn=qp.qpn)
