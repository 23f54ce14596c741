"""The objects of a session of the OCP MRC provider: memory registrations, completion channels
and queues, QPs and their posted work requests, and the entries a CQ holds -- work
completions (:class:`WorkCompletion`) and, on an EV event CQ, EV events (:class:`EvEvent`),
each with its wire form (the list ``poll_cq`` replies with) written once.
"""

from __future__ import annotations

import errno
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from host.agent.ocp.abi import (
    MAX_MPR,
    MAX_WIMM,
    QPN_MAX,
    EvStateBit,
    OcpError,
    QpState,
    Reply,
    SendOps,
    WcFlag,
    WcOpcode,
    WcStatus,
    field_int,
)
from host.agent.ocp.mem import AppMemory, AppProcess
from host.agent.ocp.server import OcpConnection
from host.transport.config import StackConfig

if TYPE_CHECKING:
    from host.transport.qp import QueuePair


@dataclass(frozen=True)
class WorkCompletion:
    """An ``ibv_wc``: on the wire ``[wr_id, status, opcode, byte_len, imm_data, qp_num,
    wc_flags]`` (capi/mrc.c reads it in that order)."""

    wr_id: int
    status: WcStatus
    opcode: WcOpcode
    qpn: int
    byte_len: int = 0
    imm: int = 0
    flags: WcFlag = WcFlag(0)

    @classmethod
    def flushed(cls, wr_id: int, opcode: WcOpcode, qpn: int) -> WorkCompletion:
        """A work request flushed by a QP in ERR or RESET (IBV_WC_WR_FLUSH_ERR)."""
        return cls(wr_id, WcStatus.WR_FLUSH_ERR, opcode, qpn)

    def wire(self) -> list[Any]:
        return [self.wr_id, int(self.status), int(self.opcode), self.byte_len, self.imm,
                self.qpn, int(self.flags)]  # fmt: skip


@dataclass(frozen=True)
class EvEvent:
    """An EV event (``mrc_ctl_ev_event``): on the wire ``[profile_id, ev (32 bits), port,
    dropped_before, state bit, mrc_ctl_ev_t in hex]``."""

    profile_id: int
    ev: int
    port: int
    dropped: int
    state: EvStateBit
    ev_hex: str

    def wire(self) -> list[Any]:
        return [self.profile_id, self.ev & 0xFFFFFFFF, self.port, self.dropped, int(self.state),
                self.ev_hex]  # fmt: skip


@dataclass
class Mr:
    """An ``ibv_reg_mr`` registration: the application's buffer, in place."""

    lkey: int
    addr: int
    length: int
    access: int
    mem: AppMemory
    domain: int  # the protection domain's number on this host (Session.domains)
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
    """A completion queue: its entries in the order they were completed."""

    id: int
    cqe: int
    channel: Channel | None
    entries: deque[WorkCompletion | EvEvent] = field(default_factory=deque)
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
    status: WcStatus | None = None


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
    send_ops: SendOps
    domain: int = 0  # the protection domain (Session.domains): the regions its peer may write
    state: QpState = QpState.RESET
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
    core: QueuePair | None = None  # the transport core's QP from RTR on
    sends: deque[SendWr] = field(default_factory=deque)
    by_token: dict[int, SendWr] = field(default_factory=dict)
    recvs: deque[int] = field(default_factory=deque)
    wimm_inflight: int = 0
    held: int = 0  # bytes of the posted sends not yet completed (MAX_HELD_QP)

    def fresh(self, host: StackConfig) -> Qp:
        """A QP as created with this one's capabilities (``ibv_create_qp``; after RESET), with
        the host's ACK timeout and retry counts."""
        return Qp(
            self.qpn, self.send_cq, self.recv_cq, self.max_send_wr, self.max_recv_wr,
            self.max_send_sge, self.max_recv_sge, self.max_inline, self.sq_sig_all,
            self.send_ops, self.domain, timeout=host.ack_timeout_exp, retry_linear=host.retry_linear_cnt,
            retry_exp=host.retry_exp_cnt,
        )  # fmt: skip

    def describe(self) -> Reply:
        return {
            "qpn": self.qpn, "state": int(self.state), "ev_profile": self.ev_profile,
            "cc_profile": self.cc_profile, "max_wimm": self.max_wimm,
            "max_wimm_dest": self.max_wimm_dest, "mpr": self.mpr, "mpr_dest": self.mpr_dest,
            "timeout": self.timeout, "retry_linear": self.retry_linear,
            "retry_exp": self.retry_exp, "cap": self.cap, "hint": self.hint,
            "dgid": self.dgid or "", "dest_qpn": self.dest_qpn or 0, "rq_psn": self.rq_psn,
            "sq_psn": self.sq_psn, "remote_host": self.remote_host or "",
            "max_send_wr": self.max_send_wr, "max_recv_wr": self.max_recv_wr,
            "max_send_sge": self.max_send_sge, "max_recv_sge": self.max_recv_sge,
            "max_inline": self.max_inline, "sq_sig_all": int(self.sq_sig_all),
            "send_ops": int(self.send_ops), "send_cq": self.send_cq.id,
            "recv_cq": self.recv_cq.id, "sends_outstanding": len(self.sends),
            "recvs_posted": len(self.recvs), "wimm_inflight": self.wimm_inflight,
        }  # fmt: skip


@dataclass
class Session:
    """Everything one process opened: the process itself (:class:`.mem.AppProcess`, held by a
    pidfd: its memory only), and its protection domains (each a number of this host's own,
    never shared with another session)."""

    id: int
    token: int
    conn: OcpConnection
    process: AppProcess
    domains: dict[int, int] = field(default_factory=dict)  # the library's PD handle -> number
    mrs: dict[int, Mr] = field(default_factory=dict)
    cqs: dict[int, Cq] = field(default_factory=dict)
    qps: dict[int, Qp] = field(default_factory=dict)
    channels: dict[int, Channel] = field(default_factory=dict)
    async_conn: OcpConnection | None = None
    next_id: int = 1

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def root(self) -> bool:
        """The process runs as root (the controller API's privilege)."""
        return self.conn.uid == 0

    def cq(self, request: Mapping[str, Any], name: str = "cq") -> Cq:
        """The CQ a request's field ``name`` names (EINVAL naming the field if none)."""
        cq_id = field_int(request, name)
        cq = self.cqs.get(cq_id)
        if cq is None:
            raise OcpError(errno.EINVAL, f"field '{name}': no CQ {cq_id} in this context")
        return cq

    def qp(self, request: Mapping[str, Any]) -> Qp:
        """The QP a request's ``qpn`` names (EINVAL naming the field if none)."""
        qpn = field_int(request, "qpn", 0, QPN_MAX)
        qp = self.qps.get(qpn)
        if qp is None:
            raise OcpError(errno.EINVAL, f"field 'qpn': no QP {qpn:#x} in this context")
        return qp

    def new_id(self) -> int:
        value = self.next_id
        self.next_id += 1
        return value
