"""The agent side of the OCP MRC API: what ``lib_mrc.so`` and the testbed's ``libibverbs.so.1``
ask of a host's agent (docs/ocp-api.md).

:class:`OcpProvider` serves the agent's second socket (:mod:`host.agent.ocp_server`). Every
process that opens the emulated verbs device gets a session: its memory registrations (the
application's own buffers, read and written in place, :mod:`host.agent.ocp_mem`), completion
queues, completion channels, QPs and asynchronous events. The session ends with its connection.

QPs follow the RDMA state machine (RESET -> INIT -> RTR -> RTS, any -> ERR / RESET). A QP
becomes a transport-core QP at RTR, when its peer is known (``IBV_QP_AV``: the peer's GID is a
plane address of another testbed host; ``IBV_QP_DEST_QPN``), with a transport config of its own
made from its ACK timeout, retry counts and MPRs (:func:`core_config`; changed at once when the
application changes them). Work requests are RDMA WRITE and WRITE with immediate only; a
WRITE_IMM consumes a posted receive at the responder. Send completions are delivered in posting
order per QP, whatever order the core finishes the messages in (multipath). Numbers in requests and replies are the libibverbs values
(``ibv_qp_state``, ``ibv_wc_status``, ``ibv_wc_opcode``, ``ibv_wr_opcode``, ...); errors carry
an ``errno`` the library sets.

The controller API's side (root only where it changes the host): port administrative state,
EV event CQs, endpoint requests (connectionless EV probes and port status updates, by the
transport's :mod:`host.transport.endpoint`), and the EV format, EV and CC profiles of
:mod:`host.agent.ocp_profiles`, which QPs name at INIT.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import logging
import secrets
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from host.agent.control import Deferred
from host.agent.ocp_mem import AppMemory, MemoryAccessError, read_memory
from host.agent.ocp_profiles import CcProfileStore, ProfileError, ProfileStore, ev_value
from host.agent.ocp_server import OcpConnection, OcpServer, Reply
from host.transport import wire
from host.transport.api import Context
from host.transport.cc import CcProfile
from host.transport.config import ConfigError, StackConfig
from host.transport.endpoint import INTERNAL_REQ_IDS, EndpointError, EpRequest
from host.transport.events import (
    STATUS_OK,
    STATUS_REMOTE_ACCESS_ERROR,
    STATUS_RETRY_EXCEEDED,
    Completion,
    Event,
    EvStateChanged,
)
from host.transport.evs import (
    EvFormat,
    EvFormatProfile,
    EvState,
    ExplicitEvProfile,
    GeneratedEvProfile,
    Srv6EvProfile,
)
from topologies import Fabric, Host
from topologies import Path as TopoPath

log = logging.getLogger("mrc.host.agent.ocp")

# libibverbs values (infiniband/verbs.h)
QPS_RESET, QPS_INIT, QPS_RTR, QPS_RTS, QPS_SQD, QPS_SQE, QPS_ERR = range(7)
STATE_NAMES = ("RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR")
WC_SUCCESS = 0
WC_LOC_LEN_ERR = 1
WC_LOC_QP_OP_ERR = 2
WC_WR_FLUSH_ERR = 5
WC_REM_ACCESS_ERR = 10
WC_RETRY_EXC_ERR = 12
WC_OPCODE_RDMA_WRITE = 1
WC_OPCODE_RECV_RDMA_WITH_IMM = 129
WC_WITH_IMM = 1 << 1
WR_RDMA_WRITE = 0
WR_RDMA_WRITE_WITH_IMM = 1
SEND_SIGNALED = 1 << 1
SEND_INLINE = 1 << 3
ACCESS_REMOTE_WRITE = 1 << 1
SEND_OPS_WRITE = 1 << 0
SEND_OPS_WRITE_IMM = 1 << 1
EVENT_CQ_ERR = 0
EVENT_QP_FATAL = 1
EVENT_PORT_ACTIVE = 9
EVENT_PORT_ERR = 10
# MRC values (mrc.h)
MRC_PROTOCOL_VERSION_1 = 1
MRC_DEVICE_CAP_TRIM_NACK = 1
MRC_QP_CAP_TRIM_NACK_DEST_UNSUPPORTED = 1
MRC_QP_CAP_DYNAMIC_MPR = 2
MRC_QP_CAP_SVC_TIME_DEST_UNSUPPORTED = 4
# mrc_ctl.h EV states, as EV events report them; profile 0 reports GOOD and ASSUMED_BAD
EV_STATE_BITS = {"good": 1 << 0, "assumed_bad": 1 << 1, "denied": 1 << 2, "unknown": 1 << 31}
EV_EVENT_MASK = EV_STATE_BITS["good"] | EV_STATE_BITS["assumed_bad"]
# mrc_ctl.h endpoint operations (the core's names, by mrc_ctl_ep_op_type) and EV formats
EP_OP_EV_PROBE, EP_OP_PORT_STATUS_UPDATE = 0, 1
EP_OPS = ("ev_probe", "port_status_update")
EV_FMT_MODES = {1 << 0: EvFormat.STEV, 1 << 1: EvFormat.SRV6, 1 << 2: EvFormat.UDP}

# what the emulated device offers
MAX_WIMM = 1024  # WRITE_IMMs in flight per QP, as requestor and as responder
MAX_MPR = 255  # units of 128 PSNs
MPR_UNIT = 128  # PSNs per unit of mrc_qp_attr.mpr / mpr_dest (mrc.h)
MAX_CQE = 1 << 16
MAX_WR = 1 << 14
MAX_SGE = 16
MAX_INLINE = 4096
MAX_MESSAGE = 1 << 31
MAX_TIMEOUT = 24
MAX_RETRY_LINEAR = 7
MAX_RETRY_EXP = 25
MAX_BACKOFF_EXP = 31  # the backoff ceiling's largest exponent (StackConfig.max_backoff_exp)
FIRST_OCP_QPN = 0x10000
#: the attributes of a QP that its transport-core config carries (see :func:`core_config`)
CORE_ATTRS = ("timeout", "retry_linear", "retry_exp", "mpr", "mpr_dest")

_STATUS = {
    STATUS_OK: WC_SUCCESS,
    STATUS_REMOTE_ACCESS_ERROR: WC_REM_ACCESS_ERR,
    STATUS_RETRY_EXCEEDED: WC_RETRY_EXC_ERR,
}


def core_config(
    host: StackConfig, *, timeout: int, retry_linear: int, retry_exp: int, mpr: int, mpr_dest: int
) -> StackConfig:
    """The transport-core config of a QP with these ``mrc_qp_attr`` values: the host's
    (``host``, its context's) with the QP's ACK timeout, retry counts and PSN ranges.

    - ``timeout`` is the ACK timeout exponent t (1.024 us x 2^t, the floor of the adaptive
      timeout); the backoff ceiling keeps the host's number of doublings above it (never below
      the host's ceiling), so the exponential retries do back off;
    - ``retry_linear`` / ``retry_exp`` are the retry counts as they are;
    - ``mpr_dest`` (responder) x 128 PSNs is the receive window: PSNs further than that past the
      cumulative PSN are dropped;
    - ``mpr`` (requestor) x 128 PSNs bounds the PSNs in flight (next PSN - oldest
      unacknowledged), within the QP's own receive window less one PSN: the core's sender takes
      its own receive window for its peer's (``StackConfig`` keeps ``max_outstanding <
      rx_window``), so a QP whose ``mpr`` is not below its ``mpr_dest`` has ``mpr_dest`` x 128 - 1
      PSNs in flight at most.
    """
    rx_window = mpr_dest * MPR_UNIT
    doublings = host.max_backoff_exp - host.ack_timeout_exp
    return host.with_(
        ack_timeout_exp=timeout,
        max_backoff_exp=min(MAX_BACKOFF_EXP, max(host.max_backoff_exp, timeout + doublings)),
        retry_linear_cnt=retry_linear,
        retry_exp_cnt=retry_exp,
        rx_window=rx_window,
        max_outstanding=min(mpr * MPR_UNIT, rx_window - 1),
    )


class OcpError(Exception):
    """A request the provider refuses: ``errno`` for the library, a message naming the input."""

    def __init__(
        self, code: int, message: str, bad: int | None = None, extra: Reply | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.bad = bad
        self.extra = extra or {}

    def reply(self) -> Reply:
        out: Reply = {"ok": False, "errno": self.code, "error": str(self), **self.extra}
        if self.bad is not None:
            out["bad"] = self.bad
        return out


class AgentLike(Protocol):
    """What the provider uses of :class:`host.agent.agent.Agent`."""

    fabric: Fabric

    @property
    def host(self) -> Host: ...
    @property
    def context(self) -> Context: ...
    def now(self) -> float: ...
    def after_core(self, now: float) -> None: ...
    def add_waiter(self, check: Callable[[float], bool], deadline: float | None) -> None: ...


def ocp_socket_path(control: Path) -> Path:
    """The provider's socket next to the control socket: ``h0.sock`` -> ``h0.ocp.sock``."""
    return control.with_name(f"{control.stem}.ocp{control.suffix or '.sock'}")


