"""Table-entry Write requests decoded, and Read responses encoded, straight from protobuf bytes.

The p4runtime stubs run on the pure-Python protobuf runtime (3.20), where parsing a
``p4r.WriteRequest`` of table entries and building ``p4r.ReadResponse`` messages costs several
hundred microseconds per entry: the P4Runtime server would then cap bulk writes near 2,000
entries/s. This module reads and writes the protobuf wire format of the few messages a Write of
table entries carries (``WriteRequest``, ``Uint128``, ``Update``, ``Entity``, ``TableEntry``,
``FieldMatch`` with ``Exact``/``LPM``, ``TableAction``, ``Action``, ``Action.Param``) into
immutable tuples (:class:`WriteRequestData`, :class:`TableEntryData`), with field numbers and
enum values read from the ``p4.v1`` descriptors, so nothing here restates the P4Runtime schema.

It decodes a request only when it is sure to read it as the protobuf classes would:

- :class:`Unsupported` for anything it does not cover (an unknown or deprecated-but-set field,
  another entity than a table entry, another match kind than exact or LPM, an indirect action,
  an enum value the descriptors do not name, a singular message field given twice, which
  protobuf would merge, a multi-byte tag, a string that is not UTF-8);
- :class:`Malformed` for bytes that are not a protobuf message (truncated, bad varint, length
  past the end, wire types 6 and 7).

Either way the caller parses the bytes with the protobuf classes instead (and reports the bytes
protobuf cannot parse either): behaviour never depends on which decoder ran. Scalars given twice
take the last value and repeated fields append, as protobuf does.

:func:`table_entry_data` gives the same tuple for a ``p4r.TableEntry`` parsed by protobuf, and
:func:`table_entry_proto` builds one back. :func:`encode_table_entry` writes a canonical table
entry (one match field, a direct action) as the bytes protobuf serialises for it, and
:func:`table_entry_chunk` / :func:`entity_chunk` frame an entry or an entity as one element of
``ReadResponse.entities``: a Read response is the concatenation of such chunks.
:func:`counter_entry_chunk` and :func:`register_entry_chunk` write counter and register cells
as such chunks directly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from p4.v1 import p4runtime_pb2 as p4r

_VARINT, _LEN = 0, 2
_MASK32 = (1 << 32) - 1
_MASK64 = (1 << 64) - 1
_SIGN32 = 1 << 31


class Unsupported(Exception):
    """The bytes may be valid but use something this decoder does not cover."""


class Malformed(Unsupported):
    """The bytes are not a valid protobuf message."""


class Match(NamedTuple):
    """One ``p4r.FieldMatch``."""

    field_id: int
    kind: str  # the field_match_type set: "exact", "lpm", "ternary", ...; "" when none
    value: bytes  # exact or LPM value (b"" for the other kinds)
    prefix_len: int  # LPM prefix length (0 for the other kinds)


class ActionCall(NamedTuple):
    """One ``p4r.Action``: its id and its parameters, in the order given."""

    action_id: int
    params: tuple[tuple[int, bytes], ...]  # (param_id, value)


class TableEntryData(NamedTuple):
    """What the switch reads of a ``p4r.TableEntry``."""

    table_id: int
    match: tuple[Match, ...]
    action_kind: str | None  # None: no TableAction; "" none of its oneof set; "action"; ...
    action: ActionCall | None  # the direct action when action_kind == "action"
    priority: int
    is_default_action: bool
    group_id: int = 0  # the action profile group when action_kind == "action_profile_group_id"


class WriteRequestData(NamedTuple):
    """A ``p4r.WriteRequest`` whose updates all carry table entries."""

    device_id: int
    role: str
    election_id: int  # the Uint128 as one int (0 when absent)
    atomicity: int
    updates: list[tuple[int, TableEntryData]]  # (Update.type, entry)


def _number(message: Any, name: str) -> int:
    return int(message.DESCRIPTOR.fields_by_name[name].number)


def _tag(message: Any, name: str, wire_type: int) -> int:
    number = _number(message, name)
    if number >= 16:  # pragma: no cover - the schema keeps these below 16
        raise AssertionError(f"{message.DESCRIPTOR.full_name}.{name}: tag is not one byte")
    return number << 3 | wire_type


def _enum_values(message: Any, name: str) -> frozenset[int]:
    enum = message.DESCRIPTOR.fields_by_name[name].enum_type
    return frozenset(value.number for value in enum.values)


# one-byte tags (field number << 3 | wire type), from the descriptors
_WR_DEVICE_ID = _tag(p4r.WriteRequest, "device_id", _VARINT)
_WR_ROLE_ID = _tag(p4r.WriteRequest, "role_id", _VARINT)
_WR_ROLE = _tag(p4r.WriteRequest, "role", _LEN)
_WR_ELECTION_ID = _tag(p4r.WriteRequest, "election_id", _LEN)
_WR_UPDATES = _tag(p4r.WriteRequest, "updates", _LEN)
_WR_ATOMICITY = _tag(p4r.WriteRequest, "atomicity", _VARINT)
_U128_HIGH = _tag(p4r.Uint128, "high", _VARINT)
_U128_LOW = _tag(p4r.Uint128, "low", _VARINT)
_UP_TYPE = _tag(p4r.Update, "type", _VARINT)
_UP_ENTITY = _tag(p4r.Update, "entity", _LEN)
_EN_TABLE_ENTRY = _tag(p4r.Entity, "table_entry", _LEN)
_TE_TABLE_ID = _tag(p4r.TableEntry, "table_id", _VARINT)
_TE_MATCH = _tag(p4r.TableEntry, "match", _LEN)
_TE_ACTION = _tag(p4r.TableEntry, "action", _LEN)
_TE_PRIORITY = _tag(p4r.TableEntry, "priority", _VARINT)
_TE_DEFAULT = _tag(p4r.TableEntry, "is_default_action", _VARINT)
_FM_FIELD_ID = _tag(p4r.FieldMatch, "field_id", _VARINT)
_FM_EXACT = _tag(p4r.FieldMatch, "exact", _LEN)
_FM_LPM = _tag(p4r.FieldMatch, "lpm", _LEN)
_EXACT_VALUE = _tag(p4r.FieldMatch.Exact, "value", _LEN)
_LPM_VALUE = _tag(p4r.FieldMatch.LPM, "value", _LEN)
_LPM_PREFIX_LEN = _tag(p4r.FieldMatch.LPM, "prefix_len", _VARINT)
_TA_ACTION = _tag(p4r.TableAction, "action", _LEN)
_AC_ACTION_ID = _tag(p4r.Action, "action_id", _VARINT)
_AC_PARAMS = _tag(p4r.Action, "params", _LEN)
_PA_PARAM_ID = _tag(p4r.Action.Param, "param_id", _VARINT)
_PA_VALUE = _tag(p4r.Action.Param, "value", _LEN)
_RR_ENTITIES = _tag(p4r.ReadResponse, "entities", _LEN)
_EN_COUNTER_ENTRY = _tag(p4r.Entity, "counter_entry", _LEN)
_EN_REGISTER_ENTRY = _tag(p4r.Entity, "register_entry", _LEN)
_CE_COUNTER_ID = _tag(p4r.CounterEntry, "counter_id", _VARINT)
_CE_INDEX = _tag(p4r.CounterEntry, "index", _LEN)
_CE_DATA = _tag(p4r.CounterEntry, "data", _LEN)
_INDEX_INDEX = _tag(p4r.Index, "index", _VARINT)
_CD_BYTE_COUNT = _tag(p4r.CounterData, "byte_count", _VARINT)
_CD_PACKET_COUNT = _tag(p4r.CounterData, "packet_count", _VARINT)
_RE_REGISTER_ID = _tag(p4r.RegisterEntry, "register_id", _VARINT)
_RE_INDEX = _tag(p4r.RegisterEntry, "index", _LEN)
_RE_DATA = _tag(p4r.RegisterEntry, "data", _LEN)
_DATA_BITSTRING = _tag(p4r.RegisterEntry().data, "bitstring", _LEN)

_UPDATE_TYPES = _enum_values(p4r.Update, "type")
_ATOMICITIES = _enum_values(p4r.WriteRequest, "atomicity")


# -- reading -----------------------------------------------------------------------------------


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """(value, next position) of the varint at ``pos``: at most 10 bytes, as protobuf reads."""
    byte = data[pos]
    if byte < 0x80:
        return byte, pos + 1
    result = byte & 0x7F
    shift = 7
    pos += 1
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift >= 64:
            raise Malformed("varint longer than 10 bytes")


def _int32(value: int) -> int:
    value &= _MASK32
    return (value ^ _SIGN32) - _SIGN32


def _length(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """(start, stop) of the length-delimited payload whose length is at ``pos``."""
    size, start = _varint(data, pos)
    stop = start + size
    if stop > end:
        raise Malformed("length-delimited field runs past the end of its message")
    return start, stop


def _check(pos: int, end: int) -> int:
    if pos > end:
        raise Malformed("field runs past the end of its message")
    return pos


def _tag_at(data: bytes, pos: int, what: str) -> int:
    tag = data[pos]
    if tag >= 0x80:
        raise Unsupported(f"{what}: field number beyond the ones decoded here")
    return tag


def _param(data: bytes, pos: int, end: int) -> tuple[int, bytes]:
    param_id = 0
    value = b""
    while pos < end:
        tag = _tag_at(data, pos, "Action.Param")
        if tag == _PA_PARAM_ID:
            raw, pos = _varint(data, pos + 1)
            param_id = raw & _MASK32
        elif tag == _PA_VALUE:
            start, pos = _length(data, pos + 1, end)
            value = data[start:pos]
        else:
            raise Unsupported(f"Action.Param: field tag {tag}")
    _check(pos, end)
    return param_id, value


def _action(data: bytes, pos: int, end: int) -> ActionCall:
    action_id = 0
    params: list[tuple[int, bytes]] = []
    while pos < end:
        tag = _tag_at(data, pos, "Action")
        if tag == _AC_ACTION_ID:
            raw, pos = _varint(data, pos + 1)
            action_id = raw & _MASK32
        elif tag == _AC_PARAMS:
            start, pos = _length(data, pos + 1, end)
            params.append(_param(data, start, pos))
        else:
            raise Unsupported(f"Action: field tag {tag}")
    _check(pos, end)
    return ActionCall(action_id, tuple(params))


def _table_action(data: bytes, pos: int, end: int) -> tuple[str, ActionCall | None]:
    action: ActionCall | None = None
    while pos < end:
        tag = _tag_at(data, pos, "TableAction")
        if tag == _TA_ACTION and action is None:
            start, pos = _length(data, pos + 1, end)
            action = _action(data, start, pos)
        else:
            raise Unsupported(f"TableAction: field tag {tag}")
    return ("" if action is None else "action"), action


def _lpm(data: bytes, pos: int, end: int) -> tuple[bytes, int]:
    value = b""
    prefix_len = 0
    while pos < end:
        tag = _tag_at(data, pos, "FieldMatch.LPM")
        if tag == _LPM_VALUE:
            start, pos = _length(data, pos + 1, end)
            value = data[start:pos]
        elif tag == _LPM_PREFIX_LEN:
            raw, pos = _varint(data, pos + 1)
            prefix_len = _int32(raw)
        else:
            raise Unsupported(f"FieldMatch.LPM: field tag {tag}")
    _check(pos, end)
    return value, prefix_len


def _exact(data: bytes, pos: int, end: int) -> bytes:
    value = b""
    while pos < end:
        tag = _tag_at(data, pos, "FieldMatch.Exact")
        if tag == _EXACT_VALUE:
            start, pos = _length(data, pos + 1, end)
            value = data[start:pos]
        else:
            raise Unsupported(f"FieldMatch.Exact: field tag {tag}")
    return value


def _field_match(data: bytes, pos: int, end: int) -> Match:
    field_id = 0
    kind = ""
    value = b""
    prefix_len = 0
    while pos < end:
        tag = _tag_at(data, pos, "FieldMatch")
        if tag == _FM_FIELD_ID:
            raw, pos = _varint(data, pos + 1)
            field_id = raw & _MASK32
        elif tag == _FM_LPM and not kind:
            start, pos = _length(data, pos + 1, end)
            value, prefix_len = _lpm(data, start, pos)
            kind = "lpm"
        elif tag == _FM_EXACT and not kind:
            start, pos = _length(data, pos + 1, end)
            value = _exact(data, start, pos)
            kind = "exact"
        else:
            raise Unsupported(f"FieldMatch: field tag {tag}")
    _check(pos, end)
    return Match(field_id, kind, value, prefix_len)


def _table_entry(data: bytes, pos: int, end: int) -> TableEntryData:
    table_id = 0
    match: list[Match] = []
    action_kind: str | None = None
    action: ActionCall | None = None
    priority = 0
    is_default = False
    while pos < end:
        tag = _tag_at(data, pos, "TableEntry")
        if tag == _TE_MATCH:
            start, pos = _length(data, pos + 1, end)
            match.append(_field_match(data, start, pos))
        elif tag == _TE_TABLE_ID:
            raw, pos = _varint(data, pos + 1)
            table_id = raw & _MASK32
        elif tag == _TE_ACTION and action_kind is None:
            start, pos = _length(data, pos + 1, end)
            action_kind, action = _table_action(data, start, pos)
        elif tag == _TE_PRIORITY:
            raw, pos = _varint(data, pos + 1)
            priority = _int32(raw)
        elif tag == _TE_DEFAULT:
            raw, pos = _varint(data, pos + 1)
            is_default = bool(raw & _MASK64)
        else:
            raise Unsupported(f"TableEntry: field tag {tag}")
    _check(pos, end)
    return TableEntryData(table_id, tuple(match), action_kind, action, priority, is_default)


def _update(data: bytes, pos: int, end: int) -> tuple[int, TableEntryData]:
    kind = 0
    entry: TableEntryData | None = None
    while pos < end:
        tag = _tag_at(data, pos, "Update")
        if tag == _UP_TYPE:
            raw, pos = _varint(data, pos + 1)
            kind = _int32(raw)
            if kind not in _UPDATE_TYPES:
                raise Unsupported(f"Update: type {kind} is not named in the schema")
        elif tag == _UP_ENTITY and entry is None:
            start, pos = _length(data, pos + 1, end)
            entry = _entity(data, start, pos)
        else:
            raise Unsupported(f"Update: field tag {tag}")
    _check(pos, end)
    if entry is None:
        raise Unsupported("Update: no entity")
    return kind, entry


def _entity(data: bytes, pos: int, end: int) -> TableEntryData:
    if pos >= end or data[pos] != _EN_TABLE_ENTRY:
        raise Unsupported("Entity: not a table entry")
    start, stop = _length(data, pos + 1, end)
    if stop != end:
        raise Unsupported("Entity: more than one field")
    return _table_entry(data, start, stop)


def _uint128(data: bytes, pos: int, end: int) -> int:
    high = low = 0
    while pos < end:
        tag = _tag_at(data, pos, "Uint128")
        if tag == _U128_HIGH:
            raw, pos = _varint(data, pos + 1)
            high = raw & _MASK64
        elif tag == _U128_LOW:
            raw, pos = _varint(data, pos + 1)
            low = raw & _MASK64
        else:
            raise Unsupported(f"Uint128: field tag {tag}")
    _check(pos, end)
    return high << 64 | low


def decode_write_request(data: bytes) -> WriteRequestData:
    """The WriteRequest in ``data`` (Unsupported or Malformed: parse it with protobuf instead)."""
    try:
        return _write_request(data, 0, len(data))
    except IndexError:
        raise Malformed("message truncated") from None


def _write_request(data: bytes, pos: int, end: int) -> WriteRequestData:
    device_id = 0
    role = ""
    election: int | None = None
    atomicity = 0
    updates: list[tuple[int, TableEntryData]] = []
    while pos < end:
        tag = _tag_at(data, pos, "WriteRequest")
        if tag == _WR_UPDATES:
            start, pos = _length(data, pos + 1, end)
            updates.append(_update(data, start, pos))
        elif tag == _WR_DEVICE_ID:
            raw, pos = _varint(data, pos + 1)
            device_id = raw & _MASK64
        elif tag == _WR_ELECTION_ID and election is None:
            start, pos = _length(data, pos + 1, end)
            election = _uint128(data, start, pos)
        elif tag == _WR_ROLE:
            start, pos = _length(data, pos + 1, end)
            try:
                role = data[start:pos].decode("utf-8")
            except UnicodeDecodeError:
                raise Unsupported("WriteRequest: role is not UTF-8") from None
        elif tag == _WR_ATOMICITY:
            raw, pos = _varint(data, pos + 1)
            atomicity = _int32(raw)
            if atomicity not in _ATOMICITIES:
                raise Unsupported(f"WriteRequest: atomicity {atomicity} is not named in the schema")
        elif tag == _WR_ROLE_ID:  # deprecated, ignored by the server as by the protobuf path
            _, pos = _varint(data, pos + 1)
        else:
            raise Unsupported(f"WriteRequest: field tag {tag}")
    _check(pos, end)
    return WriteRequestData(device_id, role, election or 0, atomicity, updates)


# -- from and to the protobuf classes ----------------------------------------------------------


def table_entry_data(entry: p4r.TableEntry) -> TableEntryData:
    """The tuple :func:`decode_write_request` would give for ``entry``."""
    match = []
    for fm in entry.match:
        kind = fm.WhichOneof("field_match_type") or ""
        if kind == "lpm":
            match.append(Match(fm.field_id, kind, fm.lpm.value, fm.lpm.prefix_len))
        elif kind == "exact":
            match.append(Match(fm.field_id, kind, fm.exact.value, 0))
        else:
            match.append(Match(fm.field_id, kind, b"", 0))
    action_kind: str | None = None
    action: ActionCall | None = None
    group_id = 0
    if entry.HasField("action"):
        action_kind = entry.action.WhichOneof("type") or ""
        if action_kind == "action":
            call = entry.action.action
            action = ActionCall(
                call.action_id, tuple((param.param_id, param.value) for param in call.params)
            )
        elif action_kind == "action_profile_group_id":
            group_id = int(entry.action.action_profile_group_id)
    return TableEntryData(
        entry.table_id,
        tuple(match),
        action_kind,
        action,
        entry.priority,
        entry.is_default_action,
        group_id,
    )


def table_entry_proto(entry: TableEntryData) -> p4r.TableEntry:
    """A ``p4r.TableEntry`` holding ``entry`` (exact and LPM matches, direct actions)."""
    out = p4r.TableEntry(
        table_id=entry.table_id,
        priority=entry.priority,
        is_default_action=entry.is_default_action,
    )
    for match in entry.match:
        fm = out.match.add(field_id=match.field_id)
        if match.kind == "lpm":
            fm.lpm.value = match.value
            fm.lpm.prefix_len = match.prefix_len
        elif match.kind == "exact":
            fm.exact.value = match.value
        elif match.kind:
            raise ValueError(f"table_entry_proto: match kind {match.kind!r} is not covered")
    if entry.action_kind is not None:
        out.action.SetInParent()
        if entry.action is not None:
            call = out.action.action
            call.action_id = entry.action.action_id
            call.SetInParent()
            for param_id, value in entry.action.params:
                call.params.add(param_id=param_id, value=value)
        elif entry.action_kind:
            raise ValueError(f"table_entry_proto: action kind {entry.action_kind!r} is not covered")
    return out


# -- writing -----------------------------------------------------------------------------------


def _varint_bytes(value: int) -> bytes:
    if value < 0x80:
        return _SMALL[value]
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL = [bytes((i,)) for i in range(0x80)]


def _len_field(tag: int, payload: bytes) -> bytes:
    """A length-delimited field (always written: an empty submessage is still present)."""
    size = len(payload)
    return _SMALL[tag] + (_SMALL[size] if size < 0x80 else _varint_bytes(size)) + payload


def _bytes_field(tag: int, value: bytes) -> bytes:
    """A proto3 bytes field (omitted when empty)."""
    return _len_field(tag, value) if value else b""


def _uint_field(tag: int, value: int) -> bytes:
    """A proto3 unsigned varint field (omitted when zero)."""
    return _SMALL[tag] + _varint_bytes(value) if value else b""


def encode_table_entry(
    table_id: int,
    field_id: int,
    lpm: bool,
    value: bytes,
    prefix_len: int,
    action_id: int,
    params: Sequence[tuple[int, bytes]],
) -> bytes:
    """The bytes protobuf serialises for a TableEntry with one exact or LPM match field (none
    when ``lpm`` and ``prefix_len`` is 0: the don't-care /0) and a direct action.

    Values are the canonical byte strings to store; ``prefix_len`` and ids are non-negative.
    """
    if lpm:
        match = _len_field(
            _FM_LPM, _bytes_field(_LPM_VALUE, value) + _uint_field(_LPM_PREFIX_LEN, prefix_len)
        )
    else:
        match = _len_field(_FM_EXACT, _bytes_field(_EXACT_VALUE, value))
    action = _uint_field(_AC_ACTION_ID, action_id) + b"".join(
        [
            _len_field(
                _AC_PARAMS,
                _uint_field(_PA_PARAM_ID, param_id) + _bytes_field(_PA_VALUE, param_value),
            )
            for param_id, param_value in params
        ]
    )
    return (
        _uint_field(_TE_TABLE_ID, table_id)
        + (
            b""
            if lpm and prefix_len == 0
            else _len_field(_TE_MATCH, _uint_field(_FM_FIELD_ID, field_id) + match)
        )
        + _len_field(_TE_ACTION, _len_field(_TA_ACTION, action))
    )


def entity_chunk(entity: bytes) -> bytes:
    """A serialised ``p4r.Entity`` framed as one element of ``ReadResponse.entities``."""
    return _len_field(_RR_ENTITIES, entity)


def table_entry_chunk(table_entry: bytes) -> bytes:
    """A serialised ``p4r.TableEntry`` framed as one entity of ``ReadResponse.entities``."""
    return _len_field(_RR_ENTITIES, _len_field(_EN_TABLE_ENTRY, table_entry))


def counter_entry_chunk(counter_id: int, index: int, packets: int, nbytes: int) -> bytes:
    """One counter cell (``p4r.CounterEntry`` with its index and data) framed as one entity of
    ``ReadResponse.entities``; counts are non-negative."""
    entry = (
        _uint_field(_CE_COUNTER_ID, counter_id)
        + _len_field(_CE_INDEX, _uint_field(_INDEX_INDEX, index))
        + _len_field(
            _CE_DATA, _uint_field(_CD_BYTE_COUNT, nbytes) + _uint_field(_CD_PACKET_COUNT, packets)
        )
    )
    return _len_field(_RR_ENTITIES, _len_field(_EN_COUNTER_ENTRY, entry))


def register_entry_chunk(register_id: int, index: int, bitstring: bytes) -> bytes:
    """One register cell (``p4r.RegisterEntry`` with its index and bitstring data) framed as one
    entity of ``ReadResponse.entities``."""
    entry = (
        _uint_field(_RE_REGISTER_ID, register_id)
        + _len_field(_RE_INDEX, _uint_field(_INDEX_INDEX, index))
        + _len_field(_RE_DATA, _bytes_field(_DATA_BITSTRING, bitstring))
    )
    return _len_field(_RR_ENTITIES, _len_field(_EN_REGISTER_ENTRY, entry))
