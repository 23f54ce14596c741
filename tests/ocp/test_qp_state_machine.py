"""The QP state machine of the OCP provider (host/agent/ocp/qp_states.py), from a table: every
(from, to) pair of states with every attribute, legal and illegal, and every attribute's range,
checked without a provider, a socket or a transport."""

from __future__ import annotations

import errno
import itertools
from collections.abc import Mapping
from typing import Any

import pytest

from host.agent.ocp.abi import MAX_MPR, MAX_TIMEOUT, MAX_WIMM, OcpError, QpState, SendOps
from host.agent.ocp.objects import Cq, Qp
from host.agent.ocp.qp_states import (
    LIMITS,
    TRANSITIONS,
    VERBS_ONLY,
    QpAttr,
    check_modify,
    check_transition,
)
from host.transport.config import StackConfig

S = QpState
INIT = "ev_profile cc_profile hint ibv_port ibv_access_flags ibv_pkey_index"
RTR = (
    "max_wimm_dest mpr_dest cap dgid dest_qpn rq_psn max_wimm mpr sq_psn ibv_path_mtu "
    "ibv_min_rnr_timer ibv_max_dest_rd_atomic ibv_access_flags ibv_pkey_index"
)
RTS = (
    "max_wimm mpr timeout retry_linear retry_exp sq_psn cap ibv_timeout ibv_retry_cnt "
    "ibv_rnr_retry ibv_max_rd_atomic ibv_access_flags"
)
#: (from, to) -> (required attributes, every attribute taken), as mrc.h and verbs say; any pair
#: not here is refused
EXPECTED: dict[tuple[QpState, QpState], tuple[str, str]] = {
    (S.RESET, S.INIT): ("", INIT),  # no profile ids: profile 0 of each
    (S.INIT, S.INIT): ("", INIT),
    (S.INIT, S.RTR): ("dgid dest_qpn", RTR),
    (S.RTR, S.RTS): ("", RTS),
    (S.RTS, S.RTS): ("", RTS),
    **{(s, to): ("", "") for s in (S.RESET, S.INIT, S.RTR, S.RTS, S.ERR) for to in (S.RESET, S.ERR)},
}  # fmt: skip
SINGLE = [a for a in QpAttr if a]


def mask(names: str) -> QpAttr:
    return QpAttr.of(set(names.split()))


def test_the_table_is_the_expected_one() -> None:
    assert set(TRANSITIONS) == set(EXPECTED)
    for pair, (required, allowed) in EXPECTED.items():
        row = TRANSITIONS[pair]
        assert (row.required, row.allowed) == (mask(required), mask(allowed)), pair


@pytest.mark.parametrize(("old", "new"), list(itertools.product(S, S)))
def test_every_transition_with_every_attribute(old: QpState, new: QpState) -> None:
    row = EXPECTED.get((old, new))
    if row is None:
        for given in (QpAttr.NONE, *SINGLE):
            with pytest.raises(OcpError, match="not supported|cannot go") as info:
                check_transition(old, new, given)
            assert info.value.code == errno.EINVAL
        return
    required, allowed = mask(row[0]), mask(row[1])
    check_transition(old, new, required)  # the required attributes alone
    for attr in SINGLE:
        if attr in allowed:
            check_transition(old, new, required | attr)
        else:
            with pytest.raises(OcpError, match=f"'{attr.field}' cannot be set"):
                check_transition(old, new, required | attr)
    for attr in (a for a in SINGLE if a in required):  # each required one missing
        with pytest.raises(OcpError, match=f"needs.*{attr.field}"):
            check_transition(old, new, required & ~attr)


class Host:
    """The host as the check sees it: h1 is a peer at GID 01..01, h0 is this host."""

    host_name = "h0"
    host_config = StackConfig()

    def peer_of(self, gid: bytes) -> str | None:
        return {b"\1" * 16: "h1", b"\0" * 16: "h0"}.get(gid)

    def check_ev_profile(self, profile_id: int) -> None:
        if profile_id == 9:
            raise OcpError(errno.EINVAL, "EV profile 9 is OFFLINE")

    def check_cc_profile(self, profile_id: int) -> None:
        if profile_id == 9:
            raise OcpError(errno.EINVAL, "CC profile 9 is OFFLINE")


