"""The wire-format decoder and encoder of switchmodel.wire against the protobuf classes, and the
P4Runtime server's two Write paths (wire decoder, protobuf fallback) over real gRPC.

Messages are built with the protobuf classes, serialised, and read both ways: the decoder must
give exactly what protobuf parses, or decline (Unsupported) so the server falls back to protobuf;
it must never accept bytes protobuf refuses. Over gRPC, the same updates sent so that the fast
path takes them and so that the fallback does must be answered and stored identically, and bytes
that are not a message are INVALID_ARGUMENT.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import text_format
from google.rpc import code_pb2, status_pb2
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from p4.v1 import p4runtime_pb2 as p4r

from controller.client import SwitchClient
from controller.encode import UpdateEncoder, write_request
from controller.entries import Entry
from controller.p4info import P4Info
from switchmodel import wire
from switchmodel.runtime import TargetSlot, canonical
from switchmodel.server import P4RuntimeServicer, election_value, serve

DEVICE = 9
ELECTION = 5
INFO = P4Info.load()
LPM = "MrcIngress.ipv6_lpm"
SID = "MrcIngress.my_sid"
QOS = "MrcIngress.port_qos"
DST = "hdr.ipv6.dst_addr"
TABLE_IDS = [INFO.table_id(name) for name in (LPM, SID, QOS)]
ACTION_IDS = [a.preamble.id for a in INFO.proto.actions]
# a field the p4.v1 schema does not have (number 15, varint 1): protobuf keeps it as an unknown
# field and ignores it, the wire decoder declines the request
UNKNOWN_FIELD = bytes((15 << 3, 1))

uint32 = st.integers(0, (1 << 32) - 1)
uint64 = st.integers(0, (1 << 64) - 1)
int32 = st.integers(-(1 << 31), (1 << 31) - 1)
small_bytes = st.binary(max_size=18)


def slow(data: bytes) -> wire.WriteRequestData | None:
    """What the protobuf classes read in ``data``, as the wire decoder's tuple (None when an
    update is not a table entry)."""
    request = p4r.WriteRequest.FromString(data)
    updates = []
    for u in request.updates:
        if u.entity.WhichOneof("entity") != "table_entry":
            return None
        updates.append((u.type, wire.table_entry_data(u.entity.table_entry)))
    return wire.WriteRequestData(
        request.device_id,
        request.role,
        election_value(request.election_id),
        request.atomicity,
        updates,
    )


# -- strategies: messages built with the protobuf classes ------------------------------------


@st.composite
def table_entries(draw: Any, covered: bool = True) -> p4r.TableEntry:
    """TableEntry messages; ``covered``: only the fields the wire decoder reads."""
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


# -- the decoder against protobuf -------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(write_requests())
def test_decoder_reads_what_protobuf_reads(request: p4r.WriteRequest) -> None:
    data = request.SerializeToString()
    assert wire.decode_write_request(data) == slow(data)


@settings(max_examples=200, deadline=None)
@given(write_requests(covered=False), write_requests(covered=False))
def test_decoder_agrees_or_declines_beyond_what_it_covers(
    first: p4r.WriteRequest, second: p4r.WriteRequest
) -> None:
    # two messages concatenated parse as their merge: repeated singular fields, mixed oneofs
    for data in (first.SerializeToString(), first.SerializeToString() + second.SerializeToString()):
        try:
            fast = wire.decode_write_request(data)
        except wire.Unsupported:
            continue
        assert fast == slow(data)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(message: Any, name: str, payload: bytes | int) -> bytes:
    """One field of ``message`` written by hand: a varint, or length-delimited bytes."""
    number = message.DESCRIPTOR.fields_by_name[name].number
    if isinstance(payload, int):
        return _varint(number << 3) + _varint(payload)
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


@st.composite
def merged_requests(draw: Any) -> bytes:
    """Requests whose nested messages are given in pieces (protobuf merges them): a FieldMatch
    of two FieldMatches, a TableEntry of two TableEntries, an Update with two entities, an
    Entity with two fields."""
    pieces = [draw(table_entries(covered=draw(st.integers(0, 3)) > 0)) for _ in range(3)]
    if draw(st.integers(0, 2)):  # often the second piece only adds scalars
        pieces[1].ClearField("action")
        del pieces[1].match[:]
    halves = p4r.FieldMatch(field_id=1), p4r.FieldMatch(field_id=1)
    halves[0].lpm.value = b"\x20"
    halves[1].lpm.prefix_len = 8
    matches = [fm for te in pieces for fm in te.match] + [p4r.FieldMatch()]
    match = b"".join(
        draw(st.one_of(st.sampled_from(halves), st.sampled_from(matches))).SerializeToString()
        for _ in range(draw(st.integers(1, 2)))
    )
    entry = (
        pieces[0].SerializeToString()
        + pieces[1].SerializeToString()
        + _field(p4r.TableEntry, "match", match)
    )
    update = p4r.Update(type=draw(st.sampled_from([1, 2, 3]))).SerializeToString()
    entity = _field(p4r.Entity, "table_entry", entry)
    if draw(st.integers(0, 3)) == 0:
        other = draw(st.sampled_from(["table_entry", "counter_entry"]))
        entity += _field(p4r.Entity, other, pieces[2].SerializeToString())
    update += _field(p4r.Update, "entity", entity)
    if draw(st.booleans()):
        second = _field(p4r.Entity, "table_entry", pieces[2].SerializeToString())
        update += _field(p4r.Update, "entity", second)
    return draw(write_requests()).SerializeToString() + _field(p4r.WriteRequest, "updates", update)


@settings(max_examples=300, deadline=None)
@given(merged_requests())
def test_decoder_agrees_or_declines_on_merged_messages(data: bytes) -> None:
    try:
        fast = wire.decode_write_request(data)
    except wire.Unsupported:
        return
    assert fast == slow(data)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, (1 << 70) - 1), min_size=5, max_size=5))
@example([1 << 64, (1 << 32) | 7, 1 << 31, (1 << 32) - 1, 1 << 64])
@example([(1 << 70) - 1] * 5)
def test_varints_up_to_ten_bytes_are_cut_to_the_field_type(values: list[int]) -> None:
    # uint64 device id, uint32 table id, int32 priority and prefix length, bool default flag
    device, table, priority, prefix_len, default = values
    fm = _field(p4r.FieldMatch, "lpm", _field(p4r.FieldMatch.LPM, "prefix_len", prefix_len))
    entry = (
        _field(p4r.TableEntry, "table_id", table)
        + _field(p4r.TableEntry, "priority", priority)
        + _field(p4r.TableEntry, "is_default_action", default)
        + _field(p4r.TableEntry, "match", fm)
    )
    update = _field(p4r.Update, "entity", _field(p4r.Entity, "table_entry", entry))
    data = _field(p4r.WriteRequest, "device_id", device) + _field(
        p4r.WriteRequest, "updates", update
    )
    assert wire.decode_write_request(data) == slow(data)


@st.composite
def damaged(draw: Any) -> bytes:
    """Bytes near a valid WriteRequest: truncated, with bytes changed or inserted, or random."""
    data = bytearray(draw(write_requests()).SerializeToString())
    how = draw(st.sampled_from(["truncate", "change", "insert", "random"]))
    if how == "random":
        return draw(st.binary(max_size=64))
    if how == "truncate" and data:
        return bytes(data[: draw(st.integers(0, len(data) - 1))])
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(data)))
        byte = draw(st.integers(0, 255))
        if how == "change" and at < len(data):
            data[at] = byte
        else:
            data.insert(at, byte)
    return bytes(data)


@settings(max_examples=500, deadline=None)
@given(damaged())
def test_damaged_bytes_are_read_as_protobuf_reads_them_or_declined(data: bytes) -> None:
    try:
        fast = wire.decode_write_request(data)
    except wire.Unsupported:  # Malformed included: the server then asks protobuf
        return
    # the decoder accepted the bytes: protobuf must parse them, to the same request
    assert fast == slow(data)


@pytest.mark.parametrize(
    "data",
    [
        b"\x22",  # updates: length missing
        b"\x22\x05\x0a",  # updates: 5 bytes announced, 1 given
        b"\x08" + b"\xff" * 10 + b"\x01",  # device_id: varint of 11 bytes
        b"\x22\x03\x12\x05\x12",  # entity longer than its update
        b"\x0f",  # wire type 7
        b"\x00\x01",  # field number 0
        b"\x32\x01\xff",  # role: not UTF-8
    ],
)
def test_malformed_bytes_are_declined(data: bytes) -> None:
    with pytest.raises(wire.Unsupported):
        wire.decode_write_request(data)
    with pytest.raises(Exception):  # noqa: B017 - whatever protobuf raises: not a message
        p4r.WriteRequest.FromString(data)


# -- the encoder against protobuf -------------------------------------------------------------


@st.composite
def canonical_entries(draw: Any) -> tuple[dict[str, Any], p4r.TableEntry]:
    """Arguments of encode_table_entry and the p4r.TableEntry protobuf builds for them."""
    lpm = draw(st.booleans())
    value = draw(st.integers(0, (1 << 128) - 1))
    prefix_len = draw(st.integers(0, 128)) if lpm else 0
    params = [(draw(st.integers(1, 1 << 20)), canonical(draw(uint64))) for _ in range(3)]
    args = {
        "table_id": draw(uint32),
        "field_id": draw(st.integers(1, 4)),
        "lpm": lpm,
        "value": canonical(value),
        "prefix_len": prefix_len,
        "action_id": draw(uint32),
        "params": params[: draw(st.integers(0, 3))],
    }
    te = p4r.TableEntry(table_id=args["table_id"])
    if not (lpm and prefix_len == 0):
        fm = te.match.add(field_id=args["field_id"])
        if lpm:
            fm.lpm.value = args["value"]
            fm.lpm.prefix_len = prefix_len
        else:
            fm.exact.value = args["value"]
    te.action.action.SetInParent()
    te.action.action.action_id = args["action_id"]
    for param_id, param_value in args["params"]:
        te.action.action.params.add(param_id=param_id, value=param_value)
    return args, te


@settings(max_examples=300, deadline=None)
@given(canonical_entries())
def test_encoder_writes_the_bytes_protobuf_serialises(
    case: tuple[dict[str, Any], p4r.TableEntry],
) -> None:
    args, te = case
    data = wire.encode_table_entry(**args)
    assert data == te.SerializeToString()
    (entity,) = p4r.ReadResponse.FromString(wire.table_entry_chunk(data)).entities
    assert entity.table_entry == te
    assert p4r.ReadResponse.FromString(
        wire.entity_chunk(p4r.Entity(table_entry=te).SerializeToString())
    ).entities[0] == p4r.Entity(table_entry=te)


int64_counts = st.integers(0, (1 << 63) - 1)


@settings(max_examples=200, deadline=None)
@given(uint32, st.integers(0, 1 << 20), int64_counts, int64_counts, st.integers(0, (1 << 19) - 1))
def test_counter_and_register_cells_are_the_bytes_protobuf_serialises(
    object_id: int, index: int, packets: int, nbytes: int, value: int
) -> None:
    counter = p4r.CounterEntry(counter_id=object_id)
    counter.index.index = index
    counter.data.packet_count = packets
    counter.data.byte_count = nbytes
    expected = p4r.ReadResponse(entities=[p4r.Entity(counter_entry=counter)])
    chunk = wire.counter_entry_chunk(object_id, index, packets, nbytes)
    assert chunk == expected.SerializeToString()
    register = p4r.RegisterEntry(register_id=object_id)
    register.index.index = index
    register.data.bitstring = canonical(value)
    expected = p4r.ReadResponse(entities=[p4r.Entity(register_entry=register)])
    chunk = wire.register_entry_chunk(object_id, index, canonical(value))
    assert chunk == expected.SerializeToString()


@settings(max_examples=200, deadline=None)
@given(table_entries())
def test_table_entry_proto_round_trips(te: p4r.TableEntry) -> None:
    assert wire.table_entry_proto(wire.table_entry_data(te)) == te


# -- the server's two Write paths over real gRPC ----------------------------------------------


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
            for chunk in self.read_raw(request.SerializeToString(), timeout=10)
            for entity in p4r.ReadResponse.FromString(chunk).entities
        ]

    def reset(self) -> None:
        self.client.set_pipeline(INFO)  # VERIFY_AND_COMMIT: empty tables

    def stop(self) -> None:
        self.channel.close()
        self.client.close()
        self.server.stop(grace=0).wait()


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[Served, Served]]:
    fast, fallback = Served(), Served()
    yield fast, fallback
    fast.stop()
    fallback.stop()


@st.composite
def plausible_updates(draw: Any) -> p4r.Update:
    """Updates of the program's tables, often valid, often not."""
    name = draw(st.sampled_from([LPM, SID, QOS]))
    if name == QOS:
        match = {"standard_metadata.egress_spec": draw(st.integers(0, 3))}
        action, params = (
            "MrcIngress.set_port_qos",
            {
                "trim_threshold": 8,
                "ecn_threshold": 4,
                "ecn_max_threshold": 4,
                "ecn_slope": 0,
                "last_hop": 0,
            },
        )
    else:
        prefix = draw(st.sampled_from(["fcbb:bb00:100::/48", "fcbb:bb00:200::/48", "::/0"]))
        match = {DST: prefix}
        if name == LPM:
            action = "MrcIngress.set_next_hop"
            params = {"port": draw(st.integers(1, 3)), "smac": 1, "dmac": 2}
        else:
            action, params = (
                draw(st.sampled_from(["MrcIngress.usid_un", "MrcIngress.srv6_end"])),
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
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(st.lists(plausible_updates(), min_size=1, max_size=6), min_size=1, max_size=3))
def test_fast_and_fallback_writes_answer_and_store_the_same(
    pair: tuple[Served, Served], batches: list[list[p4r.Update]]
) -> None:
    fast, fallback = pair
    fast.reset()
    fallback.reset()
    for batch in batches:
        request = p4r.WriteRequest(device_id=DEVICE, updates=batch)
        request.election_id.low = ELECTION
        data = request.SerializeToString()
        wire.decode_write_request(data)  # the fast path takes it (raises otherwise)
        with pytest.raises(wire.Unsupported):
            wire.decode_write_request(data + UNKNOWN_FIELD)
        answer = fast.write(data)
        assert answer == fallback.write(data + UNKNOWN_FIELD)
        status, details = answer
        if status != "OK":
            assert len(details) == len(batch)
            assert any(code != code_pb2.OK and message for code, message in details)
    assert fast.tables() == fallback.tables()


