"""P4Runtime semantics of the switch, without gRPC: pipeline config, table writes, reads.

:class:`SwitchRuntime` keeps what a P4Runtime server must remember (the committed and the saved
pipeline config, the table entries as written, in canonical form, and the default entries) and
translates every change into the :class:`~switchmodel.tables.PipelineState` the data path reads,
under the data path's lock. Table entries are kept as the ``p4r.Entity`` a Read answers with
(canonical match and parameter values, the other fields as written).
Action profile members and groups (the ECMP groups of ``ipv6_ecmp``) are kept by
:mod:`switchmodel.profiles`; ``ipv6_ecmp`` entries point at a group by id.

Errors are :class:`RuntimeStatus` exceptions carrying a ``google.rpc.Code`` and a message that
names the offending entity; the gRPC adapter (:mod:`switchmodel.server`) turns them into RPC
statuses and per-update ``p4.v1.Error``\\ s. Arbitration and device ids are the adapter's
business.
"""

from __future__ import annotations

import ipaddress
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from p4src import contract
from p4src.proto import p4i, p4r
from p4src.proto import rpc_code as code_pb2
from switchmodel.binding import Binding, ContractError, TableBinding, bind
from switchmodel.profiles import ProfileError, ProfileState
from switchmodel.tables import (
    DROP_NO_ROUTE,
    NO_QOS,
    CounterArray,
    PipelineState,
    PortQos,
    SidAction,
    next_hop,
)

Key = tuple[int, int]  # (value, prefix length); exact keys use the full width as length


class Target(Protocol):
    """What the runtime drives: a pipeline state slot and the lock that guards it."""

    lock: threading.Lock
    state: PipelineState | None


@dataclass
class TargetSlot:
    """A :class:`Target` without a data path (for a server on its own, and for tests)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    state: PipelineState | None = None


class RuntimeStatus(Exception):
    """A P4Runtime error: a ``google.rpc.Code`` and a message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _invalid(message: str) -> RuntimeStatus:
    return RuntimeStatus(code_pb2.INVALID_ARGUMENT, message)


def canonical(value: int) -> bytes:
    """The P4Runtime canonical byte string of ``value`` (no leading zero bytes, at least one)."""
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


def _decode(data: bytes, width: int, what: str) -> int:
    if not data:
        raise _invalid(f"{what}: empty value, expected a bit<{width}> byte string")
    value = int.from_bytes(data, "big")
    if value >> width:
        raise _invalid(f"{what}: value 0x{data.hex()} does not fit in bit<{width}>")
    return value


@dataclass
class _Config:
    binding: Binding
    config: p4r.ForwardingPipelineConfig


