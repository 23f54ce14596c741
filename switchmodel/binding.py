"""The mrc_switch program under the ids of one P4Info: what switchmodel runs a pipeline config by.

switchmodel implements one program, the one :mod:`p4src.contract` describes. A P4Info given to
SetForwardingPipelineConfig is accepted when :func:`p4src.contract.p4info_problems` finds
nothing wrong with it (the contract's names, widths and sizes); the numeric ids are whatever
that P4Info assigns, and :func:`bind` maps them back to the program's objects in a
:class:`Binding`. A P4Info that is not the program is a :class:`ContractError` naming what it
lacks.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from p4src import contract

if TYPE_CHECKING:
    from p4src.proto import p4i


class ContractError(ValueError):
    """A P4Info that is not the mrc_switch program (the message names what is wrong)."""


@dataclass(frozen=True)
class TableBinding:
    """One table of the program under the ids of a given P4Info."""

    name: str
    id: int
    field_id: int
    width: int
    match_type: int
    action_ids: frozenset[int]
    size: int
    profile_id: int = 0  # the action profile of an indirect table (0: direct actions)


@dataclass(frozen=True)
class ProfileBinding:
    """One action profile (with a selector) under the ids of a given P4Info."""

    name: str
    id: int
    table_id: int  # the table it implements
    size: int


@dataclass(frozen=True)
class ActionBinding:
    """One action: its name and its parameters' ids -> (name, bit width)."""

    name: str
    id: int
    params: dict[int, tuple[str, int]]


@dataclass(frozen=True)
class Binding:
    """The program's objects under the ids of one P4Info."""

    p4info: p4i.P4Info
    tables: dict[int, TableBinding]
    actions: dict[int, ActionBinding]
    counters: dict[int, tuple[str, int]]  # id -> (name, size)
    registers: dict[int, str]  # id -> name (one of the contract's registers)
    profiles: dict[int, ProfileBinding] = dataclasses.field(default_factory=dict)

    def table_named(self, name: str) -> TableBinding:
        """The table called ``name``."""
        for table in self.tables.values():
            if table.name == name:
                return table
        raise KeyError(name)

    def action_id(self, name: str) -> int:
        """The id of action ``name``."""
        for action in self.actions.values():
            if action.name == name:
                return action.id
        raise KeyError(name)


def bind(info: p4i.P4Info) -> Binding:
    """Check ``info`` against the contract and map its ids (ContractError naming a mismatch)."""
    problems = contract.p4info_problems(info)
    if problems:
        raise ContractError("P4Info is not the mrc_switch program: it lacks " + "; ".join(problems))
    wanted = {a.name for a in contract.ACTIONS}
    actions = {
        a.preamble.id: ActionBinding(
            a.preamble.name, a.preamble.id, {p.id: (p.name, p.bitwidth) for p in a.params}
        )
        for a in info.actions
        if a.preamble.name in wanted
    }
    by_name = {t.preamble.name: t for t in info.tables}
    tables: dict[int, TableBinding] = {}
    for spec in contract.TABLES:
        table = by_name[spec.name]
        (field,) = table.match_fields
        tables[table.preamble.id] = TableBinding(
            spec.name,
            table.preamble.id,
            field.id,
            field.bitwidth,
            field.match_type,
            frozenset(ref.id for ref in table.action_refs if ref.id in actions),
            int(table.size) or 1024,
            int(table.implementation_id),
        )
    profiles_by_name = {p.preamble.name: p for p in info.action_profiles}
    profiles: dict[int, ProfileBinding] = {}
    for spec in contract.TABLES:
        if spec.profile:
            profile = profiles_by_name[spec.profile]
            profiles[profile.preamble.id] = ProfileBinding(
                spec.profile,
                profile.preamble.id,
                by_name[spec.name].preamble.id,
                int(profile.size) or 1024,
            )
    counters = {
        c.preamble.id: (c.preamble.name, contract.COUNTERS[c.preamble.name])
        for c in info.counters
        if c.preamble.name in contract.COUNTERS
    }
    registers = {
        r.preamble.id: r.preamble.name
        for r in info.registers
        if r.preamble.name in contract.REGISTERS
    }
    return Binding(info, tables, actions, counters, registers, profiles)
