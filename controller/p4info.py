"""The P4Info of the mrc_switch pipeline: names to ids, and table entries built and read by name.

:class:`P4Info` wraps one ``p4i.P4Info`` message (loaded from the committed text file
``p4src/mrc_switch.p4info.txtpb``) and is the only place in the controller that turns names into
ids and readable values into P4Runtime bytes, and back:

- ``table_id`` / ``action_id`` / ``counter_id`` / ``register_id``: ids by full name
  (``MrcIngress.ipv6_lpm``) or by any unambiguous suffix (``ipv6_lpm``);
- :meth:`P4Info.table_entry` / :meth:`P4Info.default_entry`: build ``p4r.TableEntry`` messages
  from readable values (IPv6 text ``fcbb:bb00:400::/48``, MAC text, integers, bytes);
- :meth:`P4Info.profile_member` / :meth:`P4Info.profile_group`: action profile members and
  groups (the ECMP groups of ``MrcIngress.ipv6_ecmp``), and table entries pointing at a group
  (``table_entry(..., group_id=N)``);
- :meth:`P4Info.decode` / :meth:`P4Info.describe` (and :meth:`P4Info.decode_member`,
  :meth:`P4Info.decode_group`): the reverse, for ``show``, ``diff`` and error messages;
- :meth:`P4Info.missing`: what keeps a P4Info from being the program of the contract
  (:func:`p4src.contract.p4info_problems`), so a wrong P4Info is reported by name before anything
  is written.

Names resolve in full (``MrcIngress.ipv6_lpm``) or by any unambiguous dotted suffix; byte strings
are sent in canonical form (no leading zero bytes), as the P4Runtime specification asks.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from google.protobuf import text_format

from p4src import contract
from p4src.compile import P4_JSON, P4_P4INFO
from p4src.proto import p4i, p4r

REPO_ROOT = Path(__file__).resolve().parent.parent

#: A readable value for a match field or action parameter: an integer, raw bytes, or text
#: (IPv6 address, ``addr/len`` prefix for LPM, MAC address, decimal or ``0x`` hex number).
Value = int | bytes | str | ipaddress.IPv6Address | ipaddress.IPv6Network


def default_p4info_path() -> Path:
    """The committed P4Info of the mrc_switch program (``p4src/compile.py`` names it)."""
    return P4_P4INFO


def default_bmv2_json_path() -> Path:
    """The committed BMv2 JSON of the mrc_switch program (p4c's output, see ``./testbed p4``)."""
    return P4_JSON


class P4InfoError(ValueError):
    """A P4Info file that cannot be read, or a name or value the P4Info does not accept."""


@dataclass(frozen=True)
class DecodedEntry:
    """A table entry in readable form: names instead of ids, text and integers instead of bytes."""

    table: str
    match: dict[str, str] = field(default_factory=dict)  # field name -> "addr/len", "12", ...
    action: str = ""
    params: dict[str, str] = field(default_factory=dict)
    priority: int = 0
    is_default: bool = False
    group: int = 0  # the action profile group the entry points at (0: a direct action)

    def __str__(self) -> str:
        keys = ", ".join(f"{k}={v}" for k, v in self.match.items()) or "default"
        args = ", ".join(f"{k}={v}" for k, v in self.params.items())
        prio = f" priority {self.priority}" if self.priority else ""
        if self.group:
            return f"{self.table} [{keys}]{prio} -> group {self.group}"
        return f"{self.table} [{keys}]{prio} -> {self.action or 'NoAction'}({args})"


@dataclass(frozen=True)
class DecodedMember:
    """An action profile member in readable form."""

    profile: str
    member_id: int
    action: str = ""
    params: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        args = ", ".join(f"{k}={v}" for k, v in self.params.items())
        return f"{self.profile} member {self.member_id} -> {self.action}({args})"


@dataclass(frozen=True)
class DecodedGroup:
    """An action profile group in readable form: its member ids, sorted."""

    profile: str
    group_id: int
    members: tuple[int, ...] = ()

    def __str__(self) -> str:
        ids = ", ".join(str(m) for m in self.members) or "none"
        return f"{self.profile} group {self.group_id} -> members {ids}"


def canonical(data: bytes) -> bytes:
    """``data`` without leading zero bytes (one zero byte for zero), per P4Runtime 8.3."""
    stripped = data.lstrip(b"\x00")
    return stripped if stripped else data[:1] or b"\x00"


def format_value(data: bytes, bitwidth: int) -> str:
    """Readable text of a P4Runtime byte string of ``bitwidth`` bits."""
    number = int.from_bytes(data, "big")
    if bitwidth == 128:
        return str(ipaddress.IPv6Address(number))
    if bitwidth == 48:
        raw = number.to_bytes(6, "big")
        return ":".join(f"{b:02x}" for b in raw)
    return str(number)


def encode_value(value: Value, bitwidth: int, what: str) -> bytes:
    """The canonical P4Runtime byte string of ``value`` for a ``bitwidth``-bit field.

    ``what`` names the field in errors (``MrcIngress.set_next_hop(port)``).
    """
    encoded = _encoded(value, bitwidth)
    if isinstance(encoded, str):
        raise P4InfoError(f"{what}: {encoded}")
    return encoded


@functools.lru_cache(maxsize=1 << 16, typed=True)
def _encoded(value: Value, bitwidth: int) -> bytes | str:
    """:func:`encode_value` without the field's name: the bytes, or why ``value`` has none.

    Remembered: a fabric's entries repeat the same ports, MACs and thresholds many times.
    """
    number: int
    if isinstance(value, bool):
        return f"{value!r} is not a number, address or byte string"
    if isinstance(value, int):
        number = value
    elif isinstance(value, bytes):
        number = int.from_bytes(value, "big")
    elif isinstance(value, ipaddress.IPv6Address):
        number = int(value)
    elif isinstance(value, str):
        text = value.strip()
        try:
            if bitwidth == 48 and ":" in text:
                parts = text.split(":")
                if len(parts) != 6:
                    raise ValueError(text)
                number = int.from_bytes(bytes(int(p, 16) for p in parts), "big")
            elif ":" in text:
                number = int(ipaddress.IPv6Address(text))
            else:
                number = int(text, 0)
        except ValueError:
            return (
                f"{value!r} is not a valid value (expected an integer, "
                f"an IPv6 address or a MAC address for a {bitwidth}-bit field)"
            )
    else:
        return f"{value!r} is not a number, address or byte string"
    if number < 0 or number >= 1 << bitwidth:
        return f"{value!r} does not fit in {bitwidth} bits"
    return canonical(number.to_bytes(max(1, (bitwidth + 7) // 8), "big"))


def _split_prefix(value: Value, bitwidth: int, what: str) -> tuple[int, int]:
    """An LPM value as (address as integer, prefix length)."""
    if isinstance(value, ipaddress.IPv6Network):
        return int(value.network_address), value.prefixlen
    if isinstance(value, str) and "/" in value:
        text, _, length = value.partition("/")
        try:
            prefix_len = int(length)
        except ValueError:
            raise P4InfoError(f"{what}: {value!r} has a bad prefix length") from None
        address = int.from_bytes(encode_value(text, bitwidth, what), "big")
    else:
        address, prefix_len = int.from_bytes(encode_value(value, bitwidth, what), "big"), bitwidth
    if not 0 <= prefix_len <= bitwidth:
        raise P4InfoError(f"{what}: prefix length {prefix_len} is not in 0..{bitwidth}")
    mask = ((1 << prefix_len) - 1) << (bitwidth - prefix_len)
    if address & ~mask:
        raise P4InfoError(f"{what}: {value!r} has bits set beyond its /{prefix_len}")
    return address, prefix_len


def _refuse_unknown(
    given: Mapping[str, Value], declared: Sequence[str], owner: str, kind: str = "parameter"
) -> None:
    """P4InfoError naming the first of ``given`` that ``owner`` does not declare."""
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise P4InfoError(
            f"{owner} has no {kind} '{unknown[0]}' ({kind}s: {', '.join(declared) or 'none'})"
        )


class _TableSpec(NamedTuple):
    """What building a table's entries reads of its P4Info, as Python values."""

    id: int
    name: str
    implementation_id: int
    fields: tuple[tuple[str, int, int, int], ...]  # (name, id, match type, bit width)


class _ActionSpec(NamedTuple):
    """What building an action call reads of its P4Info, as Python values."""

    id: int
    name: str
    params: tuple[tuple[str, int, int], ...]  # (name, id, bit width)


class P4Info:
    """One pipeline's P4Info, indexed by name (immutable once loaded)."""

    def __init__(self, proto: Any, source: str = "<memory>") -> None:
        self.proto: Any = proto  # p4i.P4Info
        self.source = source
        self._tables: dict[str, _TableSpec] = {}  # by the name asked for, looked up once
        self._actions: dict[str, _ActionSpec] = {}
        # kind -> name (full, or an unambiguous dotted suffix) -> object
        self._names: dict[str, dict[str, Any]] = {}
        self._by_id: dict[int, str] = {}
        for kind, objects in (
            ("table", proto.tables),
            ("action", proto.actions),
            ("counter", proto.counters),
            ("register", proto.registers),
            ("action profile", proto.action_profiles),
        ):
            names: dict[str, Any] = {}
            ambiguous: set[str] = set()
            for obj in objects:
                parts = obj.preamble.name.split(".")
                for at in range(1, len(parts)):
                    suffix = ".".join(parts[at:])
                    if suffix in names:
                        ambiguous.add(suffix)
                    names[suffix] = obj
                self._by_id[obj.preamble.id] = obj.preamble.name
            for suffix in ambiguous:
                del names[suffix]
            names.update((obj.preamble.name, obj) for obj in objects)
            self._names[kind] = names

    # -- loading -----------------------------------------------------------------------------

    @classmethod
    def load(cls, path: Path | str | None = None) -> P4Info:
        """Parse a text-format P4Info file (default: the committed mrc_switch P4Info)."""
        path = Path(path) if path is not None else default_p4info_path()
        try:
            text = path.read_text()
        except OSError as exc:
            raise P4InfoError(
                f"{path}: cannot read the P4Info file ({exc.strerror}); "
                "expected the text P4Info of the mrc_switch program"
            ) from None
        proto = p4i.P4Info()
        try:
            text_format.Parse(text, proto)
        except text_format.ParseError as exc:
            raise P4InfoError(f"{path}: not a text-format P4Info ({exc})") from None
        return cls(proto, str(path))

    def serialized(self) -> bytes:
        """The P4Info as binary protobuf (for cookies and comparisons)."""
        data: bytes = self.proto.SerializeToString(deterministic=True)
        return data

    # -- lookups -----------------------------------------------------------------------------

    def _obj(self, kind: str, name: str) -> Any:
        names = self._names[kind]
        obj = names.get(name)
        if obj is None:
            known = sorted({o.preamble.name for o in names.values()})
            raise P4InfoError(
                f"{self.source}: no {kind} '{name}' in the P4Info "
                f"(it has: {', '.join(known) or 'none'})"
            )
        return obj

    def table(self, name: str) -> Any:
        """The ``p4i.Table`` called ``name`` (full name or unambiguous suffix)."""
        return self._obj("table", name)

    def action(self, name: str) -> Any:
        """The ``p4i.Action`` called ``name``."""
        return self._obj("action", name)

    def counter(self, name: str) -> Any:
        """The ``p4i.Counter`` called ``name``."""
        return self._obj("counter", name)

    def register(self, name: str) -> Any:
        """The ``p4i.Register`` called ``name``."""
        return self._obj("register", name)

    def action_profile(self, name: str) -> Any:
        """The ``p4i.ActionProfile`` called ``name``."""
        return self._obj("action profile", name)

    def action_profile_id(self, name: str) -> int:
        """Id of action profile ``name``."""
        return int(self.action_profile(name).preamble.id)

    def table_id(self, name: str) -> int:
        """Id of table ``name``."""
        return int(self.table(name).preamble.id)

    def action_id(self, name: str) -> int:
        """Id of action ``name``."""
        return int(self.action(name).preamble.id)

    def counter_id(self, name: str) -> int:
        """Id of counter ``name``."""
        return int(self.counter(name).preamble.id)

    def register_id(self, name: str) -> int:
        """Id of register ``name``."""
        return int(self.register(name).preamble.id)

    def name_of(self, obj_id: int) -> str:
        """Full name of the P4Info object with id ``obj_id`` (``#id`` when unknown)."""
        return self._by_id.get(obj_id, f"#{obj_id}")

    def table_names(self) -> list[str]:
        """Full names of all tables."""
        return [t.preamble.name for t in self.proto.tables]

    def missing(self) -> list[str]:
        """What keeps this P4Info from being the contract's program, each as a readable phrase
        (``table MrcIngress.my_sid``: :func:`p4src.contract.p4info_problems`)."""
        return contract.p4info_problems(self.proto)

    # -- building entries --------------------------------------------------------------------

    def _table_spec(self, table: str) -> _TableSpec:
        spec = self._tables.get(table)
        if spec is None:
            info = self.table(table)
            fields = tuple(
                (str(mf.name), int(mf.id), int(mf.match_type), int(mf.bitwidth))
                for mf in info.match_fields
            )
            spec = _TableSpec(
                int(info.preamble.id), str(info.preamble.name), int(info.implementation_id), fields
            )
            self._tables[table] = spec
        return spec

    def _action_spec(self, action: str) -> _ActionSpec:
        spec = self._actions.get(action)
        if spec is None:
            info = self.action(action)
            params = tuple((str(p.name), int(p.id), int(p.bitwidth)) for p in info.params)
            spec = _ActionSpec(int(info.preamble.id), str(info.preamble.name), params)
            self._actions[action] = spec
        return spec

    def _action_proto(self, action: str, params: Mapping[str, Value], msg: Any = None) -> Any:
        """A ``p4r.Action`` (or ``msg`` filled in) calling ``action`` with ``params``."""
        spec = self._action_spec(action)
        msg = p4r.Action() if msg is None else msg
        msg.action_id = spec.id
        if len(params) != len(spec.params):
            _refuse_unknown(params, [n for n, _, _ in spec.params], f"action {spec.name}")
        for name, param_id, bitwidth in spec.params:
            if name not in params:
                _refuse_unknown(params, [n for n, _, _ in spec.params], f"action {spec.name}")
                raise P4InfoError(f"action {spec.name}: parameter '{name}' is missing")
            value = encode_value(params[name], bitwidth, f"{spec.name}({name})")
            msg.params.add(param_id=param_id, value=value)
        return msg

    def table_entry(
        self,
        table: str,
        match: Mapping[str, Value],
        action: str,
        params: Mapping[str, Value] | None = None,
        priority: int = 0,
        group_id: int = 0,
    ) -> Any:
        """A ``p4r.TableEntry`` of ``table`` built from readable values.

        Exact fields take an integer, bytes or text (IPv6 or MAC); LPM fields take
        ``"addr/len"`` (or an ``IPv6Network``; a bare address means a full-length prefix);
        ternary fields take ``"value&&&mask"``. A zero-length LPM prefix is left out (wildcard).
        With ``group_id`` the entry points at that action profile group (the table must have
        an action profile) and ``action`` and ``params`` are ignored.
        """
        spec = self._table_spec(table)
        entry = p4r.TableEntry(table_id=spec.id)
        if not match.keys() <= {f[0] for f in spec.fields}:
            _refuse_unknown(match, [f[0] for f in spec.fields], f"table {spec.name}", "match field")
        for name, field_id, match_type, bitwidth in spec.fields:
            if name not in match:
                continue  # a missing field is a wildcard (ternary/LPM/optional)
            value = match[name]
            what = f"{spec.name}[{name}]"
            if match_type == p4i.MatchField.EXACT:
                entry.match.add(field_id=field_id).exact.value = encode_value(value, bitwidth, what)
            elif match_type == p4i.MatchField.LPM:
                address, prefix_len = _split_prefix(value, bitwidth, what)
                if prefix_len == 0:
                    continue
                fm = entry.match.add(field_id=field_id)
                fm.lpm.value = canonical(address.to_bytes((bitwidth + 7) // 8, "big"))
                fm.lpm.prefix_len = prefix_len
            elif match_type == p4i.MatchField.TERNARY:
                val, sep, mask = str(value).partition("&&&")
                ternary = p4r.FieldMatch.Ternary(
                    value=encode_value(val, bitwidth, what),
                    mask=encode_value(mask if sep else (1 << bitwidth) - 1, bitwidth, what),
                )
                entry.match.add(field_id=field_id, ternary=ternary)
            else:
                raise P4InfoError(f"{what}: match type {match_type} is not supported")
        if group_id:
            if not spec.implementation_id:
                raise P4InfoError(
                    f"table {spec.name} has no action profile: group {group_id} "
                    "cannot be its action"
                )
            entry.action.action_profile_group_id = group_id
        else:
            self._action_proto(action, params or {}, entry.action.action)
        if priority:
            entry.priority = priority
        return entry

    def default_entry(
        self, table: str, action: str, params: Mapping[str, Value] | None = None
    ) -> Any:
        """The ``p4r.TableEntry`` that sets the default action of ``table`` (write as MODIFY)."""
        entry = p4r.TableEntry()
        entry.table_id = self.table_id(table)
        entry.is_default_action = True
        entry.action.action.CopyFrom(self._action_proto(action, params or {}))
        return entry

    def profile_member(
        self, profile: str, member_id: int, action: str, params: Mapping[str, Value] | None = None
    ) -> Any:
        """A ``p4r.ActionProfileMember`` of ``profile``: ``action(params)`` under ``member_id``."""
        if member_id < 1:
            raise P4InfoError(f"{profile} member id {member_id}: expected a positive integer")
        member = p4r.ActionProfileMember()
        member.action_profile_id = self.action_profile_id(profile)
        member.member_id = member_id
        member.action.CopyFrom(self._action_proto(action, params or {}))
        return member

    def profile_group(self, profile: str, group_id: int, members: Sequence[int]) -> Any:
        """A ``p4r.ActionProfileGroup`` of ``profile`` holding ``members`` (weight 1 each)."""
        if group_id < 1:
            raise P4InfoError(f"{profile} group id {group_id}: expected a positive integer")
        group = p4r.ActionProfileGroup()
        group.action_profile_id = self.action_profile_id(profile)
        group.group_id = group_id
        for member_id in members:
            group.members.add(member_id=member_id, weight=1)
        return group

    # -- reading entries ---------------------------------------------------------------------

    def _declared(self, kind: str, name: str, attribute: str) -> dict[int, tuple[str, int]]:
        """Id -> (name, width) of the match fields or parameters of the object ``kind`` ``name``
        (empty when the P4Info has no such object)."""
        try:
            found = getattr(self._obj(kind, name), attribute)
        except P4InfoError:
            return {}
        return {item.id: (item.name, item.bitwidth) for item in found}

    def _decode_action(self, act: Any) -> tuple[str, dict[str, str]]:
        action = self.name_of(act.action_id)
        declared = self._declared("action", action, "params")
        params: dict[str, str] = {}
        for param in act.params:
            pname, width = declared.get(param.param_id, (f"#{param.param_id}", 0))
            params[pname] = format_value(param.value, width)
        return action, params

    def decode_member(self, member: Any) -> DecodedMember:
        """A ``p4r.ActionProfileMember`` in readable form."""
        action, params = self._decode_action(member.action)
        return DecodedMember(
            self.name_of(member.action_profile_id), int(member.member_id), action, params
        )

    def decode_group(self, group: Any) -> DecodedGroup:
        """A ``p4r.ActionProfileGroup`` in readable form."""
        return DecodedGroup(
            self.name_of(group.action_profile_id),
            int(group.group_id),
            tuple(sorted(int(m.member_id) for m in group.members)),
        )

    def decode(self, entry: Any) -> DecodedEntry:
        """A ``p4r.TableEntry`` in readable form (unknown ids are shown as ``#id``)."""
        table_name = self.name_of(entry.table_id)
        fields = self._declared("table", table_name, "match_fields")
        match: dict[str, str] = {}
        for fm in entry.match:
            name, width = fields.get(fm.field_id, (f"#{fm.field_id}", 0))
            kind = fm.WhichOneof("field_match_type")
            if kind == "exact":
                match[name] = format_value(fm.exact.value, width)
            elif kind == "lpm":
                match[name] = f"{format_value(fm.lpm.value, width)}/{fm.lpm.prefix_len}"
            elif kind == "ternary":
                match[name] = (
                    f"{format_value(fm.ternary.value, width)}&&&"
                    f"{format_value(fm.ternary.mask, width)}"
                )
            else:
                match[name] = str(getattr(fm, str(kind))).strip()
        action = ""
        params: dict[str, str] = {}
        group = 0
        kind = entry.action.WhichOneof("type") if entry.HasField("action") else None
        if kind == "action":
            action, params = self._decode_action(entry.action.action)
        elif kind == "action_profile_group_id":
            group = int(entry.action.action_profile_group_id)
        return DecodedEntry(
            table=table_name,
            match=match,
            action=action,
            params=params,
            priority=int(entry.priority),
            is_default=bool(entry.is_default_action),
            group=group,
        )

    def describe(self, entry: Any) -> str:
        """One readable line for a ``p4r.TableEntry``."""
        return str(self.decode(entry))
