"""The P4Runtime server's Write and Read over real gRPC, with messages of every shape.

Requests are built with the protobuf classes and sent as bytes: every update of a Write that
protobuf can parse gets its own answer (never an internal error), the same updates with a field
the schema does not know (which protobuf keeps aside and ignores) are answered and stored
identically, bulk writes read back canonical, fields the switch does not interpret are kept,
and bytes that are not a message are INVALID_ARGUMENT.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import text_format
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.client import SwitchClient
from controller.entries import Entry
from controller.p4info import P4Info
from p4src import contract
from p4src.proto import p4r
from p4src.proto import rpc_code as code_pb2
from p4src.proto import rpc_status as status_pb2
from switchmodel.runtime import TargetSlot
from switchmodel.server import P4RuntimeServicer, serve

DEVICE = 9
ELECTION = 5
INFO = P4Info.load()
TABLE_IDS = [
    INFO.table_id(name) for name in (contract.IPV6_LPM, contract.MY_SID, contract.PORT_QOS)
]
ACTION_IDS = [a.preamble.id for a in INFO.proto.actions]
# a field the p4.v1 schema does not have (number 15, varint 1): protobuf keeps it as an unknown
# field and ignores it
UNKNOWN_FIELD = bytes((15 << 3, 1))

uint32 = st.integers(0, (1 << 32) - 1)
uint64 = st.integers(0, (1 << 64) - 1)
int32 = st.integers(-(1 << 31), (1 << 31) - 1)
small_bytes = st.binary(max_size=18)


# -- strategies: messages built with the protobuf classes ------------------------------------


@st.composite
def table_entries(draw: Any, covered: bool = True) -> p4r.TableEntry:
    """TableEntry messages; ``covered``: only exact and LPM matches, direct actions and no
    fields the switch does not interpret."""
    te = p4r.TableEntry(table_id=draw(st.one_of(st.sampled_from(TABLE_IDS), uint32)))
    kinds = ["lpm", "exact", "none"] + ([] if covered else ["ternary", "range", "optional"])
    for _ in range(draw(st.integers(0, 2))):
        fm = te.match.add(field_id=draw(st.one_of(st.integers(0, 2), uint32)))
        kind = draw(st.sampled_from(kinds))
        if kind == "lpm":
            fm.lpm.value = draw(small_bytes)
            fm.lpm.prefix_len = draw(st.one_of(st.integers(-1, 130), int32))
            if draw(st.booleans()):
                fm.lpm.SetInParent()
        elif kind == "exact":
            fm.exact.value = draw(small_bytes)
            fm.exact.SetInParent()
        elif kind == "ternary":
            fm.ternary.value = draw(small_bytes)
            fm.ternary.mask = draw(small_bytes)
        elif kind == "range":
            fm.range.low = draw(small_bytes)
        elif kind == "optional":
            fm.optional.value = draw(small_bytes)
    action_kinds = ["direct", "empty", "absent"] + ([] if covered else ["member"])
    action_kind = draw(st.sampled_from(action_kinds))
    if action_kind == "direct":
        action = te.action.action
        action.SetInParent()
        action.action_id = draw(st.one_of(st.sampled_from(ACTION_IDS), uint32))
        for _ in range(draw(st.integers(0, 4))):
            action.params.add(
                param_id=draw(st.one_of(st.integers(0, 4), uint32)), value=draw(small_bytes)
            )
    elif action_kind == "empty":
        te.action.SetInParent()
    elif action_kind == "member":
        te.action.action_profile_member_id = draw(uint32)
    te.priority = draw(st.one_of(st.just(0), int32))
    te.is_default_action = draw(st.booleans())
    if not covered and draw(st.booleans()):
        te.controller_metadata = draw(uint64)
        te.metadata = draw(small_bytes)
        te.counter_data.packet_count = draw(st.integers(0, (1 << 63) - 1))
    return te


@st.composite
def write_requests(draw: Any, covered: bool = True) -> p4r.WriteRequest:
    request = p4r.WriteRequest(
        device_id=draw(uint64),
        role=draw(st.text(max_size=6)),
        atomicity=draw(st.sampled_from([0, 1, 2])),
    )
    if draw(st.booleans()):
        request.election_id.high = draw(uint64)
        request.election_id.low = draw(uint64)
        request.election_id.SetInParent()
    if draw(st.booleans()):
        request.role_id = draw(uint64)
    for _ in range(draw(st.integers(0, 4))):
        u = request.updates.add(type=draw(st.sampled_from([0, 1, 2, 3])))
        if covered or draw(st.integers(0, 3)):
            u.entity.table_entry.CopyFrom(draw(table_entries(covered)))
        else:
            u.entity.counter_entry.counter_id = draw(uint32)
    return request


# -- the server over real gRPC ---------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Served:
    """An in-process P4Runtime server with a primary controller and a raw-bytes channel."""

    def __init__(self) -> None:
        self.address = f"127.0.0.1:{_free_port()}"
        self.server = serve(P4RuntimeServicer(TargetSlot(), DEVICE), self.address)
        self.client = SwitchClient(self.address, DEVICE, election_id=ELECTION, p4info=INFO)
        self.client.connect()
        self.client.set_pipeline(INFO)
        self.channel = grpc.insecure_channel(self.address)
        self.write_raw = self.channel.unary_unary("/p4.v1.P4Runtime/Write")
        self.read_raw = self.channel.unary_stream("/p4.v1.P4Runtime/Read")

    def write(self, data: bytes) -> tuple[str, list[tuple[int, str]]]:
        """The RPC status and the per-update (code, message) of a Write of ``data``."""
        try:
            self.write_raw(data, timeout=10)
        except grpc.RpcError as exc:
            details: list[tuple[int, str]] = []
            for key, value in exc.trailing_metadata() or ():
                if key == "grpc-status-details-bin":
                    for any_error in status_pb2.Status.FromString(value).details:
                        error = p4r.Error()
                        any_error.Unpack(error)
                        details.append((error.canonical_code, error.message))
            return exc.code().name, details
        return "OK", []

    def tables(self) -> list[p4r.Entity]:
        """Every table entry and every default entry, as read back."""
        request = p4r.ReadRequest(device_id=DEVICE)
        request.entities.add().table_entry.SetInParent()
        for table_id in TABLE_IDS:
            default = request.entities.add().table_entry
            default.table_id = table_id
            default.is_default_action = True
        return [
            entity
            for reply in self.read_raw(request.SerializeToString(), timeout=10)
            for entity in p4r.ReadResponse.FromString(reply).entities
        ]

    def reset(self) -> None:
        self.client.set_pipeline(INFO)  # VERIFY_AND_COMMIT: empty tables

    def stop(self) -> None:
        self.channel.close()
        self.client.close()
        self.server.stop(grace=0).wait()


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[Served, Served]]:
    plain, unknown = Served(), Served()
    yield plain, unknown
    plain.stop()
    unknown.stop()


@st.composite
def plausible_updates(draw: Any) -> p4r.Update:
    """Updates of the program's tables, often valid, often not."""
    name = draw(st.sampled_from([contract.IPV6_LPM, contract.MY_SID, contract.PORT_QOS]))
    if name == contract.PORT_QOS:
        match = {contract.EGRESS_SPEC: draw(st.integers(0, 3))}
        action, params = (
            contract.SET_PORT_QOS,
            contract.params_of(contract.PortQosParams(8, 4, 4, 0, 0)),
        )
    else:
        prefix = draw(st.sampled_from(["fcbb:bb00:100::/48", "fcbb:bb00:200::/48", "::/0"]))
        match = {contract.DST_ADDR: prefix}
        if name == contract.IPV6_LPM:
            action = contract.SET_NEXT_HOP
            params = contract.params_of(contract.NextHopParams(draw(st.integers(1, 3)), 1, 2))
        else:
            action, params = (
                draw(st.sampled_from([contract.USID_UN, contract.SRV6_END])),
                {},
            )
    te = INFO.table_entry(name, match, action, params)
    if draw(st.integers(0, 4)) == 0:  # default entry
        del te.match[:]
        te.is_default_action = True
    damage = draw(st.sampled_from(["none"] * 4 + ["param", "prefix", "priority", "action"]))
    if damage == "param" and te.action.action.params:
        te.action.action.params[0].value = b"\xff" * 8
    elif damage == "prefix" and te.match and te.match[0].HasField("lpm"):
        te.match[0].lpm.prefix_len = 200
    elif damage == "priority":
        te.priority = 3
    elif damage == "action":
        te.ClearField("action")
    u = p4r.Update(type=draw(st.sampled_from([1, 1, 2, 3, 0])))
    u.entity.table_entry.CopyFrom(te)
    return u


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(write_requests(covered=False))
def test_every_update_of_any_request_gets_an_answer(
    pair: tuple[Served, Served], request: p4r.WriteRequest
) -> None:
    served, _ = pair
    request.device_id = DEVICE
    request.role = ""
    request.election_id.high = 0
    request.election_id.low = ELECTION
    request.atomicity = p4r.WriteRequest.CONTINUE_ON_ERROR
    status, details = served.write(request.SerializeToString())
    if status == "OK":
        assert details == []
    else:
        assert status == "UNKNOWN"
        assert len(details) == len(request.updates)
        assert all(code != code_pb2.INTERNAL for code, _ in details)
        assert all(message for code, message in details if code != code_pb2.OK)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(st.lists(plausible_updates(), min_size=1, max_size=6), min_size=1, max_size=3))
