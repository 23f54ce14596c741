"""The RDMA QP state machine of MRC QPs, as tables, and the pure step that checks a
``modify_qp`` request against them (docs/ocp-api.md, "QP state machine").

:data:`TRANSITIONS` holds every allowed (from, to) pair with the attributes the transition
requires and those it may take (``mrc.h``: INIT takes the profiles and the hint, RTR the
responder's attributes and the peer, RTS the requestor's; verbs: INIT -> RTR needs IBV_QP_AV
and IBV_QP_DEST_QPN); a pair that is not there is refused. :func:`check_modify` validates a
request against the QP and the host and returns a :class:`QpChange` describing what to do,
without changing anything; the provider applies it.

RESET -> INIT requires nothing: a QP given no EV or CC profile id runs on profile 0 of each,
the host's own, as a provider's defaults would. The verbs attributes ``mrc.h`` leaves to MRC
counterparts or does not use are accepted where verbs takes them (:data:`VERBS_ONLY`):
IBV_QP_TIMEOUT and IBV_QP_RETRY_CNT become MRC_QP_TIMEOUT and the linear MRC_QP_RETRY_CNT, the
others are ignored, and :attr:`QpChange.notes` says so for the agent's log.
"""

from __future__ import annotations

import enum
import errno
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from host.agent.ocp.abi import (
    MAX_BACKOFF_EXP,
    MAX_MPR,
    MAX_RETRY_EXP,
    MAX_RETRY_LINEAR,
    MAX_TIMEOUT,
    MAX_WIMM,
    MPR_UNIT,
    QPN_MAX,
    U32_MAX,
    U64_MAX,
    OcpError,
    QpCap,
    QpState,
    field_int,
)
from host.agent.ocp.objects import Qp
from host.transport.config import ConfigError, StackConfig


class QpAttr(enum.IntFlag):
    """The attributes a ``modify_qp`` request may carry (``ibv_qp_attr_mask`` and
    ``mrc_qp_attr_mask`` bits, one per request field)."""

    NONE = 0
    EV_PROFILE = enum.auto()  #: MRC_QP_EV_PROFILE_ID
    CC_PROFILE = enum.auto()  #: MRC_QP_CC_PROFILE_ID
    HINT = enum.auto()  #: MRC_QP_HINT
    MAX_WIMM = enum.auto()  #: MRC_QP_MAX_WIMM
    MAX_WIMM_DEST = enum.auto()  #: MRC_QP_MAX_WIMM_DEST
    MPR = enum.auto()  #: MRC_QP_MPR
    MPR_DEST = enum.auto()  #: MRC_QP_MPR_DEST
    TIMEOUT = enum.auto()  #: MRC_QP_TIMEOUT
    RETRY_LINEAR = enum.auto()  #: MRC_QP_RETRY_CNT (linear)
    RETRY_EXP = enum.auto()  #: MRC_QP_RETRY_CNT (exponential)
    CAP = enum.auto()  #: MRC_QP_CAP
    DGID = enum.auto()  #: IBV_QP_AV (the peer's GID)
    DEST_QPN = enum.auto()  #: IBV_QP_DEST_QPN
    RQ_PSN = enum.auto()  #: IBV_QP_RQ_PSN
    SQ_PSN = enum.auto()  #: IBV_QP_SQ_PSN
    # verbs attributes MRC leaves unused, accepted where verbs takes them (see VERBS_ONLY)
    IBV_PORT = enum.auto()  #: IBV_QP_PORT (ignored: an MRC QP uses every port)
    IBV_ACCESS_FLAGS = enum.auto()  #: IBV_QP_ACCESS_FLAGS (ignored: the MR's flags apply)
    IBV_PKEY_INDEX = enum.auto()  #: IBV_QP_PKEY_INDEX (ignored: no partitions)
    IBV_PATH_MTU = enum.auto()  #: IBV_QP_PATH_MTU (ignored: the fabric's MTU applies)
    IBV_MIN_RNR_TIMER = enum.auto()  #: IBV_QP_MIN_RNR_TIMER (ignored: MRC has no RNR)
    IBV_MAX_DEST_RD_ATOMIC = enum.auto()  #: IBV_QP_MAX_DEST_RD_ATOMIC (ignored: no READ)
    IBV_TIMEOUT = enum.auto()  #: IBV_QP_TIMEOUT (mapped to MRC_QP_TIMEOUT)
    IBV_RETRY_CNT = enum.auto()  #: IBV_QP_RETRY_CNT (mapped to MRC_QP_RETRY_CNT, linear)
    IBV_RNR_RETRY = enum.auto()  #: IBV_QP_RNR_RETRY (ignored: MRC has no RNR)
    IBV_MAX_RD_ATOMIC = enum.auto()  #: IBV_QP_MAX_QP_RD_ATOMIC (ignored: no READ)

    @property
    def field(self) -> str:
        """The request's field of a single attribute."""
        return str(self.name).lower()

    @classmethod
    def of(cls, names: set[str]) -> QpAttr:
        """The mask of the attribute fields ``names`` (unknown names are not attributes)."""
        mask = cls.NONE
        for name in names:
            mask |= cls.__members__.get(name.upper(), cls.NONE)
        return mask

    def fields(self) -> list[str]:
        return sorted(a.field for a in QpAttr if a and a in self)


