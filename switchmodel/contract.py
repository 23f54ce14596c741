"""The P4Info contract of mrc_switch: what a pipeline config must contain for switchmodel to run it.

switchmodel implements one program. A P4Info given to SetForwardingPipelineConfig is accepted
when it declares the program's tables, match fields, actions, parameters, counters and register
with the contract's NAMES and bit widths (:func:`bind`); the numeric ids are whatever that P4Info
assigns, and :class:`Binding` maps them back to the program's objects. Anything missing or of
another width is a :class:`ContractError` naming it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from p4.config.v1 import p4info_pb2 as p4i

MY_SID = "MrcIngress.my_sid"
IPV6_LPM = "MrcIngress.ipv6_lpm"
IPV6_ECMP = "MrcIngress.ipv6_ecmp"
PORT_QOS = "MrcIngress.port_qos"
#: the action selector of ipv6_ecmp (its members and groups are written over P4Runtime)
ECMP_SELECTOR = "MrcIngress.ecmp_selector"

NO_ACTION = "NoAction"
USID_UN = "MrcIngress.usid_un"
SRV6_END = "MrcIngress.srv6_end"
SET_NEXT_HOP = "MrcIngress.set_next_hop"
DROP_NO_ROUTE = "MrcIngress.drop_no_route"
SET_PORT_QOS = "MrcIngress.set_port_qos"

PORT_QDEPTH = "port_qdepth"
PORT_ARRIVALS = "port_arrivals"
#: the program's registers (declared at top level, so P4Info names them without a control)
REGISTERS = (PORT_QDEPTH, PORT_ARRIVALS)
#: table -> its action profile (with a selector): the table's entries point at its groups
PROFILES: dict[str, str] = {IPV6_ECMP: ECMP_SELECTOR}

# table -> (match field name, bit width, match type), actions it must offer, default action
TABLES: dict[str, tuple[tuple[str, int, int], frozenset[str], str]] = {
    MY_SID: (
        ("hdr.ipv6.dst_addr", 128, p4i.MatchField.LPM),
        frozenset({USID_UN, SRV6_END, NO_ACTION}),
        NO_ACTION,
    ),
    IPV6_LPM: (
        ("hdr.ipv6.dst_addr", 128, p4i.MatchField.LPM),
        frozenset({SET_NEXT_HOP, DROP_NO_ROUTE}),
        DROP_NO_ROUTE,
    ),
    IPV6_ECMP: (
        ("hdr.ipv6.dst_addr", 128, p4i.MatchField.LPM),
        frozenset({SET_NEXT_HOP, NO_ACTION}),
        NO_ACTION,
    ),
    PORT_QOS: (
        ("standard_metadata.egress_spec", 9, p4i.MatchField.EXACT),
        frozenset({SET_PORT_QOS, NO_ACTION}),
        NO_ACTION,
    ),
}
ACTIONS: dict[str, dict[str, int]] = {
    NO_ACTION: {},
    USID_UN: {},
    SRV6_END: {},
    SET_NEXT_HOP: {"port": 9, "smac": 48, "dmac": 48},
    DROP_NO_ROUTE: {},
    SET_PORT_QOS: {
        "trim_threshold": 19,
        "ecn_threshold": 19,
        "ecn_max_threshold": 19,
        "ecn_slope": 16,
        "last_hop": 1,
    },
}
COUNTERS: dict[str, int] = {
    "MrcIngress.port_in": 512,
    "MrcIngress.trimmed": 512,
    "MrcIngress.ecn_marked": 512,
    "MrcIngress.drops": 16,
    "MrcEgress.port_out": 512,
}
REGISTER_WIDTH = 19
REGISTER_SIZE = 512


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
    registers: dict[int, str]  # id -> name (one of REGISTERS)
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


def _bitwidth(type_spec: p4i.P4DataTypeSpec) -> int | None:
    if type_spec.HasField("bitstring"):
        bits = type_spec.bitstring
        for kind in ("bit", "int", "varbit"):
            if bits.HasField(kind):
                return int(getattr(bits, kind).bitwidth)
    return None


def bind(info: p4i.P4Info) -> Binding:
    """Check ``info`` against the contract and map its ids (ContractError naming a mismatch)."""
    problems: list[str] = []
    actions_by_name = {a.preamble.name: a for a in info.actions}
    actions: dict[int, ActionBinding] = {}
    for name, params in ACTIONS.items():
        action = actions_by_name.get(name)
        if action is None:
            problems.append(f"action '{name}' is missing")
            continue
        found = {p.name: p for p in action.params}
        for pname, width in params.items():
            if pname not in found:
                problems.append(f"action '{name}' lacks parameter '{pname}' (bit<{width}>)")
            elif found[pname].bitwidth != width:
                problems.append(
                    f"action '{name}' parameter '{pname}' is bit<{found[pname].bitwidth}>, "
                    f"expected bit<{width}>"
                )
        extra = set(found) - set(params)
        if extra:
            problems.append(f"action '{name}' has unexpected parameters {sorted(extra)}")
        actions[action.preamble.id] = ActionBinding(
            name, action.preamble.id, {p.id: (p.name, p.bitwidth) for p in action.params}
        )
    action_names = {a.id: a.name for a in actions.values()}

    tables_by_name = {t.preamble.name: t for t in info.tables}
    tables: dict[int, TableBinding] = {}
    for name, ((field, width, match_type), needed, _default) in TABLES.items():
        table = tables_by_name.get(name)
        if table is None:
            problems.append(f"table '{name}' is missing")
            continue
        fields = {f.name: f for f in table.match_fields}
        if field not in fields or len(fields) != 1:
            problems.append(f"table '{name}' must match on exactly '{field}'")
            continue
        mf = fields[field]
        if mf.bitwidth != width or mf.match_type != match_type:
            problems.append(
                f"table '{name}' field '{field}' is {p4i.MatchField.MatchType.Name(mf.match_type)} "
                f"bit<{mf.bitwidth}>, expected "
                f"{p4i.MatchField.MatchType.Name(match_type)} bit<{width}>"
            )
        refs = {ref.id for ref in table.action_refs}
        offered = {action_names.get(ref) for ref in refs}
        for action_name in sorted(needed - offered):
            problems.append(f"table '{name}' does not offer action '{action_name}'")
        tables[table.preamble.id] = TableBinding(
            name,
            table.preamble.id,
            mf.id,
            mf.bitwidth,
            mf.match_type,
            frozenset(ref for ref in refs if ref in action_names),
            int(table.size) or 1024,
            int(table.implementation_id),
        )

    profiles_by_name = {p.preamble.name: p for p in info.action_profiles}
    profiles: dict[int, ProfileBinding] = {}
    for table_name, profile_name in PROFILES.items():
        profile = profiles_by_name.get(profile_name)
        if profile is None:
            problems.append(f"action profile '{profile_name}' is missing")
            continue
        table = tables_by_name.get(table_name)
        if not profile.with_selector:
            problems.append(f"action profile '{profile_name}' has no selector")
        if table is None or table.implementation_id != profile.preamble.id:
            problems.append(f"table '{table_name}' is not implemented by '{profile_name}'")
            continue
        profiles[profile.preamble.id] = ProfileBinding(
            profile_name, profile.preamble.id, table.preamble.id, int(profile.size) or 1024
        )

    counters_by_name = {c.preamble.name: c for c in info.counters}
    counters: dict[int, tuple[str, int]] = {}
    for name, size in COUNTERS.items():
        counter = counters_by_name.get(name)
        if counter is None:
            problems.append(f"counter '{name}' is missing")
        elif counter.size != size:
            problems.append(f"counter '{name}' has size {counter.size}, expected {size}")
        else:
            counters[counter.preamble.id] = (name, size)

    registers: dict[int, str] = {}
    declared = {r.preamble.name: r for r in info.registers}
    for name in REGISTERS:
        register = declared.get(name)
        if register is None:
            problems.append(f"register '{name}' is missing")
            continue
        found_width = _bitwidth(register.type_spec)
        if found_width != REGISTER_WIDTH or register.size != REGISTER_SIZE:
            problems.append(
                f"register '{name}' is bit<{found_width}>[{register.size}], "
                f"expected bit<{REGISTER_WIDTH}>[{REGISTER_SIZE}]"
            )
        registers[register.preamble.id] = name

    if problems:
        raise ContractError("P4Info is not the mrc_switch program: " + "; ".join(problems))
    return Binding(info, tables, actions, counters, registers, profiles)