def test_unknown_fields_change_no_answer_and_no_entry(
    pair: tuple[Served, Served], batches: list[list[p4r.Update]]
) -> None:
    plain, unknown = pair
    plain.reset()
    unknown.reset()
    for batch in batches:
        request = p4r.WriteRequest(device_id=DEVICE, updates=batch)
        request.election_id.low = ELECTION
        data = request.SerializeToString()
        answer = plain.write(data)
        assert answer == unknown.write(data + UNKNOWN_FIELD)
        status, details = answer
        if status != "OK":
            assert len(details) == len(batch)
            assert any(code != code_pb2.OK and message for code, message in details)
    assert plain.tables() == unknown.tables()


def test_bulk_writes_read_back(pair: tuple[Served, Served]) -> None:
    served, _ = pair
    served.reset()
    entries = [
        Entry.make(
            contract.IPV6_LPM,
            {contract.DST_ADDR: f"2001:db8:{i:x}::/48"},
            contract.SET_NEXT_HOP,
            contract.params_of(
                contract.NextHopParams(1 + i % 8, "02:00:00:00:00:01", "02:00:00:00:00:02")
            ),
        )
        for i in range(300)
    ]

    def request(updates: list[p4r.Update]) -> bytes:
        out = p4r.WriteRequest(device_id=DEVICE, updates=updates)
        out.election_id.low = ELECTION
        return bytes(out.SerializeToString())

    inserts = SwitchClient.updates(p4r.Update.INSERT, [e.to_proto(INFO) for e in entries])
    assert served.write(request(inserts)) == ("OK", [])
    read = [e.table_entry for e in served.tables() if not e.table_entry.is_default_action]
    assert read == [entry.to_proto(INFO) for entry in entries]
    # again, a few (the status of every update must fit in gRPC's trailing metadata)
    delete = SwitchClient.updates(p4r.Update.DELETE, [entries[0].to_proto(INFO)])
    status, details = served.write(request(inserts[290:] + delete))
    assert status == "UNKNOWN"
    assert [code for code, _ in details] == [code_pb2.ALREADY_EXISTS] * 10 + [code_pb2.OK]
    assert "2001:db8:12b::/48 already exists" in details[9][1]