def test_bulk_encoded_writes_take_the_fast_path_and_read_back(
    pair: tuple[Served, Served],
) -> None:
    fast, _ = pair
    fast.reset()
    encoder = UpdateEncoder(INFO)
    entries = [
        Entry.make(
            LPM,
            {DST: f"2001:db8:{i:x}::/48"},
            "MrcIngress.set_next_hop",
            {"port": 1 + i % 8, "smac": "02:00:00:00:00:01", "dmac": "02:00:00:00:00:02"},
        )
        for i in range(300)
    ]
    data = write_request(
        DEVICE, ELECTION, [encoder.update(p4r.Update.INSERT, entry) for entry in entries]
    )
    assert len(wire.decode_write_request(data).updates) == 300
    assert fast.write(data) == ("OK", [])
    read = [e.table_entry for e in fast.tables() if not e.table_entry.is_default_action]
    assert read == [entry.to_proto(INFO) for entry in entries]
    # again, a few (the status of every update must fit in gRPC's trailing metadata)
    again = write_request(
        DEVICE,
        ELECTION,
        [encoder.update(p4r.Update.INSERT, entry) for entry in entries[290:]]
        + [encoder.update(p4r.Update.DELETE, entries[0])],
    )
    status, details = fast.write(again)
    assert status == "UNKNOWN"
    assert [code for code, _ in details] == [code_pb2.ALREADY_EXISTS] * 10 + [code_pb2.OK]
    assert "2001:db8:12b::/48 already exists" in details[9][1]


