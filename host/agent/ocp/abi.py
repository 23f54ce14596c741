"""The numbers of the OCP MRC ABI, once: libibverbs' (``infiniband/verbs.h``), ``mrc.h``'s and
``mrc_ctl.h``'s, as the requests and replies of the provider's socket carry them; the limits of
the emulated device; the provider's error and its field validators.

Every other module of :mod:`host.agent.ocp` names these enums and flags instead of numbers;
``capi/`` writes the same numbers from the C headers.
"""

from __future__ import annotations

import enum
import errno
from collections.abc import Mapping
from typing import Any

from host.transport.evs import EvFormat, EvState

Reply = dict[str, Any]


# -- libibverbs ----------------------------------------------------------------------------------


class QpState(enum.IntEnum):
    """``ibv_qp_state``."""

    RESET = 0
    INIT = 1
    RTR = 2
    RTS = 3
    SQD = 4
    SQE = 5
    ERR = 6


class WcStatus(enum.IntEnum):
    """``ibv_wc_status`` (those the provider reports)."""

    SUCCESS = 0
    LOC_LEN_ERR = 1
    LOC_QP_OP_ERR = 2
    WR_FLUSH_ERR = 5
    REM_ACCESS_ERR = 10
    RETRY_EXC_ERR = 12


class WcOpcode(enum.IntEnum):
    """``ibv_wc_opcode`` (those of MRC QPs)."""

    RDMA_WRITE = 1
    RECV_RDMA_WITH_IMM = 129


class WcFlag(enum.IntFlag):
    """``ibv_wc_flags``."""

    WITH_IMM = 1 << 1


class WrOpcode(enum.IntEnum):
    """``ibv_wr_opcode`` (those of MRC QPs)."""

    RDMA_WRITE = 0
    RDMA_WRITE_WITH_IMM = 1


class SendFlag(enum.IntFlag):
    """``ibv_send_flags``."""

    SIGNALED = 1 << 1
    INLINE = 1 << 3


class Access(enum.IntFlag):
    """``ibv_access_flags`` (the one the provider reads)."""

    REMOTE_WRITE = 1 << 1


class SendOps(enum.IntFlag):
    """``ibv_qp_create_send_ops_flags`` (those of MRC QPs)."""

    WRITE = 1 << 0
    WRITE_WITH_IMM = 1 << 1


class AsyncEvent(enum.IntEnum):
    """``ibv_event_type`` (those the provider raises)."""

    CQ_ERR = 0
    QP_FATAL = 1
    QP_ACCESS_ERR = 3  #: a protection fault at the responder (IBV_EVENT_QP_ACCESS_ERR)
    PORT_ACTIVE = 9
    PORT_ERR = 10


# -- mrc.h ---------------------------------------------------------------------------------------

PROTOCOL_VERSION_1 = 1  #: MRC_PROTOCOL_VERSION_1


class DeviceCap(enum.IntFlag):
    """``mrc_device_cap``."""

    TRIM_NACK = 1 << 0


class QpCap(enum.IntFlag):
    """``mrc_qp_cap``."""

    TRIM_NACK_DEST_UNSUPPORTED = 1 << 0
    DYNAMIC_MPR = 1 << 1
    SVC_TIME_DEST_UNSUPPORTED = 1 << 2


# -- mrc_ctl.h -----------------------------------------------------------------------------------


class EvStateBit(enum.IntFlag):
    """``mrc_ctl_ev_state``: an EV state as EV events and EV operations report it."""

    GOOD = 1 << 0
    ASSUMED_BAD = 1 << 1
    DENIED = 1 << 2
    UNKNOWN = 1 << 31

    @classmethod
    def of(cls, state: EvState) -> EvStateBit:
        """The bit of a transport EV state."""
        return cls[state.name]

    @property
    def state(self) -> EvState:
        """The transport EV state of a single bit."""
        return EvState[str(self.name)]


#: the states EV events may report (and profile 0 reports)
EV_EVENT_MASK = EvStateBit.GOOD | EvStateBit.ASSUMED_BAD


class EvFmtMode(enum.IntFlag):
    """``mrc_ctl_ev_fmt_mode``."""

    STEV = 1 << 0
    SRV6 = 1 << 1
    UDP = 1 << 2

    @property
    def format(self) -> EvFormat:
        """The transport's EV format of a single mode bit."""
        return EvFormat[str(self.name)]


class EvMode(enum.IntFlag):
    """``mrc_ctl_ev_mode``."""

    AUTO = 1 << 0
    EXP = 1 << 1
    GEN = 1 << 2


class EpOp(enum.IntEnum):
    """``mrc_ctl_ep_op_type``; :attr:`core_name` is the transport's name of it."""

    EV_PROBE = 0
    PORT_STATUS_UPDATE = 1

    @property
    def core_name(self) -> str:
        return str(self.name).lower()


class ProfileState(enum.IntEnum):
    """``mrc_ctl_profile_state``."""

    INIT = 0
    OFFLINE = 1
    ONLINE = 2


class EvOp(enum.IntEnum):
    """``mrc_ctl_ev_op``."""

    REPLACE = 0
    MODIFY_STATE = 1
    QUERY_STATE = 2
    QUERY_ARRAY = 3


class FieldsOp(enum.IntEnum):
    """``mrc_ctl_ev_fmt_op`` / ``mrc_ctl_ev_fields_op``."""

    MODIFY = 0
    QUERY = 1


class EvOpFlag(enum.IntFlag):
    """``mrc_ctl_ev_op_flags``."""

    ALL_COPIES = 1 << 0