# -- field helpers -------------------------------------------------------------------------------


def _int(req: Mapping[str, Any], name: str, low: int = 0, high: int = (1 << 64) - 1,
         default: int | None = None) -> int:  # fmt: skip
    value = req.get(name, default)
    if value is None:
        raise OcpError(errno.EINVAL, f"field '{name}' is required (an integer)")
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise OcpError(
            errno.EINVAL, f"field '{name}': expected an integer in {low}..{high}, got {value!r}"
        )
    return value


def _list(req: Mapping[str, Any], name: str) -> list[Any]:
    value = req.get(name)
    if not isinstance(value, list):
        raise OcpError(errno.EINVAL, f"field '{name}': expected a list")
    return value


# -- objects of a session ------------------------------------------------------------------------


@dataclass
class Mr:
    """An ``ibv_reg_mr`` registration: the application's buffer, in place."""

    lkey: int
    addr: int
    length: int
    access: int
    mem: AppMemory
    rkey: int = 0  # the core's rkey when remotely writable, else 0

    def covers(self, addr: int, length: int) -> bool:
        return self.addr <= addr and addr + length <= self.addr + self.length


@dataclass
class Channel:
    """A completion channel: a connection of the session that receives CQ events."""

    id: int
    conn: OcpConnection


@dataclass
class Cq:
    """A completion queue: work completions as lists in the order they were completed."""

    id: int
    cqe: int
    channel: Channel | None
    entries: deque[list[Any]] = field(default_factory=deque)  # EV events end with the EV (hex)
    armed: bool = False
    users: int = 0
    overflowed: bool = False
    kind: str = "wc"  # "wc": work completions; "ev": EV events (controller API)
    dropped: int = 0  # EV events dropped on a full EV event CQ since the last one delivered


@dataclass
class SendWr:
    """A posted send work request, until its completion is delivered in posting order."""

    wr_id: int
    imm: bool
    signaled: bool
    byte_len: int
    status: int | None = None


@dataclass
class Qp:
    """An MRC QP of a session."""

    qpn: int
    send_cq: Cq
    recv_cq: Cq
    max_send_wr: int
    max_recv_wr: int
    max_send_sge: int
    max_recv_sge: int
    max_inline: int
    sq_sig_all: bool
    send_ops: int
    state: int = QPS_RESET
    ev_profile: int | None = None
    cc_profile: int | None = None
    max_wimm: int = MAX_WIMM
    max_wimm_dest: int = MAX_WIMM
    mpr: int = MAX_MPR
    mpr_dest: int = MAX_MPR
    # until the application sets them: the host's (the provider passes its context's values)
    timeout: int = StackConfig.ack_timeout_exp
    retry_linear: int = StackConfig.retry_linear_cnt
    retry_exp: int = StackConfig.retry_exp_cnt
    cap: int = 0
    hint: int = 0
    dgid: str | None = None
    remote_host: str | None = None
    dest_qpn: int | None = None
    rq_psn: int = 0
    sq_psn: int = 0
    core: Any = None  # the transport core's QueuePair from RTR on
    sends: deque[SendWr] = field(default_factory=deque)
    by_token: dict[int, SendWr] = field(default_factory=dict)
    recvs: deque[int] = field(default_factory=deque)
    wimm_inflight: int = 0

    def describe(self) -> Reply:
        return {
            "qpn": self.qpn, "state": self.state, "ev_profile": self.ev_profile,
            "cc_profile": self.cc_profile, "max_wimm": self.max_wimm,
            "max_wimm_dest": self.max_wimm_dest, "mpr": self.mpr, "mpr_dest": self.mpr_dest,
            "timeout": self.timeout, "retry_linear": self.retry_linear,
            "retry_exp": self.retry_exp, "cap": self.cap, "hint": self.hint,
            "dgid": self.dgid or "", "dest_qpn": self.dest_qpn or 0, "rq_psn": self.rq_psn,
            "sq_psn": self.sq_psn, "remote_host": self.remote_host or "",
            "max_send_wr": self.max_send_wr, "max_recv_wr": self.max_recv_wr,
            "max_send_sge": self.max_send_sge, "max_recv_sge": self.max_recv_sge,
            "max_inline": self.max_inline, "sq_sig_all": int(self.sq_sig_all),
            "send_ops": self.send_ops, "send_cq": self.send_cq.id, "recv_cq": self.recv_cq.id,
            "sends_outstanding": len(self.sends), "recvs_posted": len(self.recvs),
            "wimm_inflight": self.wimm_inflight,
        }  # fmt: skip


@dataclass
class Session:
    """Everything one process opened."""

    id: int
    token: int
    conn: OcpConnection
    mrs: dict[int, Mr] = field(default_factory=dict)
    cqs: dict[int, Cq] = field(default_factory=dict)
    qps: dict[int, Qp] = field(default_factory=dict)
    channels: dict[int, Channel] = field(default_factory=dict)
    async_conn: OcpConnection | None = None
    next_id: int = 1

    @property
    def pid(self) -> int:
        return self.conn.pid

    def new_id(self) -> int:
        value = self.next_id
        self.next_id += 1
        return value


# -- the provider --------------------------------------------------------------------------------


