"""What an application written for real MRC NICs does that the OCP provider accepts as their
providers do (host/agent/ocp/qp_states.py, docs/ocp-api.md "Lenient defaults"), on two
in-memory hosts with this process as the application: a RoCEv2 NIC's GID table, RESET -> INIT
without profile ids (profile 0 of each), and the verbs attributes MRC leaves unused, mapped to
their MRC counterparts or ignored with a line in the agent's log."""

from __future__ import annotations

import errno
import logging
from typing import Any

import pytest
import test_ocp_provider as provider_tests
from test_ocp_provider import INIT, RTR, RTS, Pair, core_config, make_qp, write_arrives_intact

from host.agent.ocp.abi import GID_TABLE_LEN
from host.agent.ocp.qp_states import VERBS_TIMEOUT_SHIFT

fabric = provider_tests.fabric  # the fixtures: the small fabric, two in-memory hosts
pair = provider_tests.pair
#: the GID index applications use by default on a RoCEv2 NIC (perftest's -x, NCCL_IB_GID_INDEX)
DEFAULT_GID_INDEX = 3


def test_every_port_has_a_rocev2_gid_table(pair: Pair) -> None:
    for side in (pair.h0, pair.h1):
        for port in side.hello["ports"]:
            assert port["gid_tbl_len"] == GID_TABLE_LEN > DEFAULT_GID_INDEX
            assert side.ok("query_port", port=port["port"])["gid_tbl_len"] == GID_TABLE_LEN


def test_init_without_profile_ids_runs_on_profile_0(pair: Pair) -> None:
    h0, h1 = pair.h0, pair.h1
    qa, scq, _ = make_qp(h0)
    qb, _, _ = make_qp(h1)
    for side, qpn in ((h0, qa), (h1, qb)):
        described = side.ok("modify_qp", qpn=qpn, state=INIT)  # mrc_mask 0
        assert (described["ev_profile"], described["cc_profile"]) == (0, 0)
    h0.ok("modify_qp", qpn=qa, state=RTR, dgid=h1.gid(), dest_qpn=qb)
    h1.ok("modify_qp", qpn=qb, state=RTR, dgid=h0.gid(), dest_qpn=qa)
    h0.ok("modify_qp", qpn=qa, state=RTS)
    h1.ok("modify_qp", qpn=qb, state=RTS)
    assert h0.ok("query_qp", qpn=qa)["ev_profile"] == 0
    write_arrives_intact(pair, qa, scq)  # on the host's own EVs and congestion control


#: (the RTS request's attributes, the QP's timeout and linear retry count after it, the words
#: of the log lines); the host's defaults are timeout 7 and 3 linear retries
RTS_CASES: list[tuple[dict[str, Any], tuple[int, int], list[str]]] = [
    (
        {"ibv_timeout": 14, "ibv_retry_cnt": 6, "ibv_rnr_retry": 7, "ibv_max_rd_atomic": 1},
        (14 + VERBS_TIMEOUT_SHIFT, 6),
        ["IBV_QP_TIMEOUT 14 mapped to timeout 16", "IBV_QP_RETRY_CNT 6 mapped to retry_linear 6",
         "IBV_QP_RNR_RETRY 7 ignored", "IBV_QP_MAX_RD_ATOMIC 1 ignored"],
    ),
    ({"ibv_timeout": 23}, (24, 3), ["IBV_QP_TIMEOUT 23 mapped to timeout 24"]),  # MRC's maximum
    ({"ibv_timeout": 0}, (7, 3), ["IBV_QP_TIMEOUT 0 (no timeout) ignored"]),
    (
        {"ibv_timeout": 14, "timeout": 9, "ibv_retry_cnt": 1, "retry_linear": 5, "retry_exp": 25},
        (9, 5),
        ["IBV_QP_TIMEOUT 14 ignored: the request gives timeout",
         "IBV_QP_RETRY_CNT 1 ignored: the request gives retry_linear"],
    ),
]  # fmt: skip


@pytest.mark.parametrize(("rts", "expected", "words"), RTS_CASES)
def test_verbs_attributes_are_mapped_or_ignored(
    pair: Pair,
    caplog: pytest.LogCaptureFixture,
    rts: dict[str, Any],
    expected: tuple[int, int],
    words: list[str],
) -> None:
    """A verbs application's INIT, RTR and RTS masks: every attribute accepted, each said in
    the agent's log; timeout and retry count reach the QP's transport as MRC's would."""
    h0, h1 = pair.h0, pair.h1
    qa, _, _ = make_qp(h0)
    qb, _, _ = make_qp(h1)
    caplog.set_level(logging.INFO, logger="mrc.host.agent.ocp")
    h0.ok("modify_qp", qpn=qa, state=INIT, ibv_port=1, ibv_pkey_index=0, ibv_access_flags=2)
    h0.ok("modify_qp", qpn=qa, state=RTR, dgid=h1.gid(), dest_qpn=qb, rq_psn=0, ibv_path_mtu=5,
          ibv_min_rnr_timer=12, ibv_max_dest_rd_atomic=1)  # fmt: skip
    described = h0.ok("modify_qp", qpn=qa, state=RTS, sq_psn=0, **rts)
    assert (described["timeout"], described["retry_linear"]) == expected
    config = core_config(h0, qa)
    assert (config.ack_timeout_exp, config.retry_linear_cnt) == expected
    said = "\n".join(r.getMessage() for r in caplog.records)
    for line in [
        "IBV_QP_PORT 1 ignored", "IBV_QP_PKEY_INDEX 0 ignored", "IBV_QP_ACCESS_FLAGS 2 ignored",
        "IBV_QP_PATH_MTU 5 ignored", "IBV_QP_MIN_RNR_TIMER 12 ignored",
        "IBV_QP_MAX_DEST_RD_ATOMIC 1 ignored", *words,
    ]:  # fmt: skip
        assert f"QP {qa:#x}: {line}" in said, said


@pytest.mark.parametrize(
    ("state", "request_"),
    [
        (INIT, {"ibv_timeout": 14}),  # verbs takes the timeout at RTS only
        (INIT, {"ibv_path_mtu": 6}),  # no such MTU
        (INIT, {"ibv_retry_cnt": 8}),
    ],
)
def test_verbs_attributes_where_verbs_refuses_them(
    pair: Pair, state: int, request_: dict[str, Any]
) -> None:
    qa, _, _ = make_qp(pair.h0)
    pair.h0.fails("modify_qp", errno.EINVAL, qpn=qa, state=state, **request_)