def qp_in(state: QpState) -> Qp:
    cq = Cq(1, 16, None)
    qp = Qp(0x10000, cq, cq, 4, 4, 1, 1, 0, False, SendOps.WRITE)
    qp.state = state
    return qp


def modify(current: QpState, **request: Any) -> Mapping[str, Any]:
    change = check_modify(qp_in(current), {"cmd": "modify_qp", "qpn": 0x10000, **request}, Host())
    return {"old": change.old, "new": change.new, "notes": change.notes, **change.values}


#: (state the QP is in, the request, the errno and words of the error; None: accepted)
CASES: list[tuple[QpState, dict[str, Any], str | None]] = [
    (S.RESET, {"state": S.INIT, "ev_profile": 0, "cc_profile": 0}, None),
    (S.RESET, {"state": S.INIT, "ev_profile": 9, "cc_profile": 0}, "OFFLINE"),
    (S.RESET, {"state": S.INIT, "ev_profile": 0, "cc_profile": 9}, "OFFLINE"),
    (S.RESET, {"state": S.INIT, "ev_profile": 0, "cc_profile": 0, "colour": 1}, "not a QP attr"),
    (S.INIT, {"cur_state": S.RTR}, "CUR_STATE"),
    (S.INIT, {"state": S.SQD}, "not supported"),
    (S.INIT, {"state": S.RTR, "dgid": "01" * 16, "dest_qpn": 5}, None),
    (S.INIT, {"state": S.RTR, "dgid": "00" * 16, "dest_qpn": 5}, "own host"),
    (S.INIT, {"state": S.RTR, "dgid": "02" * 16, "dest_qpn": 5}, "not a plane address"),
    (S.INIT, {"state": S.RTR, "dgid": "zz", "dest_qpn": 5}, "32 hex digits"),
    (S.INIT, {"state": S.RTR, "dgid": "01" * 16, "dest_qpn": 5, "cap": 2}, "dynamic MPR"),
    (S.INIT, {"state": S.RTR, "dgid": "01" * 16, "dest_qpn": 5, "cap": 5}, None),
    (S.RTR, {"state": S.RTS, "timeout": MAX_TIMEOUT}, None),
    (S.RTS, {"mpr": MAX_MPR, "max_wimm": MAX_WIMM}, None),
    (S.ERR, {"state": S.RESET}, None),
]


@pytest.mark.parametrize(("state", "request_", "words"), CASES)
def test_modify_requests(state: QpState, request_: dict[str, Any], words: str | None) -> None:
    if words is None:
        out = modify(state, **request_)
        assert out["new"] == request_.get("state", state)
        return
    with pytest.raises(OcpError, match=words) as info:
        modify(state, **request_)
    assert info.value.code == errno.EINVAL


@pytest.mark.parametrize("attr", list(LIMITS))
def test_every_attribute_range(attr: QpAttr) -> None:
    """Each integer attribute at both ends of its range, and just outside them, on a transition
    that takes it."""
    old, new = next((o, n) for (o, n), row in TRANSITIONS.items() if attr in row.allowed)
    base: dict[str, Any] = {"state": new}
    required = TRANSITIONS[(old, new)].required
    base.update({"ev_profile": 0, "cc_profile": 0} if QpAttr.EV_PROFILE in required else {})
    base.update({"dgid": "01" * 16, "dest_qpn": 5} if QpAttr.DGID in required else {})
    low, high = LIMITS[attr]
    for value in (low, high):
        if attr is QpAttr.CAP and value == high:
            continue  # every bit: refused below, as the device has no dynamic MPR
        out = modify(old, **{**base, attr.field: value})
        if attr in VERBS_ONLY:  # taken out of the values, mapped or ignored, and logged
            assert attr.field not in out
            assert any(n.startswith(f"IBV_QP_{attr.field[4:].upper()} ") for n in out["notes"])
        else:
            assert out[attr.field] == value
    for value in (low - 1, high + 1):
        with pytest.raises(OcpError, match=f"field '{attr.field}'"):
            modify(old, **{**base, attr.field: value})