A = QpAttr
S = QpState
INIT_ATTRS = (
    A.EV_PROFILE | A.CC_PROFILE | A.HINT | A.IBV_PORT | A.IBV_ACCESS_FLAGS | A.IBV_PKEY_INDEX
)
RTR_ATTRS = (A.MAX_WIMM_DEST | A.MPR_DEST | A.CAP | A.DGID | A.DEST_QPN | A.RQ_PSN | A.MAX_WIMM
             | A.MPR | A.SQ_PSN | A.IBV_PATH_MTU | A.IBV_MIN_RNR_TIMER | A.IBV_MAX_DEST_RD_ATOMIC
             | A.IBV_ACCESS_FLAGS | A.IBV_PKEY_INDEX)  # fmt: skip
RTS_ATTRS = (A.MAX_WIMM | A.MPR | A.TIMEOUT | A.RETRY_LINEAR | A.RETRY_EXP | A.SQ_PSN | A.CAP
             | A.IBV_TIMEOUT | A.IBV_RETRY_CNT | A.IBV_RNR_RETRY | A.IBV_MAX_RD_ATOMIC
             | A.IBV_ACCESS_FLAGS)  # fmt: skip
#: the verbs attributes and what the provider does with them: the MRC attribute one maps to
#: (``mrc.h`` names MRC_QP_TIMEOUT and MRC_QP_RETRY_CNT as their counterparts), or None for
#: one that is accepted and ignored with a line in the agent's log
VERBS_ONLY: dict[QpAttr, QpAttr | None] = {
    A.IBV_PORT: None, A.IBV_ACCESS_FLAGS: None, A.IBV_PKEY_INDEX: None, A.IBV_PATH_MTU: None,
    A.IBV_MIN_RNR_TIMER: None, A.IBV_MAX_DEST_RD_ATOMIC: None, A.IBV_RNR_RETRY: None,
    A.IBV_MAX_RD_ATOMIC: None, A.IBV_TIMEOUT: A.TIMEOUT, A.IBV_RETRY_CNT: A.RETRY_LINEAR,
}  # fmt: skip
#: verbs' ACK timeout is 4.096 us x 2^t, MRC's 1.024 us x 2^t: the same time is t + 2 in MRC's
VERBS_TIMEOUT_SHIFT = 2


@dataclass(frozen=True)
class Transition:
    """An allowed transition: the attributes it requires, and every one it takes."""

    required: QpAttr
    allowed: QpAttr


