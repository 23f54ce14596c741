"""Explicit EV profiles of the controller API expand their EVs through their fields
(host/transport/evs.py ``expand_ev``, docs/ocp-api.md), on two in-memory hosts: compact SRV6 EVs
(three uSIDs each) under a fixed locator field go ONLINE as the carriers they expand to,
QUERY_EV_ARRAY gives them back as given, a QP's data crosses on their paths, and their states
are addressed by the EVs as given; compact STEV EVs through a partial mask reach the wire
expanded."""

from __future__ import annotations

import errno
import os
from typing import Any

import pytest
import test_ocp_provider as provider_tests
from test_ocp_provider import INIT, Pair, connect, make_qp, write_arrives_intact

from host.agent.ocp import abi as P
from topologies import Fabric

if os.geteuid() != 0:
    pytest.skip("the controller API modifies profiles as root only", allow_module_level=True)

fabric = provider_tests.fabric  # the fixtures: the small fabric, two in-memory hosts
pair = provider_tests.pair
BLOCK = 0xFCBB_BB00


def fixed(width: int, value: int = 0) -> list[int]:
    """An mrc_ctl_ev_field that takes no EV bit: [width, init_val, min_val, max_val, mask]."""
    return [width, value, 0, 0, 0]


def whole(width: int) -> list[int]:
    return [width, 0, 0, (1 << width) - 1, (1 << width) - 1]


def fmt_profile(side: Any, fmt_id: int, mode: int, widths: list[int]) -> None:
    side.ok("ev_fmt_profile", op="modify", id=fmt_id, mode=mode, state=P.ProfileState.OFFLINE,
            mask=P.FmtMask.MODE | P.FmtMask.STATE | P.FmtMask.OP, fields_op=P.FieldsOp.MODIFY,
            fields=widths)  # fmt: skip
    side.ok("ev_fmt_profile", op="modify", id=fmt_id, mask=P.FmtMask.STATE,
            state=P.ProfileState.ONLINE)  # fmt: skip


def explicit(side: Any, pid: int, fmt_id: int, fields: list[list[int]],
             entries: list[tuple[str, int]]) -> dict[str, Any]:  # fmt: skip
    """EV profile ``pid``: EXP with ``fields``, every EV replaced, then ONLINE (the reply)."""
    ev = {"op": "modify", "id": pid}
    side.ok("ev_profile", **ev, state=P.ProfileState.OFFLINE, mode=P.EvMode.EXP, fmt_id=fmt_id,
            count=len(entries), fields_op=P.FieldsOp.MODIFY, fields=fields,
            mask=P.EvMask.STATE | P.EvMask.MODE | P.EvMask.FMT_ID | P.EvMask.COUNT
            | P.EvMask.FIELDS_OP)  # fmt: skip
    for value, port in entries:
        side.ok("ev_profile", **ev, mask=P.EvMask.EV_OP, ev_op=P.EvOp.REPLACE,
                entries=[["00" * 32, 0, value, port, 0, 0]])  # fmt: skip
    return side.call("ev_profile", **ev, mask=P.EvMask.STATE, state=P.ProfileState.ONLINE)


def compact_hex(value: int) -> str:
    """A compact SRV6 EV in mrc_ctl_ev_t: the number at the end of the first 16 bytes."""
    return value.to_bytes(16, "big").ljust(32, b"\0").hex()


def test_compact_srv6_evs_under_a_fixed_locator(pair: Pair, fabric: Fabric) -> None:
    h0, h1 = pair.h0, pair.h1
    fmt_profile(h0, 4, P.EvFmtMode.SRV6, [32, 16, 16, 64])
    fields = [fixed(32, BLOCK), whole(16), whole(16)]  # the block, the leaf's and NIC's uSIDs
    paths = fabric.paths("h0", "h1")  # same rack: two uSIDs after the block
    entries = [(compact_hex(int(p.carrier) >> 64 & 0xFFFF_FFFF), p.plane + 1) for p in paths]
    reply = explicit(h0, 8, 4, fields, entries)
    assert reply["ok"], reply
    array = h0.ok("ev_profile", op="query", id=8, mask=P.EvMask.EV_OP,
                  ev_op=P.EvOp.QUERY_ARRAY, entries=[0] * len(entries))["array"]  # fmt: skip
    assert array == [[h[:32], port] for h, port in entries]  # as given
    qa, scq, _ = make_qp(h0)
    qb, _, _ = make_qp(h1)
    connect(h0, qa, h1, qb, ev_profile=8, cc_profile=0)
    slots = h0.agent.context.qp(qa).ev_table.slots
    assert [s.path for s in slots] == paths and [s.dst for s in slots] == [
        p.carrier for p in paths
    ]  # the packets go to the expanded carriers
    write_arrives_intact(pair, qa, scq)
    # states by the EV as given
    one = [
        entries[0][0],
        entries[0][1],
        "",
        0,
        P.EvStateBit.of(provider_tests.ocp_evstate("denied")),
        0,
    ]
    h0.ok("ev_profile", op="modify", id=8, mask=P.EvMask.EV_OP, ev_op=P.EvOp.MODIFY_STATE,
          entries=[one])  # fmt: skip
    assert slots[0].state.value == "denied"

    # a compact EV its fields cannot expand (wider than their masks): EINVAL naming it
    bad = [entries[0], (compact_hex(1 << 32), 1)]
    reply = explicit(h0, 9, 4, fields, bad)
    assert reply["errno"] == errno.EINVAL and reply["index"] == 1, reply
    assert "wider than the 32 bits" in reply["error"], reply


def test_compact_stev_evs_through_a_partial_mask(pair: Pair) -> None:
    h0, h1 = pair.h0, pair.h1
    fmt_profile(h0, 5, P.EvFmtMode.STEV, [8, 12, 12])
    fields = [fixed(8, 0x3C), [12, 0x0A0, 0, 255, 0xF0F], whole(12)]
    given = [0x5C_123, 0x5C_124, 0x11_001, 0x11_002]
    entries = [
        (ev.to_bytes(4, "big").ljust(32, b"\0").hex(), 1 + n % 2) for n, ev in enumerate(given)
    ]
    assert explicit(h0, 8, 5, fields, entries)["ok"]
    array = h0.ok("ev_profile", op="query", id=8, mask=P.EvMask.EV_OP,
                  ev_op=P.EvOp.QUERY_ARRAY, entries=[0] * 4)["array"]  # fmt: skip
    assert [int(h, 16) >> 96 for h, _ in array] == given  # as given, in the first four bytes
    qa, scq, _ = make_qp(h0)
    qb, _, _ = make_qp(h1)
    h0.ok("modify_qp", qpn=qa, state=INIT, ev_profile=8)
    connect(h0, qa, h1, qb, ev_profile=8, cc_profile=0)
    slots = h0.agent.context.qp(qa).ev_table.slots
    assert [s.ev for s in slots] == given
    assert [s.wire for s in slots] == [0x3C_5AC_123, 0x3C_5AC_124, 0x3C_1A1_001, 0x3C_1A1_002]
    write_arrives_intact(pair, qa, scq)