class SwitchRuntime:
    """The P4Runtime-visible state of one switch (one device, the mrc_switch program)."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self._lock = threading.RLock()  # serialises control-plane operations
        self._committed: _Config | None = None
        self._saved: _Config | None = None
        # table id -> key -> the entry as a Read returns it
        self._entries: dict[int, dict[Key, p4r.Entity]] = {}
        self._defaults: dict[int, p4r.Entity] = {}  # table id -> its default entry, as written
        self._profiles: dict[int, ProfileState] = {}  # action profile id -> its state
        self._group_of: dict[int, dict[Key, int]] = {}  # indirect table id -> key -> group id

    # -- pipeline config ---------------------------------------------------------------------

    @property
    def binding(self) -> Binding | None:
        """The committed program's ids, or None before a pipeline is set."""
        return self._committed.binding if self._committed else None

    def set_pipeline(self, action: int, config: p4r.ForwardingPipelineConfig) -> None:
        """SetForwardingPipelineConfig ``action`` with ``config`` (its device config is ignored)."""
        actions = p4r.SetForwardingPipelineConfigRequest
        with self._lock:
            if action == actions.COMMIT:
                if config.HasField("p4info"):
                    raise _invalid("COMMIT takes no config: it commits the one saved before")
                if self._saved is None:
                    raise RuntimeStatus(
                        code_pb2.FAILED_PRECONDITION,
                        "COMMIT without a config saved by VERIFY_AND_SAVE",
                    )
                self._commit(self._saved)
                self._saved = None
                return
            if action not in (
                actions.VERIFY,
                actions.VERIFY_AND_SAVE,
                actions.VERIFY_AND_COMMIT,
                actions.RECONCILE_AND_COMMIT,
            ):
                raise _invalid(f"SetForwardingPipelineConfig action {action}: not a known action")
            if not config.HasField("p4info"):
                raise _invalid("SetForwardingPipelineConfig: config has no p4info")
            try:
                binding = bind(config.p4info)
            except ContractError as exc:
                raise _invalid(str(exc)) from None
            new = _Config(binding, p4r.ForwardingPipelineConfig())
            new.config.CopyFrom(config)
            if action == actions.VERIFY:
                return
            if action == actions.VERIFY_AND_SAVE:
                self._saved = new
                return
            if action == actions.RECONCILE_AND_COMMIT and self._committed is not None:
                old = self._committed.config.p4info.SerializeToString(deterministic=True)
                if old == config.p4info.SerializeToString(deterministic=True):
                    self._committed = new  # same program: keep the forwarding state
                    return
                raise _invalid(
                    "RECONCILE_AND_COMMIT: the forwarding state is kept only for the same "
                    "P4Info; use VERIFY_AND_COMMIT to change it"
                )
            self._commit(new)

    def _commit(self, config: _Config) -> None:
        self._committed = config
        self._entries = {table_id: {} for table_id in config.binding.tables}
        self._defaults = {}
        self._profiles = {
            p.id: ProfileState(p.name, p.id, p.size) for p in config.binding.profiles.values()
        }
        self._group_of = {p.table_id: {} for p in config.binding.profiles.values()}
        with self.target.lock:
            self.target.state = PipelineState()

    def get_pipeline(self, response_type: int) -> p4r.ForwardingPipelineConfig:
        """GetForwardingPipelineConfig: the committed config, cut to ``response_type``."""
        types = p4r.GetForwardingPipelineConfigRequest
        with self._lock:
            if self._committed is None:
                raise RuntimeStatus(
                    code_pb2.FAILED_PRECONDITION, "no forwarding pipeline config has been set"
                )
            full = self._committed.config
            out = p4r.ForwardingPipelineConfig()
            if full.HasField("cookie"):
                out.cookie.CopyFrom(full.cookie)
            if response_type in (types.ALL, types.P4INFO_AND_COOKIE):
                out.p4info.CopyFrom(full.p4info)
            if response_type in (types.ALL, types.DEVICE_CONFIG_AND_COOKIE):
                out.p4_device_config = full.p4_device_config
            return out

    def _require(self) -> Binding:
        if self._committed is None:
            raise RuntimeStatus(
                code_pb2.FAILED_PRECONDITION, "no forwarding pipeline config has been set"
            )
        return self._committed.binding

    # -- writes ------------------------------------------------------------------------------

    def write(self, update: p4r.Update) -> None:
        """Apply one update (RuntimeStatus when it is refused; nothing changes then)."""
        with self._lock:
            binding = self._require()
            kind = update.entity.WhichOneof("entity")
            if kind == "table_entry":
                self._write_table_entry(binding, update.type, update.entity.table_entry)
            elif kind == "counter_entry":
                self._write_counter(binding, update.type, update.entity.counter_entry)
            elif kind == "register_entry":
                self._write_register(binding, update.type, update.entity.register_entry)
            elif kind == "action_profile_member":
                self._write_member(binding, update.type, update.entity.action_profile_member)
            elif kind == "action_profile_group":
                self._write_group(binding, update.type, update.entity.action_profile_group)
            else:
                raise RuntimeStatus(
                    code_pb2.UNIMPLEMENTED, f"writing {kind or 'an empty entity'} is not supported"
                )

    def _profile(self, profile_id: int) -> ProfileState:
        profile = self._profiles.get(profile_id)
        if profile is None:
            raise RuntimeStatus(
                code_pb2.NOT_FOUND, f"action profile id {profile_id:#x} is not in the P4Info"
            )
        return profile

    def _write_member(self, binding: Binding, kind: int, member: p4r.ActionProfileMember) -> None:
        profile = self._profile(member.action_profile_id)
        hop = None
        if kind != p4r.Update.DELETE:
            bound = binding.actions.get(member.action.action_id)
            if bound is None or bound.name != contract.SET_NEXT_HOP:
                raise _invalid(
                    f"{profile.name} member {member.member_id}: the action must be "
                    f"{contract.SET_NEXT_HOP}"
                )
            table = binding.tables[binding.profiles[profile.profile_id].table_id]
            _name, params = self._action_data(binding, table, member.action)
            hop = next_hop(**params)
        try:
            with self.target.lock:
                profile.write_member(kind, member, hop)
        except ProfileError as exc:
            raise RuntimeStatus(exc.code, exc.message) from None

    def _write_group(self, binding: Binding, kind: int, group: p4r.ActionProfileGroup) -> None:
        profile = self._profile(group.action_profile_id)
        try:
            with self.target.lock:
                profile.write_group(kind, group)
        except ProfileError as exc:
            raise RuntimeStatus(exc.code, exc.message) from None

    def _write_indirect_entry(
        self, table: TableBinding, kind: int, key: Key, entry: p4r.TableEntry
    ) -> None:
        """INSERT, MODIFY or DELETE an entry of a table with an action selector: its action is
        a group of the table's action profile."""
        profile = self._profile(table.profile_id)
        groups = self._group_of[table.id]
        group_id = int(entry.action.action_profile_group_id)
        if (
            kind != p4r.Update.DELETE
            and entry.action.WhichOneof("type") != "action_profile_group_id"
        ):
            raise _invalid(
                f"{table.name}: entry {self._describe(table, key)} needs an action profile group "
                f"of {profile.name} (the table has an action selector)"
            )
        with self.target.lock:
            state = self.target.state
            assert state is not None  # committed implies a state
            try:
                data = profile.use_group(group_id) if kind != p4r.Update.DELETE else None
            except ProfileError as exc:
                raise RuntimeStatus(exc.code, exc.message) from None
            previous = groups.get(key)
            if previous is not None:
                profile.release_group(previous)
            if data is None:
                groups.pop(key, None)
                state.ipv6_ecmp.remove(*key)
            else:
                groups[key] = group_id
                state.ipv6_ecmp.insert(key[0], key[1], data)

    def _table(self, binding: Binding, table_id: int) -> TableBinding:
        table = binding.tables.get(table_id)
        if table is None:
            raise RuntimeStatus(code_pb2.NOT_FOUND, f"table id {table_id:#x} is not in the P4Info")
        return table

    def _key(self, table: TableBinding, entry: p4r.TableEntry) -> Key:
        if entry.priority:
            raise _invalid(f"{table.name}: priority {entry.priority} given, the table has none")
        width = table.width
        if not entry.match:
            if table.match_type == p4i.MatchField.LPM:
                return (0, 0)  # don't care: /0
            raise _invalid(f"{table.name}: exact match field is missing")
        if len(entry.match) != 1:
            raise _invalid(f"{table.name}: {len(entry.match)} match fields, expected 1")
        fm = entry.match[0]
        if fm.field_id != table.field_id:
            raise _invalid(f"{table.name}: unknown match field id {fm.field_id}")
        what = f"{table.name} match field {fm.field_id}"
        kind = fm.WhichOneof("field_match_type")
        if table.match_type == p4i.MatchField.LPM:
            if kind != "lpm":
                raise _invalid(f"{what}: expected an LPM match")
            length = fm.lpm.prefix_len
            if not 0 < length <= width:
                raise _invalid(f"{what}: prefix length {length}, expected 1..{width}")
            value = _decode(fm.lpm.value, width, what)
            if value & ((1 << (width - length)) - 1):
                raise _invalid(f"{what}: value has bits set beyond the /{length} prefix")
            return (value, length)
        if kind != "exact":
            raise _invalid(f"{what}: expected an exact match")
        return (_decode(fm.exact.value, width, what), width)

    def _action_data(
        self, binding: Binding, table: TableBinding, action: p4r.Action | None
    ) -> tuple[str, dict[str, int]]:
        """The name and decoded parameters of a direct action (None: the entry has none)."""
        if action is None:
            raise _invalid(f"{table.name}: entry needs a direct action")
        bound = binding.actions.get(action.action_id)
        if bound is None:
            raise _invalid(f"{table.name}: action id {action.action_id:#x} is not in the P4Info")
        if action.action_id not in table.action_ids:
            raise _invalid(f"{table.name}: action '{bound.name}' is not one of the table's actions")
        params: dict[str, int] = {}
        for param in action.params:
            spec = bound.params.get(param.param_id)
            if spec is None:
                raise _invalid(f"{bound.name}: unknown parameter id {param.param_id}")
            name, width = spec
            if name in params:
                raise _invalid(f"{bound.name}: parameter '{name}' given twice")
            params[name] = _decode(param.value, width, f"{bound.name} parameter '{name}'")
        missing = [name for name, _ in bound.params.values() if name not in params]
        if missing:
            raise _invalid(f"{bound.name}: missing parameters {missing}")
        return bound.name, params

    @staticmethod
    def _stored(entry: p4r.TableEntry) -> p4r.Entity:
        """The entry as a Read returns it: canonical match and parameter values (the entry has
        passed :meth:`_key` and :meth:`_action_data`), no counter data, other fields as
        written."""
        stored = p4r.Entity(table_entry=entry)
        written = stored.table_entry
        if written.HasField("counter_data"):
            written.ClearField("counter_data")
        for fm in written.match:
            match = fm.lpm if fm.WhichOneof("field_match_type") == "lpm" else fm.exact
            if match.value[:1] == b"\x00" and len(match.value) > 1:
                match.value = canonical(int.from_bytes(match.value, "big"))
        for param in written.action.action.params:
            if param.value[:1] == b"\x00" and len(param.value) > 1:
                param.value = canonical(int.from_bytes(param.value, "big"))
        return stored

    def _write_table_entry(
        self,
        binding: Binding,
        kind: int,
        entry: p4r.TableEntry,
    ) -> None:
        table = self._table(binding, entry.table_id)
        if entry.is_default_action:
            if kind != p4r.Update.MODIFY:
                raise _invalid(f"{table.name}: the default entry can only be modified")
            if entry.match:
                raise _invalid(f"{table.name}: a default entry has no match fields")
            if entry.HasField("action"):
                name, params = self._action_data(binding, table, _direct(entry))
                if table.profile_id and name != contract.NO_ACTION:
                    raise _invalid(f"{table.name}: the default action can only be NoAction")
                self._defaults[table.id] = p4r.Entity(table_entry=entry)
            else:  # reset to the program's default
                name, params = contract.table(table.name).default_action, {}
                self._defaults.pop(table.id, None)
            self._apply(table, None, name, params)
            return
        key = self._key(table, entry)
        entries = self._entries[table.id]
        verb = {
            p4r.Update.INSERT: "insert",
            p4r.Update.MODIFY: "modify",
            p4r.Update.DELETE: "delete",
        }
        if kind not in verb:
            raise _invalid(f"{table.name}: update type {kind} is not INSERT, MODIFY or DELETE")
        if kind == p4r.Update.INSERT and key in entries:
            raise RuntimeStatus(
                code_pb2.ALREADY_EXISTS,
                f"{table.name}: entry {self._describe(table, key)} already exists",
            )
        if kind != p4r.Update.INSERT and key not in entries:
            raise RuntimeStatus(
                code_pb2.NOT_FOUND,
                f"{table.name}: no entry {self._describe(table, key)} to {verb[kind]}",
            )
        if kind == p4r.Update.INSERT and len(entries) >= table.size:
            raise RuntimeStatus(
                code_pb2.RESOURCE_EXHAUSTED, f"{table.name}: table full ({table.size} entries)"
            )
        self._set(binding, table, kind, key, entry)
        if kind == p4r.Update.DELETE:
            del entries[key]
        else:
            entries[key] = self._stored(entry)

    def _set(
        self, binding: Binding, table: TableBinding, kind: int, key: Key, entry: p4r.TableEntry
    ) -> None:
        """Make the data path see an INSERT, MODIFY or DELETE of the entry at ``key``."""
        if table.profile_id:
            self._write_indirect_entry(table, kind, key, entry)
        elif kind == p4r.Update.DELETE:
            self._apply(table, key, None, {})
        else:
            name, params = self._action_data(binding, table, _direct(entry))
            self._apply(table, key, name, params)

    @staticmethod
    def _describe(table: TableBinding, key: Key) -> str:
        value, length = key
        if table.match_type == p4i.MatchField.LPM:
            return (
                f"{ipaddress.IPv6Address(value)}/{length}"
                if table.width == 128
                else f"{value:#x}/{length}"
            )
        return str(value)

    def _apply(
        self, table: TableBinding, key: Key | None, action: str | None, params: dict[str, int]
    ) -> None:
        """Make the data path see ``action`` for ``key`` (None: the default; action None: delete)."""
        with self.target.lock:
            state = self.target.state
            if state is None:  # pragma: no cover - committed implies a state
                return
            data: Any  # the action data the pipeline reads for this table
            if table.name == contract.MY_SID:
                data = {
                    contract.USID_UN: SidAction.USID_UN,
                    contract.SRV6_END: SidAction.SRV6_END,
                }.get(action or "", SidAction.NO_ACTION)
            elif table.name == contract.IPV6_LPM:
                data = next_hop(**params) if action == contract.SET_NEXT_HOP else DROP_NO_ROUTE
            elif table.name == contract.PORT_QOS:
                data = PortQos(**params) if action == contract.SET_PORT_QOS else NO_QOS
            else:
                return
            if key is None:  # the default entry
                if table.name == contract.MY_SID:
                    state.my_sid_default = data
                elif table.name == contract.IPV6_LPM:
                    state.ipv6_lpm_default = data
                else:
                    state.port_qos_default = data
            elif table.name == contract.PORT_QOS:
                if action is None:
                    del state.port_qos.entries[key[0]]
                else:
                    state.port_qos.entries[key[0]] = data
            else:
                lpm = state.my_sid if table.name == contract.MY_SID else state.ipv6_lpm
                if action is None:
                    lpm.remove(*key)
                else:
                    lpm.insert(*key, data)

    def _counter_array(self, binding: Binding, counter_id: int) -> tuple[str, CounterArray]:
        found = binding.counters.get(counter_id)
        if found is None:
            raise RuntimeStatus(
                code_pb2.NOT_FOUND, f"counter id {counter_id:#x} is not in the P4Info"
            )
        state = self.target.state
        assert state is not None
        return found[0], state.counters.by_name()[found[0]]

    def _write_counter(self, binding: Binding, kind: int, entry: p4r.CounterEntry) -> None:
        if kind != p4r.Update.MODIFY:
            raise _invalid("counter entries can only be modified")
        with self.target.lock:
            name, array = self._counter_array(binding, entry.counter_id)
            indices = self._indices(name, array.size, entry)
            for index in indices:
                array.packets[index] = entry.data.packet_count
                array.bytes[index] = entry.data.byte_count

    def _write_register(self, binding: Binding, kind: int, entry: p4r.RegisterEntry) -> None:
        if kind != p4r.Update.MODIFY:
            raise _invalid("register entries can only be modified")
        name = binding.registers.get(entry.register_id)
        if name is None:
            raise RuntimeStatus(
                code_pb2.NOT_FOUND, f"register id {entry.register_id:#x} is not in the P4Info"
            )
        if entry.data.WhichOneof("data") != "bitstring":
            raise _invalid(f"{name}: expected bitstring data")
        value = _decode(entry.data.bitstring, contract.QDEPTH_BITS, name)
        with self.target.lock:
            state = self.target.state
            assert state is not None
            array = state.register(name)
            for index in self._indices(name, len(array), entry):
                array[index] = value

    @staticmethod
    def _indices(name: str, size: int, entry: p4r.CounterEntry | p4r.RegisterEntry) -> range:
        if not entry.HasField("index"):
            return range(size)
        index = entry.index.index
        if not 0 <= index < size:
            raise RuntimeStatus(
                code_pb2.OUT_OF_RANGE, f"{name}: index {index} is outside 0..{size - 1}"
            )
        return range(index, index + 1)

    # -- reads -------------------------------------------------------------------------------

    def read(self, entity: p4r.Entity) -> list[p4r.Entity]:
        """The entities matching one read request entity (wildcards expanded)."""
        with self._lock:
            binding = self._require()
            kind = entity.WhichOneof("entity")
            if kind == "table_entry":
                return list(self._read_tables(binding, entity.table_entry))
            if kind == "counter_entry":
                return list(self._read_counters(binding, entity.counter_entry))
            if kind == "register_entry":
                return list(self._read_registers(binding, entity.register_entry))
            if kind in ("action_profile_member", "action_profile_group"):
                want = getattr(entity, kind)
                profiles = self._profiles_of(want.action_profile_id)
                if kind == "action_profile_member":
                    return [m for profile in profiles for m in profile.read_members(want.member_id)]
                return [g for profile in profiles for g in profile.read_groups(want.group_id)]
            raise RuntimeStatus(
                code_pb2.UNIMPLEMENTED, f"reading {kind or 'an empty entity'} is not supported"
            )

    def _profiles_of(self, profile_id: int) -> list[ProfileState]:
        """The profile ``profile_id`` (every profile for 0: a wildcard read)."""
        if profile_id:
            return [self._profile(profile_id)]
        return [self._profiles[pid] for pid in sorted(self._profiles)]

    def _read_tables(self, binding: Binding, want: p4r.TableEntry) -> Iterator[p4r.Entity]:
        tables = (
            [self._table(binding, want.table_id)]
            if want.table_id
            else list(binding.tables.values())
        )
        for table in tables:
            if want.is_default_action:
                yield self._default_entry(binding, table)
                continue
            entries = self._entries[table.id]
            if want.match and want.table_id:
                key = self._key(table, want)
                if key in entries:
                    yield entries[key]
                continue
            yield from entries.values()

    def _default_entry(self, binding: Binding, table: TableBinding) -> p4r.Entity:
        stored = self._defaults.get(table.id)
        if stored is not None:
            return stored
        entity = p4r.Entity()
        entry = entity.table_entry
        entry.table_id = table.id
        entry.is_default_action = True
        entry.action.action.action_id = binding.action_id(contract.table(table.name).default_action)
        return entity

    def _read_counters(self, binding: Binding, want: p4r.CounterEntry) -> Iterator[p4r.Entity]:
        ids = [want.counter_id] if want.counter_id else sorted(binding.counters)
        for counter_id in ids:
            with self.target.lock:
                name, array = self._counter_array(binding, counter_id)
                indices = self._indices(name, array.size, want)
                cells = [(i, array.packets[i], array.bytes[i]) for i in indices]
            for index, packets, nbytes in cells:
                yield p4r.Entity(
                    counter_entry=p4r.CounterEntry(
                        counter_id=counter_id,
                        index=p4r.Index(index=index),
                        data=p4r.CounterData(byte_count=nbytes, packet_count=packets),
                    )
                )

    def _read_registers(self, binding: Binding, want: p4r.RegisterEntry) -> Iterator[p4r.Entity]:
        if want.register_id and want.register_id not in binding.registers:
            raise RuntimeStatus(
                code_pb2.NOT_FOUND, f"register id {want.register_id:#x} is not in the P4Info"
            )
        ids = [want.register_id] if want.register_id else sorted(binding.registers)
        values: list[tuple[int, int, int]] = []
        with self.target.lock:
            state = self.target.state
            assert state is not None
            for register_id in ids:
                name = binding.registers[register_id]
                array = state.register(name)
                values += [
                    (register_id, i, array[i]) for i in self._indices(name, len(array), want)
                ]
        for register_id, index, value in values:
            entity = p4r.Entity()
            cell = entity.register_entry
            cell.register_id = register_id
            cell.index.index = index
            cell.data.bitstring = canonical(value)
            yield entity


def _direct(entry: p4r.TableEntry) -> p4r.Action | None:
    """The direct action of a table entry, None when its action is not one (or is unset)."""
    return entry.action.action if entry.action.WhichOneof("type") == "action" else None