#: every allowed (from, to); any state may go to RESET or ERR, with no attributes
TRANSITIONS: dict[tuple[QpState, QpState], Transition] = {
    (S.RESET, S.INIT): Transition(A.NONE, INIT_ATTRS),  # no profile ids: profile 0
    (S.INIT, S.INIT): Transition(A.NONE, INIT_ATTRS),
    (S.INIT, S.RTR): Transition(A.DGID | A.DEST_QPN, RTR_ATTRS),
    (S.RTR, S.RTS): Transition(A.NONE, RTS_ATTRS),
    (S.RTS, S.RTS): Transition(A.NONE, RTS_ATTRS),
    **{(s, to): Transition(A.NONE, A.NONE)
       for s in (S.RESET, S.INIT, S.RTR, S.RTS, S.ERR) for to in (S.RESET, S.ERR)},
}  # fmt: skip
#: states MRC QPs never take
UNSUPPORTED = (S.SQD, S.SQE)
#: the integer attributes and their ranges
LIMITS: dict[QpAttr, tuple[int, int]] = {
    A.EV_PROFILE: (0, U64_MAX), A.CC_PROFILE: (0, U64_MAX), A.HINT: (0, U32_MAX),
    A.MAX_WIMM: (1, MAX_WIMM), A.MAX_WIMM_DEST: (1, MAX_WIMM), A.MPR: (1, MAX_MPR),
    A.MPR_DEST: (1, MAX_MPR), A.TIMEOUT: (0, MAX_TIMEOUT),
    A.RETRY_LINEAR: (0, MAX_RETRY_LINEAR), A.RETRY_EXP: (0, MAX_RETRY_EXP),
    A.CAP: (0, U32_MAX), A.DEST_QPN: (1, QPN_MAX), A.RQ_PSN: (0, QPN_MAX),
    A.SQ_PSN: (0, QPN_MAX), A.IBV_PORT: (1, 255), A.IBV_ACCESS_FLAGS: (0, U32_MAX),
    A.IBV_PKEY_INDEX: (0, 0xFFFF), A.IBV_PATH_MTU: (1, 5), A.IBV_MIN_RNR_TIMER: (0, 31),
    A.IBV_MAX_DEST_RD_ATOMIC: (0, 255), A.IBV_TIMEOUT: (0, 31), A.IBV_RETRY_CNT: (0, 7),
    A.IBV_RNR_RETRY: (0, 7), A.IBV_MAX_RD_ATOMIC: (0, 255),
}  # fmt: skip
#: the capabilities a QP may set (the device does not advertise dynamic MPR)
QP_CAPS = QpCap.TRIM_NACK_DEST_UNSUPPORTED | QpCap.SVC_TIME_DEST_UNSUPPORTED
#: the attributes of a QP that its transport-core config carries (see :func:`core_config`)
CORE_ATTRS = ("timeout", "retry_linear", "retry_exp", "mpr", "mpr_dest")
#: request fields that are not attributes
NOT_ATTRS = {"cmd", "id", "qpn", "state", "cur_state"}


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


class QpHost(Protocol):
    """What the check needs to know of the host (the provider answers)."""

    @property
    def host_name(self) -> str: ...
    @property
    def host_config(self) -> StackConfig: ...
    def peer_of(self, gid: bytes) -> str | None: ...
    def check_ev_profile(self, profile_id: int) -> None: ...
    def check_cc_profile(self, profile_id: int) -> None: ...


@dataclass(frozen=True)
class QpChange:
    """What a valid ``modify_qp`` does: the transition, the attributes to set, the peer's host
    (IBV_QP_AV), the QP's new transport-core config (made at INIT -> RTR, or changed live)."""

    old: QpState
    new: QpState
    values: dict[str, Any] = field(default_factory=dict)
    remote_host: str | None = None
    config: StackConfig | None = None
    #: what became of the verbs attributes MRC leaves unused (a line each for the agent's log)
    notes: tuple[str, ...] = ()

    @property
    def makes_core(self) -> bool:
        return (self.old, self.new) == (QpState.INIT, QpState.RTR)


def _state(request: Mapping[str, Any], name: str) -> QpState:
    return QpState(field_int(request, name, 0, len(QpState) - 1))


def check_transition(old: QpState, new: QpState, given: QpAttr) -> None:
    """Refuse a transition that is not in :data:`TRANSITIONS`, an attribute it does not take,
    or one it requires that is missing (EINVAL)."""
    if new in UNSUPPORTED:
        raise OcpError(errno.EINVAL, f"state {new.name} is not supported by MRC QPs")
    row = TRANSITIONS.get((old, new))
    if row is None:
        raise OcpError(
            errno.EINVAL,
            f"a QP cannot go from {old.name} to {new.name} "
            "(RESET -> INIT -> RTR -> RTS; any -> RESET or ERR)",
        )
    extra = given & ~row.allowed
    if extra:
        raise OcpError(
            errno.EINVAL,
            f"attribute '{extra.fields()[0]}' cannot be set on the way to {new.name} "
            f"(takes: {', '.join(row.allowed.fields()) or 'none'})",
        )
    missing = row.required & ~given
    if missing:
        raise OcpError(
            errno.EINVAL,
            f"{old.name} -> {new.name} needs {', '.join(missing.fields())} "
            "(INIT -> RTR: IBV_QP_AV, the peer's GID, and IBV_QP_DEST_QPN)",
        )