def test_fields_the_switch_does_not_interpret_are_kept(pair: tuple[Served, Served]) -> None:
    served, _ = pair
    served.reset()
    te = INFO.table_entry(
        contract.IPV6_LPM, {contract.DST_ADDR: "fcbb:bb00:300::/48"}, contract.DROP_NO_ROUTE, {}
    )
    te.controller_metadata = 77
    te.metadata = b"cookie"
    te.counter_data.packet_count = 5  # not stored: the switch has no direct counter
    request = p4r.WriteRequest(device_id=DEVICE)
    request.election_id.low = ELECTION
    request.updates.add(type=p4r.Update.INSERT).entity.table_entry.CopyFrom(te)
    assert served.write(request.SerializeToString()) == ("OK", [])
    (found,) = [e.table_entry for e in served.tables() if e.table_entry.table_id == te.table_id][:1]
    assert found.controller_metadata == 77 and found.metadata == b"cookie"
    assert not found.HasField("counter_data")


@pytest.mark.parametrize("method", ["Write", "Read"])
@pytest.mark.parametrize("data", [b"\x22\x05\x0a", b"\x0f", b"\x08" + b"\xff" * 11])
def test_malformed_requests_are_invalid_argument(
    pair: tuple[Served, Served], method: str, data: bytes
) -> None:
    served, _ = pair
    call = (
        served.channel.unary_unary("/p4.v1.P4Runtime/Write")
        if method == "Write"
        else served.channel.unary_stream("/p4.v1.P4Runtime/Read")
    )
    with pytest.raises(grpc.RpcError) as caught:
        result = call(data, timeout=10)
        if method == "Read":
            list(result)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert ("WriteRequest" if method == "Write" else "ReadRequest") in caught.value.details()


def test_device_arbitration_and_atomicity_are_checked(pair: tuple[Served, Served]) -> None:
    served, _ = pair
    te = INFO.table_entry(
        contract.IPV6_LPM, {contract.DST_ADDR: "fcbb:bb00:400::/48"}, contract.DROP_NO_ROUTE, {}
    )
    for device, election, expected in (
        (DEVICE, ELECTION + 1, "PERMISSION_DENIED"),
        (DEVICE + 1, ELECTION, "NOT_FOUND"),
    ):
        request = p4r.WriteRequest(device_id=device)
        request.election_id.low = election
        request.updates.add(type=p4r.Update.INSERT).entity.table_entry.CopyFrom(te)
        assert served.write(request.SerializeToString()) == (expected, [])
    request = text_format.Parse(
        f"device_id: {DEVICE} election_id {{ low: {ELECTION} }} atomicity: ROLLBACK_ON_ERROR",
        p4r.WriteRequest(),
    )
    assert served.write(request.SerializeToString()) == ("UNIMPLEMENTED", [])