class OcpProvider:
    """The OCP MRC API provider of one agent."""

    def __init__(self, agent: AgentLike, path: Path) -> None:
        self.agent = agent
        self.path = path
        self.server = OcpServer(path, self.dispatch, self.closed)
        self.sessions: dict[int, Session] = {}
        self.qps: dict[int, tuple[Session, Qp]] = {}  # by QP number, every session
        self.next_session = 1
        self.next_lkey = 1
        self.next_qpn = FIRST_OCP_QPN
        self.core_cq = agent.context.create_cq()
        self.port_enabled: dict[int, bool] = {nic.plane + 1: True for nic in agent.host.nics}
        self.counters = {"recv_without_buffer": 0, "cq_overflows": 0, "flushed": 0}
        self.profiles = ProfileStore(agent.context, agent.now, self._ev_count(), self._peer_paths)
        self._paths: dict[str, list[TopoPath]] | None = None
        self.cc_profiles = CcProfileStore(
            self._cc, self._fit_cc, agent.context.config.mtu, self._cc_users
        )
        #: every NIC address of the fabric -> (its host, its plane)
        self._nics_by_address: dict[bytes, tuple[str, int]] = {
            nic.address.packed: (host.name, nic.plane)
            for host in agent.fabric.hosts
            for nic in host.nics
        }
        self.table = {
            "hello": self.hello, "attach": self.attach, "query_device": self.query_device,
            "query_port": self.query_port, "reg_mr": self.reg_mr, "dereg_mr": self.dereg_mr,
            "create_cq": self.create_cq, "destroy_cq": self.destroy_cq, "poll_cq": self.poll_cq,
            "req_notify_cq": self.req_notify_cq, "create_qp": self.create_qp,
            "create_ev_cq": self.create_ev_cq, "ev_fmt_profile": self.ev_fmt_profile,
            "ev_profile": self.ev_profile, "cc_profile": self.cc_profile,
            "ep_probe": self.ep_probe,
            "destroy_qp": self.destroy_qp, "modify_qp": self.modify_qp,
            "query_qp": self.query_qp, "post_send": self.post_send,
            "post_recv": self.post_recv, "modify_port": self.modify_port,
            "stats": self.stats,
        }  # fmt: skip

    # -- plumbing ---------------------------------------------------------------------------------

    def dispatch(self, conn: OcpConnection, request: Mapping[str, Any]) -> Reply | Deferred:
        cmd = request["cmd"]
        handler = self.table.get(cmd)
        try:
            if handler is None:
                raise OcpError(
                    errno.EOPNOTSUPP,
                    f"unknown command {cmd!r} (commands: {', '.join(sorted(self.table))})",
                )
            if cmd not in ("hello", "attach"):
                if not isinstance(conn.owner, Session):
                    raise OcpError(
                        errno.EINVAL, f"{cmd}: say 'hello' first (no session on this connection)"
                    )
                return handler(conn.owner, request)  # type: ignore[operator]
            return handler(conn, request)  # type: ignore[operator]
        except OcpError as exc:
            return exc.reply()

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
            self._drop_qp(session, qp)
        for mr in session.mrs.values():
            self._drop_region(mr)
        self.sessions.pop(session.id, None)
        log.info("ocp: session %d of process %d ended", session.id, session.pid)

    def _drop_region(self, mr: Mr) -> None:
        if mr.rkey:
            with contextlib.suppress(ValueError):
                self.agent.context.deregister_region(mr.rkey)
            mr.rkey = 0

    def _drop_qp(self, session: Session, qp: Qp) -> None:
        self._release_core(qp)
        session.qps.pop(qp.qpn, None)
        self.qps.pop(qp.qpn, None)
        qp.send_cq.users -= 1
        qp.recv_cq.users -= 1

    def _release_core(self, qp: Qp) -> None:
        if qp.core is not None:
            with contextlib.suppress(KeyError):
                self.agent.context.destroy_qp(qp.qpn)
            qp.core = None

    def close(self) -> None:
        for session in list(self.sessions.values()):
            self.end_session(session)
        self.server.close()

    def _push_async(self, session: Session, event_type: int, **element: int) -> None:
        if session.async_conn is not None:
            session.async_conn.push({"event": "async", "type": event_type, **element})

    # -- sessions -----------------------------------------------------------------------------------

    def _ports(self) -> list[Reply]:
        mtu = self.agent.context.config.mtu
        return [
            {
                "port": nic.plane + 1, "plane": nic.plane, "intf": nic.intf,
                "gid": nic.address.packed.hex(), "address": str(nic.address), "mac": nic.mac,
                "active": self.port_enabled.get(nic.plane + 1, True), "mtu": mtu,
            }
            for nic in self.agent.host.nics
        ]  # fmt: skip

    def hello(self, conn: OcpConnection, request: Mapping[str, Any]) -> Reply:
        """Open a session for the calling process (one per connection)."""
        if conn.owner is not None:
            raise OcpError(errno.EINVAL, "hello: this connection already has a session")
        session = Session(self.next_session, secrets.randbits(48), conn)
        self.next_session += 1
        conn.owner = session
        self.sessions[session.id] = session
        log.info("ocp: session %d for process %d (uid %d)", session.id, conn.pid, conn.uid)
        return {
            "ok": True, "session": session.id, "token": session.token,
            "host": self.agent.host.name, "pid": conn.pid, "ports": self._ports(),
        }  # fmt: skip

    def attach(self, conn: OcpConnection, request: Mapping[str, Any]) -> Reply:
        """Join a session as its completion channel (``role: channel``) or async events."""
        sid = _int(request, "session")
        session = self.sessions.get(sid)
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
        raise OcpError(
            errno.EINVAL, f"attach: field 'role': expected channel or async, got {role!r}"
        )

    def query_device(self, session: Session, request: Mapping[str, Any]) -> Reply:
        return {
            "ok": True, "protocol_version": MRC_PROTOCOL_VERSION_1, "max_wimm": MAX_WIMM,
            "max_wimm_dest": MAX_WIMM, "max_mpr": MAX_MPR, "mpr_resolution": 1,
            "cap": MRC_DEVICE_CAP_TRIM_NACK, "max_cqe": MAX_CQE, "max_wr": MAX_WR,
            "max_sge": MAX_SGE, "ports": self._ports(), "ev_count": self._ev_count(),
            "cc": self._cc().name,
        }  # fmt: skip

    def query_port(self, session: Session, request: Mapping[str, Any]) -> Reply:
        port = _int(request, "port", 1, 255)
        for entry in self._ports():
            if entry["port"] == port:
                return {"ok": True, **entry}
        raise OcpError(
            errno.EINVAL,
            f"field 'port': {self.agent.host.name} has ports 1..{len(self.port_enabled)}, got {port}",
        )

    def modify_port(self, session: Session, request: Mapping[str, Any]) -> Reply:
        """Controller API: a port's administrative state (a disabled plane carries nothing:
        every EV of it on every QP of the host is DENIED; enabling releases them to UNKNOWN,
        probed back to GOOD)."""
        if session.conn.uid != 0:
            raise OcpError(
                errno.EPERM, "modify_port: the controller API needs root (CAP_NET_ADMIN)"
            )
        port = _int(request, "port", 1, 255)
        if port not in self.port_enabled:
            raise OcpError(errno.EINVAL, f"field 'port': no port {port} on {self.agent.host.name}")
        enabled = bool(_int(request, "enabled", 0, 1))
        if self.port_enabled[port] == enabled:
            return {"ok": True, "port": port, "active": enabled, "evs": 0}
        self.port_enabled[port] = enabled
        count = 0
        ctx = self.agent.context
        state = EvState.UNKNOWN if enabled else EvState.DENIED
        for qp in ctx.qps:
            for info in qp.ev_table.evs():
                if info.plane == port - 1:
                    ctx.set_ev_state(qp.qpn, info.ev, state, self.agent.now())
                    count += 1
        for session_ in self.sessions.values():
            self._push_async(session_, EVENT_PORT_ACTIVE if enabled else EVENT_PORT_ERR, port=port)
        self.agent.after_core(self.agent.now())
        return {"ok": True, "port": port, "active": enabled, "evs": count}

    def stats(self, session: Session, request: Mapping[str, Any]) -> Reply:
        return {
            "ok": True, "sessions": len(self.sessions), "qps": len(self.qps),
            "session": {"mrs": len(session.mrs), "cqs": len(session.cqs), "qps": len(session.qps)},
            "counters": dict(self.counters),
            "write_errors": sum(m.mem.write_errors for s in self.sessions.values() for m in s.mrs.values()),
        }  # fmt: skip

    # -- memory ---------------------------------------------------------------------------------------

    def reg_mr(self, session: Session, request: Mapping[str, Any]) -> Reply:
        addr = _int(request, "addr")
        length = _int(request, "length", 1, 1 << 40)
        access = _int(request, "access", 0, (1 << 32) - 1)
        if addr + length > 1 << 64:
            raise OcpError(
                errno.EINVAL, f"reg_mr: {length} bytes at {addr:#x} leave the address space"
            )
        try:  # the buffer must be mapped in the process: check both ends, as pinning would
            read_memory(session.pid, addr, 1)
            read_memory(session.pid, addr + length - 1, 1)
        except MemoryAccessError as exc:
            raise OcpError(errno.EFAULT, f"reg_mr: {exc.strerror}") from None
        mr = Mr(self.next_lkey, addr, length, access, AppMemory(session.pid, addr, length))
        self.next_lkey += 1
        if access & ACCESS_REMOTE_WRITE:
            mr.rkey = self.agent.context.register_region(addr, length, mr.mem).rkey
        session.mrs[mr.lkey] = mr
        return {"ok": True, "lkey": mr.lkey, "rkey": mr.rkey}

    def dereg_mr(self, session: Session, request: Mapping[str, Any]) -> Reply:
        lkey = _int(request, "lkey", 0, (1 << 32) - 1)
        mr = session.mrs.pop(lkey, None)
        if mr is None:
            raise OcpError(errno.EINVAL, f"dereg_mr: no memory region with lkey {lkey}")
        self._drop_region(mr)
        return {"ok": True}

    # -- completion queues ----------------------------------------------------------------------------

    def _cq(self, session: Session, request: Mapping[str, Any], name: str = "cq") -> Cq:
        cq_id = _int(request, name)
        cq = session.cqs.get(cq_id)
        if cq is None:
            raise OcpError(errno.EINVAL, f"field '{name}': no CQ {cq_id} in this context")
        return cq

    def create_cq(self, session: Session, request: Mapping[str, Any]) -> Reply:
        cqe = _int(request, "cqe", 1, MAX_CQE)
        channel_id = _int(request, "channel", default=0)
        channel = None
        if channel_id:
            channel = session.channels.get(channel_id)
            if channel is None:
                raise OcpError(errno.EINVAL, f"field 'channel': no completion channel {channel_id}")
        cq = Cq(session.new_id(), cqe, channel)
        session.cqs[cq.id] = cq
        return {"ok": True, "cq": cq.id, "cqe": cqe}

    def ev_fmt_profile(self, session: Session, request: Mapping[str, Any]) -> Reply:
        """Controller API: modify or query an EV format profile (:mod:`host.agent.ocp_profiles`)."""
        return self._profile_call(session, request, self.profiles.fmt_profile)

    def ev_profile(self, session: Session, request: Mapping[str, Any]) -> Reply:
        """Controller API: modify or query an EV profile (:mod:`host.agent.ocp_profiles`)."""
        return self._profile_call(session, request, self.profiles.ev_profile)

    def cc_profile(self, session: Session, request: Mapping[str, Any]) -> Reply:
        """Controller API: modify or query a CC profile (:mod:`host.agent.ocp_profiles`)."""
        return self._profile_call(session, request, self.cc_profiles.request)

    def _cc_users(self, profile_id: int) -> int:
        return sum(1 for _, qp in self.qps.values() if qp.cc_profile == profile_id)

    def _fit_cc(self, profile: CcProfile) -> CcProfile:
        """NSCC's fabric defaults under the fields a profile sets (as the agent's own)."""
        topology = getattr(self.agent, "topology", None)
        if topology is None:
            return profile
        from host.transport.cc.fabric import fabric_cc_profile

        return fabric_cc_profile(topology, profile)

    def _profile_call(self, session: Session, request: Mapping[str, Any], handler: Any) -> Reply:
        if request.get("op") == "modify" and session.conn.uid != 0:
            raise OcpError(
                errno.EPERM, f"{request['cmd']}: the controller API needs root (CAP_NET_ADMIN)"
            )
        try:
            reply: Reply = handler(request)
        except ProfileError as exc:
            raise OcpError(exc.code, f"{request['cmd']}: {exc}", extra=exc.extra) from None
        if request.get("op") == "modify":  # EV states may have changed: probes, events, timer
            self.agent.after_core(self.agent.now())
        return reply

    def ep_probe(self, session: Session, request: Mapping[str, Any]) -> Reply | Deferred:
        """Controller API: a batch of endpoint requests (``mrc_ctl_ep_batch_send_wait``), sent
        by the transport's connectionless endpoint (:mod:`host.transport.endpoint`): ``op`` 0
        EV probes, 1 port status updates, each from one of the host's GIDs to another testbed
        host's GID on the EV named, in traffic class ``tc``. Answered when every request is
        answered or at ``timeout`` (ns of real-fabric time): the responses in arrival order
        (``ETIMEDOUT`` with those received if some are missing)."""
        if session.conn.uid != 0:
            raise OcpError(errno.EPERM, "ep_probe: the controller API needs root (CAP_NET_ADMIN)")
        agent = self.agent
        op = _int(request, "op", 0, len(EP_OPS) - 1, default=0)
        tc = _int(request, "tc", 0, 63, default=wire.DSCP_CONTROL)
        timeout = _int(request, "timeout", 0, (1 << 32) - 1) * 1e-9
        reqs = _list(request, "reqs")
        requests = [self._ep_request(i, req, op) for i, req in enumerate(reqs)]
        ids = [r.req_id for r in requests]
        for i, req_id in enumerate(ids):
            if req_id in ids[:i]:
                raise OcpError(errno.EINVAL, f"ep_probe: request {i}: req_id {req_id} twice", i)
        if not requests:
            return {"ok": True, "responses": []}
        now = agent.now()
        try:
            batch = agent.context.ep_batch_send(
                EP_OPS[op], requests, dscp=tc, timeout=timeout, now=now
            )
        except EndpointError as exc:  # a req_id still waiting in another batch
            raise OcpError(errno.EINVAL, f"ep_probe: {exc}") from None
        agent.after_core(now)
        reply = Deferred()

        def check(at: float) -> bool:
            if reply.done:
                return True
            if not batch.complete() and at < batch.deadline_driver:
                return False
            responses = [
                [r.req_id, r.port, r.rtt_ns, int(r.adj_svc_time)]
                for r in agent.context.ep_batch_end(batch)
            ]
            missing = len(batch.requests) - len(responses)
            if missing:
                reply.resolve({
                    "ok": False, "errno": errno.ETIMEDOUT, "responses": responses,
                    "error": f"ep_probe: {missing} request(s) without a response in time",
                })  # fmt: skip
            else:
                reply.resolve({"ok": True, "responses": responses})
            return True

        agent.add_waiter(check, batch.deadline_driver)
        return reply

    def _ep_request(self, i: int, req: Any, op: int) -> EpRequest:
        """Request ``i`` of a batch: ``[req_id, sgid, dgid, format, ev, port, port_status]``
        (the last optional) as an endpoint request of the core; EINVAL naming ``i``."""
        host = self.agent.host
        fields = isinstance(req, list) and len(req) in (6, 7)
        if (
            not fields
            or not all(isinstance(req[k], str) for k in (1, 2, 4))
            or not all(
                isinstance(v, int) and not isinstance(v, bool)
                for k, v in enumerate(req)
                if k not in (1, 2, 4)
            )
        ):
            raise OcpError(
                errno.EINVAL,
                f"ep_probe: request {i}: expected [req_id, sgid, dgid, format, ev, port, port_status]",
                i,
            )
        req_id, sgid, dgid, fmt, ev_hex, port = req[:6]
        status = req[6] if len(req) == 7 else 0
        try:
            src, dst, value = bytes.fromhex(sgid), bytes.fromhex(dgid), bytes.fromhex(ev_hex)
        except ValueError:
            raise OcpError(
                errno.EINVAL, f"ep_probe: request {i}: GIDs and EV must be hex", i
            ) from None
        if len(src) != 16 or len(dst) != 16 or len(value) not in (16, 32):
            raise OcpError(
                errno.EINVAL, f"ep_probe: request {i}: GIDs are 16 bytes, the EV 16 or 32", i
            )
        if not 0 <= req_id < INTERNAL_REQ_IDS.start:
            raise OcpError(
                errno.EINVAL,
                f"ep_probe: request {i}: req_id {req_id}: expected 0..{INTERNAL_REQ_IDS.start - 1}",
                i,
            )
        peer = self._nics_by_address.get(dst)
        if peer is None or peer[0] == host.name:
            raise OcpError(
                errno.EINVAL,
                f"ep_probe: request {i}: destination GID is not another testbed host",
                i,
            )
        plane = peer[1]
        if not src.strip(b"\0"):  # no source GID: the host's NIC on the destination's plane
            src = host.nic(plane).address.packed
        own = {nic.address.packed: nic.plane for nic in host.nics}
        if src not in own:
            raise OcpError(
                errno.EINVAL,
                f"ep_probe: request {i}: source GID is not an address of {host.name}",
                i,
            )
        if own[src] != plane:
            raise OcpError(
                errno.EINVAL,
                f"ep_probe: request {i}: source GID is on port {own[src] + 1}, destination GID on port {plane + 1} (planes are disjoint)",
                i,
            )
        if port and port != plane + 1:
            raise OcpError(
                errno.EINVAL,
                f"ep_probe: request {i}: port {port} is not the source GID's ({plane + 1})",
                i,
            )
        mode = EV_FMT_MODES.get(fmt)
        if mode is None:
            raise OcpError(
                errno.EINVAL,
                f"ep_probe: request {i}: ev_fmt_mode {fmt}: expected STEV, SRV6 or UDP",
                i,
            )
        # SRV6 with a segment after the carrier is SRV6+SRH; the EV as mrc_ctl_ev_t holds it
        fmt_profile = EvFormatProfile(mode, srh=mode is EvFormat.SRV6 and any(value[16:]))
        ev = ev_value(value.hex(), fmt_profile)
        if mode is EvFormat.UDP and ev >> 16:
            raise OcpError(
                errno.EINVAL, f"ep_probe: request {i}: a UDP EV is a 16-bit source port", i
            )
        if op == EP_OP_PORT_STATUS_UPDATE:
            ports = sum(1 << (nic.plane + 1) for nic in host.nics)
            if not 0 <= status < 1 << 32 or status & ~ports:
                raise OcpError(
                    errno.EINVAL,
                    f"ep_probe: request {i}: port_status {status:#x}: {host.name} has ports 1..{len(host.nics)}",
                    i,
                )
        return EpRequest(req_id, ipaddress.IPv6Address(src), ipaddress.IPv6Address(dst), ev,
                         fmt_profile, plane + 1, status)  # fmt: skip

    def create_ev_cq(self, session: Session, request: Mapping[str, Any]) -> Reply:
        """Controller API: a CQ of EV events (state changes of the host's EVs to GOOD or
        ASSUMED_BAD, on every QP); a full one drops events and counts them exactly."""
        if session.conn.uid != 0:
            raise OcpError(
                errno.EPERM, "create_ev_cq: the controller API needs root (CAP_NET_ADMIN)"
            )
        reply = self.create_cq(session, request)
        session.cqs[reply["cq"]].kind = "ev"
        return reply

    def _on_ev_state(self, event: EvStateChanged) -> None:
        bit = EV_STATE_BITS.get(event.new, 0)
        core_id = getattr(event, "profile", 0)
        profile_id = self.profiles.ctl_id(core_id) if isinstance(core_id, int) else 0
        mask = self.profiles.event_mask(core_id) if profile_id else EV_EVENT_MASK
        if not bit & mask:
            return
        plane = getattr(event, "plane", None)
        if not isinstance(plane, int):  # the path label names it: "p1", "p1-s0"
            try:
                plane = int(event.path[1:].split("-")[0])
            except ValueError:
                plane = 0
        for session in self.sessions.values():
            for cq in session.cqs.values():
                if cq.kind != "ev":
                    continue
                if len(cq.entries) >= cq.cqe:
                    cq.dropped += 1
                    continue
                cq.entries.append([profile_id, event.ev & 0xFFFFFFFF, plane + 1, cq.dropped, bit,
                                   self._event_ev(core_id, event.ev)])  # fmt: skip
                cq.dropped = 0
                self._notify(cq)

    def _event_ev(self, core_id: object, ev: int) -> str:
        """An EV event's ``mrc_ctl_ev_t`` in hex (32 bytes): an EV that is a uSID carrier (an
        explicit SRV6 profile's, ``Srv6EvProfile``'s) in its 16 bytes, with an SRH the
        carrier and the segment; any other the 32-bit value in the first four bytes."""
        profile: Any = None
        if isinstance(core_id, int):
            with contextlib.suppress(KeyError):
                profile = self.agent.context.ev_profile(core_id).profile
        carriers = isinstance(profile, Srv6EvProfile) or (
            isinstance(profile, ExplicitEvProfile) and profile.carriers
        )
        if carriers:
            raw = ev.to_bytes(32 if profile.fmt.srh else 16, "big")
        else:
            raw = (ev & 0xFFFFFFFF).to_bytes(4, "big")
        return raw.ljust(32, b"\0").hex()

    def destroy_cq(self, session: Session, request: Mapping[str, Any]) -> Reply:
        cq = self._cq(session, request)
        if cq.users:
            raise OcpError(errno.EBUSY, f"destroy_cq: CQ {cq.id} is used by {cq.users} QP(s)")
        del session.cqs[cq.id]
        return {"ok": True}

    def poll_cq(self, session: Session, request: Mapping[str, Any]) -> Reply:
        cq = self._cq(session, request)
        n = _int(request, "n", 0, MAX_CQE)
        out: list[list[Any]] = []
        while cq.entries and len(out) < n:
            out.append(cq.entries.popleft())
        return {"ok": True, "wc": out}

    def req_notify_cq(self, session: Session, request: Mapping[str, Any]) -> Reply:
        cq = self._cq(session, request)
        if cq.channel is None:
            raise OcpError(errno.EINVAL, f"req_notify_cq: CQ {cq.id} has no completion channel")
        cq.armed = True
        if cq.entries:  # completions already waiting: notify at once
            self._notify(cq)
        return {"ok": True}

    def _notify(self, cq: Cq) -> None:
        if cq.armed and cq.channel is not None:
            cq.armed = False
            cq.channel.conn.push({"event": "cq", "cq": cq.id})

    def _complete(self, session: Session, cq: Cq, entry: list[int]) -> None:
        if len(cq.entries) >= cq.cqe:
            self.counters["cq_overflows"] += 1
            if not cq.overflowed:
                cq.overflowed = True
                self._push_async(session, EVENT_CQ_ERR, cq=cq.id)
            return
        cq.entries.append(entry)
        self._notify(cq)

    # -- QPs ----------------------------------------------------------------------------------------

    def _qp(self, session: Session, request: Mapping[str, Any]) -> Qp:
        qpn = _int(request, "qpn", 0, (1 << 24) - 1)
        qp = session.qps.get(qpn)
        if qp is None:
            raise OcpError(errno.EINVAL, f"field 'qpn': no QP {qpn:#x} in this context")
        return qp

    def create_qp(self, session: Session, request: Mapping[str, Any]) -> Reply:
        send_cq = self._cq(session, request, "send_cq")
        recv_cq = self._cq(session, request, "recv_cq")
        if send_cq.kind != "wc" or recv_cq.kind != "wc":
            raise OcpError(errno.EINVAL, "create_qp: an EV event CQ cannot take work completions")
        ops = _int(request, "send_ops", 0, (1 << 64) - 1, default=0)
        if ops & ~(SEND_OPS_WRITE | SEND_OPS_WRITE_IMM):
            raise OcpError(
                errno.EOPNOTSUPP,
                f"field 'send_ops_flags' {ops:#x}: MRC QPs do RDMA WRITE and WRITE_WITH_IMM only",
            )
        version = _int(request, "protocol_version", 0, (1 << 32) - 1, default=0)
        if version not in (0, MRC_PROTOCOL_VERSION_1):
            raise OcpError(
                errno.EINVAL, f"field 'protocol_version': expected 0 or 1, got {version}"
            )
        core_qpns = {qp.qpn for qp in self.agent.context.qps}
        while self.next_qpn in self.qps or self.next_qpn in core_qpns:
            self.next_qpn += 1
        if self.next_qpn >= 1 << 24:
            raise OcpError(errno.ENOMEM, "create_qp: QP numbers exhausted")
        qp = self._with_host_attrs(Qp(
            self.next_qpn, send_cq, recv_cq,
            max_send_wr=_int(request, "max_send_wr", 1, MAX_WR),
            max_recv_wr=_int(request, "max_recv_wr", 0, MAX_WR, default=0),
            max_send_sge=_int(request, "max_send_sge", 0, MAX_SGE, default=1),
            max_recv_sge=_int(request, "max_recv_sge", 0, MAX_SGE, default=1),
            max_inline=_int(request, "max_inline", 0, MAX_INLINE, default=0),
            sq_sig_all=bool(_int(request, "sq_sig_all", 0, 1 << 31, default=0)),
            send_ops=ops or (SEND_OPS_WRITE | SEND_OPS_WRITE_IMM),
        ))  # fmt: skip
        self.next_qpn += 1
        session.qps[qp.qpn] = qp
        self.qps[qp.qpn] = (session, qp)
        send_cq.users += 1
        recv_cq.users += 1
        return {"ok": True, **qp.describe()}

    def destroy_qp(self, session: Session, request: Mapping[str, Any]) -> Reply:
        self._drop_qp(session, self._qp(session, request))
        self.agent.after_core(self.agent.now())
        return {"ok": True}

    def query_qp(self, session: Session, request: Mapping[str, Any]) -> Reply:
        return {"ok": True, **self._qp(session, request).describe()}

    def modify_qp(self, session: Session, request: Mapping[str, Any]) -> Reply:
        """Attributes and state transitions (docs/ocp-api.md, "QP state machine")."""
        qp = self._qp(session, request)
        if "cur_state" in request and _int(request, "cur_state", 0, 6) != qp.state:
            raise OcpError(
                errno.EINVAL,
                f"modify_qp: IBV_QP_CUR_STATE says {STATE_NAMES[request['cur_state']]}, "
                f"QP {qp.qpn:#x} is {STATE_NAMES[qp.state]}",
            )
        new = _int(request, "state", 0, 6) if "state" in request else qp.state
        if new in (QPS_SQD, QPS_SQE):
            raise OcpError(
                errno.EINVAL, f"modify_qp: state {STATE_NAMES[new]} is not supported by MRC QPs"
            )
        old = qp.state
        allowed = {
            (QPS_RESET, QPS_INIT), (QPS_INIT, QPS_INIT), (QPS_INIT, QPS_RTR),
            (QPS_RTR, QPS_RTS), (QPS_RTS, QPS_RTS),
        }  # fmt: skip
        if new not in (QPS_RESET, QPS_ERR) and (old, new) not in allowed:
            raise OcpError(
                errno.EINVAL,
                f"modify_qp: QP {qp.qpn:#x} cannot go from {STATE_NAMES[old]} to {STATE_NAMES[new]} "
                "(RESET -> INIT -> RTR -> RTS; any -> RESET or ERR)",
            )
        # which attributes each transition takes (mrc.h: INIT profiles and hint; RTR the
        # responder's and the peer; RTS the requestor's)
        by_target = {
            QPS_INIT: {"ev_profile", "cc_profile", "hint"},
            QPS_RTR: {"max_wimm_dest", "mpr_dest", "cap", "dgid", "dest_qpn", "rq_psn",
                      "max_wimm", "mpr", "sq_psn"},
            QPS_RTS: {"max_wimm", "mpr", "timeout", "retry_linear", "retry_exp", "sq_psn", "cap"},
            QPS_RESET: set(), QPS_ERR: set(),
        }  # fmt: skip
        given = set(request) - {"cmd", "id", "qpn", "state", "cur_state"}
        if new == old and new == QPS_RTS:
            by_target[QPS_RTS] |= {"max_wimm", "timeout", "retry_linear", "retry_exp"}
        extra = sorted(given - by_target[new])
        if extra:
            raise OcpError(
                errno.EINVAL,
                f"modify_qp: attribute '{extra[0]}' cannot be set on the way to "
                f"{STATE_NAMES[new]} (takes: {', '.join(sorted(by_target[new])) or 'none'})",
            )
        if new == QPS_INIT and old == QPS_RESET:
            for name in ("ev_profile", "cc_profile"):
                if name not in request:
                    raise OcpError(
                        errno.EINVAL,
                        f"modify_qp: RESET -> INIT needs the {name.replace('_', ' ')} id",
                    )
        values: dict[str, Any] = {}
        if "ev_profile" in request:
            try:
                self.profiles.check_usable(_int(request, "ev_profile"))
            except ProfileError as exc:
                raise OcpError(exc.code, f"modify_qp: {exc}") from None
            values["ev_profile"] = request["ev_profile"]
        if "cc_profile" in request:
            try:
                self.cc_profiles.check_usable(_int(request, "cc_profile"))
            except ProfileError as exc:
                raise OcpError(exc.code, f"modify_qp: {exc}") from None
            values["cc_profile"] = request["cc_profile"]
        limits = {
            "max_wimm": MAX_WIMM, "max_wimm_dest": MAX_WIMM, "mpr": MAX_MPR, "mpr_dest": MAX_MPR,
            "timeout": MAX_TIMEOUT, "retry_linear": MAX_RETRY_LINEAR, "retry_exp": MAX_RETRY_EXP,
            "dest_qpn": (1 << 24) - 1, "rq_psn": (1 << 24) - 1, "sq_psn": (1 << 24) - 1,
            "hint": (1 << 32) - 1,
        }  # fmt: skip
        for name, high in limits.items():
            if name in request:
                values[name] = _int(request, name, 0, high)
        for name in ("max_wimm", "max_wimm_dest", "mpr", "mpr_dest"):
            if values.get(name) == 0:
                raise OcpError(errno.EINVAL, f"modify_qp: {name} must be at least 1")
        if "dest_qpn" in values and values["dest_qpn"] == 0:
            raise OcpError(errno.EINVAL, "modify_qp: dest QP number 0 is not a QP")
        if "cap" in request:
            cap = _int(request, "cap", 0, (1 << 32) - 1)
            if cap & ~MRC_QP_CAP_TRIM_NACK_DEST_UNSUPPORTED & ~MRC_QP_CAP_SVC_TIME_DEST_UNSUPPORTED:
                raise OcpError(
                    errno.EINVAL,
                    f"modify_qp: cap {cap:#x}: the device does not advertise dynamic MPR "
                    "(MRC_DEVICE_CAP_DYNAMIC_MPR)",
                )
            values["cap"] = cap
        remote_host = None
        if "dgid" in request:
            dgid = request["dgid"]
            try:
                raw = bytes.fromhex(dgid) if isinstance(dgid, str) else b""
            except ValueError:
                raw = b""
            if len(raw) != 16:
                raise OcpError(
                    errno.EINVAL, f"modify_qp: field 'dgid': expected 32 hex digits, got {dgid!r}"
                )
            remote_host, _ = self._nics_by_address.get(raw, (None, 0))
            if remote_host is None:
                raise OcpError(
                    errno.EINVAL,
                    f"modify_qp: destination GID {ipaddress.IPv6Address(raw)} is not a plane "
                    "address of a testbed host",
                )
            if remote_host == self.agent.host.name:
                raise OcpError(
                    errno.EINVAL,
                    "modify_qp: a QP to its own host is not supported (no loopback path)",
                )
            values["dgid"] = raw.hex()
        if new == QPS_RTR and old == QPS_INIT and (remote_host is None or "dest_qpn" not in values):
            raise OcpError(
                errno.EINVAL,
                "modify_qp: INIT -> RTR needs IBV_QP_AV (the peer's GID) and IBV_QP_DEST_QPN",
            )
        # the transport core's config of the QP: made at RTR, changed with the attributes it carries
        config: StackConfig | None = None
        makes_core = new == QPS_RTR and old == QPS_INIT
        if makes_core or (
            qp.core is not None and new != QPS_ERR and any(name in values for name in CORE_ATTRS)
        ):
            attrs = {name: values.get(name, getattr(qp, name)) for name in CORE_ATTRS}
            try:
                config = core_config(self.agent.context.config, **attrs)
            except ConfigError as exc:
                raise OcpError(errno.EINVAL, f"modify_qp: {exc}") from None

        # checks passed: apply
        if new == QPS_RESET:
            self._flush(session, qp)
            self._release_core(qp)
            fresh = self._with_host_attrs(Qp(
                qp.qpn, qp.send_cq, qp.recv_cq, qp.max_send_wr, qp.max_recv_wr, qp.max_send_sge,
                qp.max_recv_sge, qp.max_inline, qp.sq_sig_all, qp.send_ops,
            ))  # fmt: skip
            session.qps[qp.qpn] = fresh
            self.qps[qp.qpn] = (session, fresh)
            return {"ok": True, **fresh.describe()}
        for name, value in values.items():
            setattr(qp, name, value)
        if remote_host is not None:
            qp.remote_host = remote_host
        reconfigured = False
        if makes_core:
            assert config is not None
            self._make_core(qp, config)
        elif config is not None:
            # RTS -> RTS (or RTR -> RTS) with new timeout, retry counts or mpr: at once
            self.agent.context.configure_qp(qp.qpn, config)
            reconfigured = True
        if (
            new == QPS_RTS
            and old == QPS_RTR
            and qp.core is not None
            and qp.sq_psn != getattr(qp.core, "_psn_origin", qp.sq_psn)
        ):
            try:
                qp.core.connect(qp.dest_qpn, send_psn=qp.sq_psn, expect_psn=qp.rq_psn)
            except RuntimeError:
                raise OcpError(
                    errno.EINVAL,
                    "modify_qp: the peer's first packets already arrived: give IBV_QP_SQ_PSN "
                    "with the RTR transition",
                ) from None
        qp.state = new
        if new == QPS_ERR and old != QPS_ERR:
            self._flush(session, qp)
        if reconfigured:
            self.agent.after_core(self.agent.now())  # the ACK timeout may now be due sooner
        return {"ok": True, **qp.describe()}

    def _cc(self) -> CcProfile:
        """The host's CC profile (profile 0): the agent's, as ``mrc-host cc-profile`` sets it."""
        cc = getattr(self.agent, "cc_profile", None)
        if isinstance(cc, CcProfile):
            return cc
        options = getattr(self.agent, "options", None)
        if options is not None:
            return CcProfile(options.cc, dict(options.cc_params))
        return CcProfile("ecn-delay", {})

    def _peer_paths(self) -> dict[str, list[TopoPath]]:
        """The fabric model's paths from this host to every other host (computed once)."""
        if self._paths is None:
            fabric, me = self.agent.fabric, self.agent.host.name
            self._paths = {h.name: fabric.paths(me, h.name) for h in fabric.hosts if h.name != me}
        return self._paths

    def _ev_count(self) -> int:
        """EVs of the host's EV profile (profile 0): the agent's ``--ev-count``."""
        options = getattr(self.agent, "options", None)
        if options is not None:
            return int(options.ev_count)
        return int(self.agent.context.config.ev_count)

    def _with_host_attrs(self, qp: Qp) -> Qp:
        """``qp`` (new or reset) with the host's ACK timeout and retry counts, its context's."""
        config = self.agent.context.config
        qp.timeout = config.ack_timeout_exp
        qp.retry_linear = config.retry_linear_cnt
        qp.retry_exp = config.retry_exp_cnt
        return qp

    def _make_core(self, qp: Qp, config: StackConfig) -> None:
        agent = self.agent
        assert qp.remote_host is not None and qp.dest_qpn is not None
        policy = "no-trim-nack" if qp.cap & MRC_QP_CAP_TRIM_NACK_DEST_UNSUPPORTED else "mrc"
        try:
            self.cc_profiles.check_usable(qp.cc_profile or 0)
        except ProfileError as exc:
            raise OcpError(exc.code, f"modify_qp: {exc}") from None
        cc = self.cc_profiles.profile_for(qp.cc_profile or 0)
        ev_profile: Any = GeneratedEvProfile(count=self._ev_count())
        if qp.ev_profile:
            try:
                self.profiles.check_usable(qp.ev_profile)
                self.profiles.check_destination(qp.ev_profile, qp.remote_host)
            except ProfileError as exc:
                raise OcpError(exc.code, f"modify_qp: {exc}") from None
            ev_profile = self.profiles.core_profile(qp.ev_profile)
        try:
            core = agent.context.create_qp(
                qp.remote_host, agent.fabric.paths(agent.host.name, qp.remote_host),
                cq=self.core_cq, policy=policy, cc=cc, ev_profile=ev_profile, qpn=qp.qpn,
                config=config,
            )  # fmt: skip
        except ValueError as exc:  # an EV profile the paths to this peer cannot take
            raise OcpError(errno.EINVAL, f"modify_qp: EV profile {qp.ev_profile}: {exc}") from None
        core.connect(qp.dest_qpn, send_psn=qp.sq_psn, expect_psn=qp.rq_psn)
        for port, enabled in self.port_enabled.items():
            if not enabled:
                for info in core.ev_table.evs():
                    if info.plane == port - 1:
                        agent.context.set_ev_state(qp.qpn, info.ev, EvState.DENIED, agent.now())
        qp.core = core

    def _flush(self, session: Session, qp: Qp) -> None:
        """Every outstanding work request completes with IBV_WC_WR_FLUSH_ERR (QP to ERR/RESET)."""
        for wr in qp.sends:
            self._complete(
                session,
                qp.send_cq,
                [wr.wr_id, WC_WR_FLUSH_ERR, WC_OPCODE_RDMA_WRITE, 0, 0, qp.qpn, 0],
            )
            self.counters["flushed"] += 1
        qp.sends.clear()
        qp.by_token.clear()
        qp.wimm_inflight = 0
        for wr_id in qp.recvs:
            self._complete(
                session,
                qp.recv_cq,
                [wr_id, WC_WR_FLUSH_ERR, WC_OPCODE_RECV_RDMA_WITH_IMM, 0, 0, qp.qpn, 0],
            )
            self.counters["flushed"] += 1
        qp.recvs.clear()

    # -- work requests ------------------------------------------------------------------------------

    def _gather(self, session: Session, qp: Qp, sges: Any, inline: bool, index: int) -> bytes:
        if not isinstance(sges, list) or len(sges) > qp.max_send_sge:
            raise OcpError(
                errno.EINVAL,
                f"post_send: WR {index}: at most {qp.max_send_sge} SGEs (max_send_sge)",
                index,
            )
        parts = []
        total = 0
        for sge in sges:
            if not (
                isinstance(sge, list) and len(sge) == 3 and all(isinstance(v, int) for v in sge)
            ):
                raise OcpError(
                    errno.EINVAL, f"post_send: WR {index}: SGE must be [addr, length, lkey]", index
                )
            addr, length, lkey = sge
            if not inline:
                mr = session.mrs.get(lkey)
                if mr is None:
                    raise OcpError(
                        errno.EINVAL,
                        f"post_send: WR {index}: lkey {lkey:#x} is not a registered memory region",
                        index,
                    )
                if not mr.covers(addr, length):
                    raise OcpError(
                        errno.EINVAL,
                        f"post_send: WR {index}: {length} bytes at {addr:#x} are outside memory region "
                        f"[{mr.addr:#x}, {mr.addr + mr.length:#x}) of lkey {lkey:#x}",
                        index,
                    )
            total += length
            if total > MAX_MESSAGE:
                raise OcpError(
                    errno.EINVAL, f"post_send: WR {index}: more than {MAX_MESSAGE} bytes", index
                )
            try:
                parts.append(bytes(read_memory(session.pid, addr, length)))
            except MemoryAccessError as exc:
                raise OcpError(
                    errno.EFAULT, f"post_send: WR {index}: {exc.strerror}", index
                ) from None
        if inline and total > qp.max_inline:
            raise OcpError(
                errno.EINVAL,
                f"post_send: WR {index}: {total} inline bytes, max_inline_data is {qp.max_inline}",
                index,
            )
        return b"".join(parts)

    def post_send(self, session: Session, request: Mapping[str, Any]) -> Reply:
        qp = self._qp(session, request)
        wrs = _list(request, "wrs")
        if qp.state == QPS_ERR:
            for wr in wrs:
                wr_id = wr[0] if isinstance(wr, list) and wr and isinstance(wr[0], int) else 0
                self._complete(
                    session,
                    qp.send_cq,
                    [wr_id, WC_WR_FLUSH_ERR, WC_OPCODE_RDMA_WRITE, 0, 0, qp.qpn, 0],
                )
            return {"ok": True, "posted": 0, "flushed": len(wrs)}
        if qp.state != QPS_RTS or qp.core is None:
            raise OcpError(
                errno.EINVAL,
                f"post_send: QP {qp.qpn:#x} is {STATE_NAMES[qp.state]}, sends need RTS",
                0,
            )
        posted = 0
        try:
            for index, wr in enumerate(wrs):
                if not (
                    isinstance(wr, list)
                    and len(wr) == 7
                    and all(isinstance(v, int) for v in wr[:6])
                ):
                    raise OcpError(
                        errno.EINVAL,
                        f"post_send: WR {index}: expected [wr_id, opcode, flags, imm, remote_addr, rkey, sges]",
                        index,
                    )
                wr_id, opcode, flags, imm, remote_addr, rkey, sges = wr
                if opcode == WR_RDMA_WRITE and qp.send_ops & SEND_OPS_WRITE:
                    is_imm = False
                elif opcode == WR_RDMA_WRITE_WITH_IMM and qp.send_ops & SEND_OPS_WRITE_IMM:
                    is_imm = True
                else:
                    raise OcpError(
                        errno.EINVAL,
                        f"post_send: WR {index}: opcode {opcode} not allowed (MRC: IBV_WR_RDMA_WRITE "
                        "and IBV_WR_RDMA_WRITE_WITH_IMM, as enabled by send_ops_flags)",
                        index,
                    )
                if len(qp.sends) >= qp.max_send_wr:
                    raise OcpError(
                        errno.ENOMEM,
                        f"post_send: WR {index}: send queue full ({qp.max_send_wr} outstanding, max_send_wr)",
                        index,
                    )
                if is_imm and qp.wimm_inflight >= qp.max_wimm:
                    raise OcpError(
                        errno.ENOMEM,
                        f"post_send: WR {index}: {qp.wimm_inflight} WRITE_IMMs in flight, max_wimm is {qp.max_wimm}",
                        index,
                    )
                if not 0 <= rkey < 1 << 32 or not 0 <= remote_addr < 1 << 64:
                    raise OcpError(
                        errno.EINVAL,
                        f"post_send: WR {index}: bad rkey or remote address",
                        index,
                    )
                data = self._gather(session, qp, sges, bool(flags & SEND_INLINE), index)
                record = SendWr(
                    wr_id, is_imm, qp.sq_sig_all or bool(flags & SEND_SIGNALED), len(data)
                )
                token = id(record)
                if is_imm:
                    qp.core.post_write_imm(data, remote_addr, rkey, imm & 0xFFFFFFFF, wr_id=token)
                    qp.wimm_inflight += 1
                else:
                    qp.core.post_write(data, remote_addr, rkey, wr_id=token)
                qp.sends.append(record)
                qp.by_token[token] = record
                posted += 1
        finally:
            if posted:
                self.agent.after_core(self.agent.now())
        return {"ok": True, "posted": posted}

    def post_recv(self, session: Session, request: Mapping[str, Any]) -> Reply:
        qp = self._qp(session, request)
        wrs = _list(request, "wrs")
        if qp.state == QPS_RESET:
            raise OcpError(
                errno.EINVAL,
                f"post_recv: QP {qp.qpn:#x} is RESET, receives need INIT or later",
                0,
            )
        for index, wr in enumerate(wrs):
            if not (
                isinstance(wr, list)
                and len(wr) == 2
                and isinstance(wr[0], int)
                and isinstance(wr[1], list)
            ):
                raise OcpError(
                    errno.EINVAL, f"post_recv: WR {index}: expected [wr_id, sges]", index
                )
            if len(wr[1]) > qp.max_recv_sge:
                raise OcpError(
                    errno.EINVAL,
                    f"post_recv: WR {index}: at most {qp.max_recv_sge} SGEs (max_recv_sge)",
                    index,
                )
            for sge in wr[1]:
                ok = (
                    isinstance(sge, list) and len(sge) == 3 and all(isinstance(v, int) for v in sge)
                )
                mr = session.mrs.get(sge[2]) if ok else None
                if mr is None or not mr.covers(sge[0], sge[1]):
                    raise OcpError(
                        errno.EINVAL,
                        f"post_recv: WR {index}: SGE {sge!r} is not inside a registered memory region",
                        index,
                    )
            if qp.state == QPS_ERR:
                self._complete(
                    session,
                    qp.recv_cq,
                    [wr[0], WC_WR_FLUSH_ERR, WC_OPCODE_RECV_RDMA_WITH_IMM, 0, 0, qp.qpn, 0],
                )
                continue
            limit = min(qp.max_recv_wr, qp.max_wimm_dest)
            if len(qp.recvs) >= limit:
                raise OcpError(
                    errno.ENOMEM,
                    f"post_recv: WR {index}: {len(qp.recvs)} receives posted, the limit is {limit} (max_recv_wr, max_wimm_dest)",
                    index,
                )
            qp.recvs.append(wr[0])
        return {"ok": True}

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
        if isinstance(event, EvStateChanged):
            self._on_ev_state(event)
        return False  # the agent logs it too

    def _on_recv(self, session: Session, qp: Qp, done: Completion) -> None:
        imm = (done.imm or 0) & 0xFFFFFFFF
        if qp.state == QPS_ERR:
            return
        if not qp.recvs:
            # MRC has no RNR: a WRITE_IMM needs a receive posted beforehand
            self.counters["recv_without_buffer"] += 1
            self._complete(
                session,
                qp.recv_cq,
                [
                    0,
                    WC_LOC_QP_OP_ERR,
                    WC_OPCODE_RECV_RDMA_WITH_IMM,
                    done.byte_len,
                    imm,
                    qp.qpn,
                    WC_WITH_IMM,
                ],
            )
            qp.state = QPS_ERR
            self._flush(session, qp)
            self._push_async(session, EVENT_QP_FATAL, qpn=qp.qpn)
            return
        wr_id = qp.recvs.popleft()
        status = _STATUS.get(done.status, WC_LOC_QP_OP_ERR)
        self._complete(
            session,
            qp.recv_cq,
            [
                wr_id,
                status,
                WC_OPCODE_RECV_RDMA_WITH_IMM,
                done.byte_len,
                imm,
                qp.qpn,
                WC_WITH_IMM,
            ],
        )

    def _on_send(self, session: Session, qp: Qp, done: Completion) -> None:
        record = qp.by_token.pop(done.wr_id, None)
        if record is None:
            return  # flushed already
        record.status = _STATUS.get(done.status, WC_LOC_QP_OP_ERR)
        failed = False
        while qp.sends and qp.sends[0].status is not None:
            wr = qp.sends.popleft()
            status = wr.status if wr.status is not None else WC_SUCCESS
            if wr.imm:
                qp.wimm_inflight -= 1
            if wr.signaled or status != WC_SUCCESS:
                flags = 0  # wc_flags WITH_IMM is for the responder's completion only
                self._complete(
                    session,
                    qp.send_cq,
                    [wr.wr_id, status, WC_OPCODE_RDMA_WRITE, wr.byte_len, 0, qp.qpn, flags],
                )
            if status != WC_SUCCESS:
                failed = True
                break
        if failed and qp.state != QPS_ERR:
            qp.state = QPS_ERR
            self._flush(session, qp)
            self._push_async(session, EVENT_QP_FATAL, qpn=qp.qpn)