def check_modify(qp: Qp, request: Mapping[str, Any], host: QpHost) -> QpChange:
    """Validate a ``modify_qp`` request on ``qp``: the transition and its attributes
    (:func:`check_transition`), each value, the profiles named, the peer; changes nothing."""
    old = qp.state
    if "cur_state" in request and _state(request, "cur_state") != old:
        raise OcpError(
            errno.EINVAL,
            f"IBV_QP_CUR_STATE says {QpState(request['cur_state']).name}, "
            f"QP {qp.qpn:#x} is {old.name}",
        )
    new = _state(request, "state") if "state" in request else old
    given = QpAttr.of(set(request) - NOT_ATTRS)
    check_transition(old, new, given)
    unknown = sorted(set(request) - NOT_ATTRS - set(given.fields()))
    if unknown:
        raise OcpError(errno.EINVAL, f"attribute '{unknown[0]}' is not a QP attribute")
    values: dict[str, Any] = {}
    for attr, (low, high) in LIMITS.items():
        if attr in given:
            values[attr.field] = field_int(request, attr.field, low, high)
    notes = _verbs_only(values)
    if (old, new) == (QpState.RESET, QpState.INIT):  # no profile ids: the host's, profile 0
        values.setdefault("ev_profile", 0)
        values.setdefault("cc_profile", 0)
    if "ev_profile" in values:
        host.check_ev_profile(values["ev_profile"])
    if "cc_profile" in values:
        host.check_cc_profile(values["cc_profile"])
    if values.get("cap", 0) & ~int(QP_CAPS):
        raise OcpError(
            errno.EINVAL,
            f"cap {values['cap']:#x}: the device does not advertise dynamic MPR "
            "(MRC_DEVICE_CAP_DYNAMIC_MPR)",
        )
    remote_host = None
    if A.DGID in given:
        raw = _gid(request["dgid"])
        remote_host = host.peer_of(raw)
        if remote_host is None:
            raise OcpError(
                errno.EINVAL,
                f"destination GID {ipaddress.IPv6Address(raw)} is not a plane address of a "
                "testbed host",
            )
        if remote_host == host.host_name:
            raise OcpError(errno.EINVAL, "a QP to its own host is not supported (no loopback path)")
        values["dgid"] = raw.hex()
    # the transport core's config of the QP: made at RTR, changed with the attributes it carries
    config: StackConfig | None = None
    change = QpChange(old, new, values, remote_host)
    if change.makes_core or (
        qp.core is not None and new != QpState.ERR and any(n in values for n in CORE_ATTRS)
    ):
        attrs = {name: values.get(name, getattr(qp, name)) for name in CORE_ATTRS}
        try:
            config = core_config(host.host_config, **attrs)
        except ConfigError as exc:
            raise OcpError(errno.EINVAL, str(exc)) from None
    return QpChange(old, new, values, remote_host, config, notes)


def _verbs_only(values: dict[str, Any]) -> tuple[str, ...]:
    """Take the verbs attributes MRC leaves unused out of ``values``: map IBV_QP_TIMEOUT and
    IBV_QP_RETRY_CNT to their MRC counterparts (unless the request gives those too, which win),
    ignore the others; a line for the log about each."""
    notes: list[str] = []
    for attr, mrc in VERBS_ONLY.items():
        if attr.field not in values:
            continue
        value = values.pop(attr.field)
        verbs = f"IBV_QP_{attr.field.removeprefix('ibv_').upper()} {value}"
        if mrc is None:
            notes.append(f"{verbs} ignored (MRC QPs do not use it)")
        elif mrc.field in values:
            notes.append(f"{verbs} ignored: the request gives {mrc.field} too")
        elif attr is A.IBV_TIMEOUT and value == 0:
            notes.append(f"{verbs} (no timeout) ignored: MRC QPs always have an ACK timeout")
        else:
            if attr is A.IBV_TIMEOUT:
                value = min(value + VERBS_TIMEOUT_SHIFT, MAX_TIMEOUT)
            values[mrc.field] = value
            notes.append(f"{verbs} mapped to {mrc.field} {value}")
    return tuple(notes)


def _gid(value: object) -> bytes:
    try:
        raw = bytes.fromhex(value) if isinstance(value, str) else b""
    except ValueError:
        raw = b""
    if len(raw) != 16:
        raise OcpError(errno.EINVAL, f"field 'dgid': expected 32 hex digits, got {value!r}")
    return raw