class FmtMask(enum.IntFlag):
    """``mrc_ctl_ev_fmt_profile_attr_mask``."""

    STATE = 1 << 0
    CUR_STATE = 1 << 1
    MODE = 1 << 2
    OP = 1 << 3
    VENDOR_CFG = 1 << 31


class EvMask(enum.IntFlag):
    """``mrc_ctl_ev_profile_attr_mask``."""

    STATE = 1 << 0
    CUR_STATE = 1 << 1
    MODE = 1 << 2
    FMT_ID = 1 << 3
    COUNT = 1 << 4
    MIN_ACTIVE = 1 << 5
    EVENT_MASK = 1 << 6
    EV_OP = 1 << 7
    FIELDS_OP = 1 << 8
    VENDOR_CFG = 1 << 31


class CcMask(enum.IntFlag):
    """``mrc_ctl_cc_profile_attr_mask``."""

    STATE = 1 << 0
    CUR_STATE = 1 << 1
    ALGORITHM = 1 << 2
    CONFIG = 1 << 3
    VENDOR_CFG = 1 << 31


EV_MAX_BYTES = 32  #: MRC_CTL_EV_MAX_BYTES: the bytes of an mrc_ctl_ev_t


# -- what the emulated device offers ---------------------------------------------------------------

MAX_WIMM = 1024  # WRITE_IMMs in flight per QP, as requestor and as responder
MAX_MPR = 255  # units of 128 PSNs
MPR_UNIT = 128  # PSNs per unit of mrc_qp_attr.mpr / mpr_dest (mrc.h)
MAX_CQE = 1 << 16
MAX_WR = 1 << 14
MAX_SGE = 16
MAX_INLINE = 4096  #: max_inline_data
#: the port's max_msg_sz: bytes of one message, and so of one SGE (the agent copies a message
#: out of the application's memory when it is posted: a testbed choice, see MAX_HELD_*)
MAX_MESSAGE = 1 << 28
# What one session (one process's device context) may hold of the agent; ibv_query_device
# reports those verbs has an attribute for (docs/ocp-api.md, "Limits and isolation").
MAX_MR_SIZE = 1 << 40  #: max_mr_size: bytes of one memory region
MAX_MR = 4096  #: max_mr: memory regions of a session
MAX_QP = 1024  #: max_qp: QPs of a session
MAX_CQ = 1024  #: max_cq: CQs of a session
MAX_PD = 1 << 20  #: max_pd (protection domains cost the agent nothing)
MAX_HELD_QP = 1 << 28  #: bytes posted and not yet completed, per QP (testbed)
MAX_HELD_SESSION = 1 << 30  #: the same, per session (testbed)
READ_CHUNK = 8 << 20  #: bytes of the application's memory one read system call copies
MAX_TIMEOUT = 24
MAX_RETRY_LINEAR = 7
MAX_RETRY_EXP = 25
#: entries of each port's GID table: a RoCEv2 NIC lists link-local and IPv4-mapped GIDs (RoCE v1
#: and v2) before the one applications use, index 3 by default; every index here holds the
#: plane address, so whichever an application picks is the NIC's
GID_TABLE_LEN = 4
MAX_BACKOFF_EXP = 31  # the backoff ceiling's largest exponent (StackConfig.max_backoff_exp)
FIRST_OCP_QPN = 0x10000
QPN_MAX = (1 << 24) - 1
U32_MAX = (1 << 32) - 1
U64_MAX = (1 << 64) - 1
MAX_PROFILES = 64  #: of each kind, per host
MAX_EVS = 4096  #: per EV profile


def device_limits() -> Reply:
    """The limits ``ibv_query_device`` and ``ibv_query_port`` report, by their verbs names."""
    return {
        "max_mr_size": MAX_MR_SIZE, "max_mr": MAX_MR, "max_qp": MAX_QP, "max_cq": MAX_CQ,
        "max_pd": MAX_PD, "max_qp_wr": MAX_WR, "max_inline_data": MAX_INLINE,
        "max_msg_sz": MAX_MESSAGE,
    }  # fmt: skip


# -- errors and field validators -------------------------------------------------------------------


class OcpError(Exception):
    """A request the provider refuses: ``errno`` for the library, a message naming the input;
    ``bad`` the index of the failing element of a batch, ``extra`` more fields of the reply."""

    def __init__(
        self, code: int, message: str, bad: int | None = None, extra: Reply | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.bad = bad
        self.extra = extra or {}

    def prefixed(self, prefix: str) -> OcpError:
        """The same error with its message after ``prefix: ``."""
        return OcpError(self.code, f"{prefix}: {self}", self.bad, self.extra)

    def reply(self) -> Reply:
        out: Reply = {"ok": False, "errno": self.code, "error": str(self), **self.extra}
        if self.bad is not None:
            out["bad"] = self.bad
        return out


def field_int(
    req: Mapping[str, Any], name: str, low: int = 0, high: int = U64_MAX,
    default: int | None = None,
) -> int:  # fmt: skip
    """Field ``name`` of ``req``: an integer in ``low..high`` (``default`` when absent; EINVAL
    naming the field else)."""
    value = req.get(name, default)
    if value is None:
        raise OcpError(errno.EINVAL, f"field '{name}' is required (an integer)")
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise OcpError(
            errno.EINVAL, f"field '{name}': expected an integer in {low}..{high}, got {value!r}"
        )
    return value


def field_list(req: Mapping[str, Any], name: str) -> list[Any]:
    """Field ``name`` of ``req``: a list (EINVAL naming the field else)."""
    value = req.get(name)
    if not isinstance(value, list):
        raise OcpError(errno.EINVAL, f"field '{name}': expected a list")
    return value