def test_fields_beyond_the_decoder_are_kept_by_the_fallback(pair: tuple[Served, Served]) -> None:
    fast, _ = pair
    fast.reset()
    te = INFO.table_entry(LPM, {DST: "fcbb:bb00:300::/48"}, "MrcIngress.drop_no_route", {})
    te.controller_metadata = 77
    te.metadata = b"cookie"
    te.counter_data.packet_count = 5  # not stored: the switch has no direct counter
    request = p4r.WriteRequest(device_id=DEVICE)
    request.election_id.low = ELECTION
    request.updates.add(type=p4r.Update.INSERT).entity.table_entry.CopyFrom(te)
    data = request.SerializeToString()
    with pytest.raises(wire.Unsupported):
        wire.decode_write_request(data)
    assert fast.write(data) == ("OK", [])
    (found,) = [e.table_entry for e in fast.tables() if e.table_entry.table_id == te.table_id][:1]
    assert found.controller_metadata == 77 and found.metadata == b"cookie"
    assert not found.HasField("counter_data")


@pytest.mark.parametrize("method", ["Write", "Read"])
@pytest.mark.parametrize("data", [b"\x22\x05\x0a", b"\x0f", b"\x08" + b"\xff" * 11])
def test_malformed_requests_are_invalid_argument(
    pair: tuple[Served, Served], method: str, data: bytes
) -> None:
    fast, _ = pair
    call = (
        fast.channel.unary_unary("/p4.v1.P4Runtime/Write")
        if method == "Write"
        else fast.channel.unary_stream("/p4.v1.P4Runtime/Read")
    )
    with pytest.raises(grpc.RpcError) as caught:
        result = call(data, timeout=10)
        if method == "Read":
            list(result)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert ("WriteRequest" if method == "Write" else "ReadRequest") in caught.value.details()


def test_arbitration_is_checked_on_the_fast_path(pair: tuple[Served, Served]) -> None:
    fast, _ = pair
    te = INFO.table_entry(LPM, {DST: "fcbb:bb00:400::/48"}, "MrcIngress.drop_no_route", {})
    for device, election, expected in (
        (DEVICE, ELECTION + 1, "PERMISSION_DENIED"),
        (DEVICE + 1, ELECTION, "NOT_FOUND"),
    ):
        request = p4r.WriteRequest(device_id=device)
        request.election_id.low = election
        request.updates.add(type=p4r.Update.INSERT).entity.table_entry.CopyFrom(te)
        data = request.SerializeToString()
        wire.decode_write_request(data)
        assert fast.write(data) == (expected, [])
    request = text_format.Parse(
        f"device_id: {DEVICE} election_id {{ low: {ELECTION} }} atomicity: ROLLBACK_ON_ERROR",
        p4r.WriteRequest(),
    )
    assert fast.write(request.SerializeToString()) == ("UNIMPLEMENTED", [])
