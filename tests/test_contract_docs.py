"""The Wireshark dissector and the docs against the contract module (p4src/contract.py).

- ``tools/wireshark/mrc.lua``: every code point and size the script declares (``local NAME = N``
  and the code tables ``local OPCODE = { WRITE_ONLY = 0x0A, ... }``) is the contract's value of
  that name; each table holds its whole enum (``DSCP`` only the trimmed code points it looks
  for), and the script takes the contract's UDP port;
- ``docs/wire-format.md``, section "Code points": every row names the contract's constant and
  gives its value;
- ``docs/p4-pipeline.md``: the tables (key, match kind and width, actions with their
  parameters, default action, size), the counters and their sizes, the drop reasons, the
  registers, the DSCP code points with their priority class and the ECN code points.

A renamed table, a new drop reason or a changed code point that is not carried into the script
and the docs fails here.
"""

from __future__ import annotations

import enum
import re
from pathlib import Path

import pytest

from p4src import contract

ROOT = Path(__file__).resolve().parents[1]
LUA = (ROOT / "tools" / "wireshark" / "mrc.lua").read_text()
WIRE_FORMAT = (ROOT / "docs" / "wire-format.md").read_text()
PIPELINE = (ROOT / "docs" / "p4-pipeline.md").read_text()

#: Lua code tables that may name a part of their enum only
PARTIAL = {"DSCP"}


def section(text: str, title: str) -> str:
    """The body of the markdown section ``## title`` (up to the next ``## ``)."""
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def rows(text: str) -> list[list[str]]:
    """The cells of every markdown table row of ``text`` (separator rows left out)."""
    return [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in text.splitlines()
        if line.startswith("|") and not re.fullmatch(r"\|[-| ]+\|", line.strip())
    ]


def number(text: str) -> int:
    return int(text.strip(), 0)


def enum_named(name: str) -> type[enum.IntEnum] | type[enum.IntFlag]:
    """The contract's enum a Lua table name stands for: ``EXT_TYPE`` -> ``ExtType``."""
    found = getattr(contract, "".join(part.capitalize() for part in name.split("_")))
    assert isinstance(found, type) and issubclass(found, enum.IntEnum | enum.IntFlag), name
    return found


# -- the Wireshark dissector ------------------------------------------------------------------------


def lua_constants() -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """The script's numeric ``local`` constants and its ``local NAME = { K = N, ... }`` tables."""
    scalars: dict[str, int] = {}
    for names, values in re.findall(r"^local ([A-Z_, ]+) = ([0-9xXa-fA-F, ]+)$", LUA, re.M):
        for name, value in zip(names.split(","), values.split(","), strict=True):
            scalars[name.strip()] = number(value)
    tables: dict[str, dict[str, int]] = {}
    for name, body in re.findall(r"^local ([A-Z_]+) = \{([^}]*)\}", LUA, re.M):
        members = re.findall(r"([A-Z_0-9]+) = (0x[0-9A-Fa-f]+|\d+)", body)
        if members and len(members) == body.count("="):
            tables[name] = {key: number(value) for key, value in members}
    return scalars, tables


def test_the_dissectors_code_points_are_the_contracts() -> None:
    scalars, tables = lua_constants()
    assert scalars, "no constants found in mrc.lua"
    for name, value in scalars.items():
        assert getattr(contract, name) == value, f"mrc.lua: {name} = {value}"
    assert {"OPCODE", "EXT_TYPE", "EP_OP", "SYNDROME", "DSCP"} <= set(tables)
    for name, members in tables.items():
        codes = enum_named(name)
        want = {m.name: int(m.value) for m in codes if m.name}
        if name in PARTIAL:
            assert members.items() <= want.items(), f"mrc.lua: {name} = {members}"
        else:
            assert members == want, f"mrc.lua: {name} = {members}, contract: {want}"
    assert "udp_port:add(ROCEV2_UDP_PORT, mrc)" in LUA


def test_the_dissector_writes_no_code_point_outside_its_declarations() -> None:
    body = LUA[LUA.index("local function names_of") :]
    assert str(contract.ROCEV2_UDP_PORT) not in re.sub(r"--[^\n]*", "", body)
    for kind in ("ext_type", "opcode"):
        assert not re.search(rf"{kind} [~=<>]=? ?\d", body), f"mrc.lua compares {kind} to a number"


# -- docs/wire-format.md -------------------------------------------------------------------------


def test_the_wire_formats_code_points_are_the_contracts() -> None:
    table = rows(section(WIRE_FORMAT, "Code points"))
    assert table[0] == ["what", "contract", "value"]
    named = set()
    for what, names, values in table[1:]:
        refs = re.findall(r"`([A-Za-z_0-9.]+)`", names)
        numbers = [number(v) for v in values.split(",")]
        assert refs and len(refs) == len(numbers), what
        for ref, value in zip(refs, numbers, strict=True):
            obj: object = contract
            for part in ref.split("."):
                obj = getattr(obj, part)
            assert obj == value, f"docs/wire-format.md: {what}: {ref} is {obj}, not {value}"
            named.add(ref)
    for codes in (
        contract.Opcode,
        contract.Dscp,
        contract.Ecn,
        contract.Syndrome,
        contract.ExtType,
    ):
        assert {f"{codes.__name__}.{m.name}" for m in codes} <= named, codes.__name__


# -- docs/p4-pipeline.md ---------------------------------------------------------------------------


def test_the_pipeline_docs_tables_are_the_contracts() -> None:
    table = rows(section(PIPELINE, "Tables"))[1:]
    assert [r[0].strip("`") for r in table] == [t.name for t in contract.TABLES]
    for (_, key, actions, default, size), spec in zip(table, contract.TABLES, strict=True):
        field, kind, width = re.match(r"`([\w.]+)` \((\w+), (\d+)\)", key).groups()  # type: ignore[union-attr]
        key_shown = (field, contract.MatchKind[kind.upper()], int(width))
        assert key_shown == (spec.key.name, spec.key.kind, spec.key.bitwidth), spec.name
        named = re.findall(r"`([\w.]+)(?:\(([^)]*)\))?`", actions)
        assert {name for name, _ in named} == set(spec.actions), spec.name
        for name, params in named:
            declared = [(p.name, p.bitwidth) for p in contract.action(name).params]
            shown = [(n, int(w)) for w, n in re.findall(r"bit<(\d+)> (\w+)", params)]
            assert shown == declared, f"{name}({params})"
        first = re.search(r"`([\w.]+)`", default).group(1)  # type: ignore[union-attr]
        assert spec.default_action.endswith(first), spec.name
        assert number(size) == spec.size, spec.name


def test_the_pipeline_docs_counters_drop_reasons_and_registers_are_the_contracts() -> None:
    text = section(PIPELINE, "Counters (indirect, packets and bytes)")
    counters = {r[0].strip("`"): number(r[1]) for r in rows(text)[1:]}
    assert counters == dict(contract.COUNTERS)
    listed = re.search(r"Drop reasons \(index of `[\w.]+`\): ([^.]*)\.", text.replace("\n", " "))
    assert listed is not None
    reasons = {name: int(index) for index, name in re.findall(r"(\d+) ([A-Z_0-9]+)", listed[1])}
    assert reasons == {r.name: int(r) for r in contract.DropReason}
    registers = section(PIPELINE, "Registers")
    for name, (width, size) in contract.REGISTERS.items():
        assert f"`{name}`" in registers
        assert f"`register<bit<{width}>>({size})`" in registers


def test_the_pipeline_docs_code_points_are_the_contracts() -> None:
    text = section(PIPELINE, "Code points")
    dscp = {number(r[0]): r[2] for r in rows(text)[1:]}
    assert set(dscp) == {int(d) for d in contract.Dscp}
    for code, priority in dscp.items():
        want = (
            contract.Priority.HIGH
            if code in contract.HIGH_PRIORITY_DSCPS
            else contract.Priority.LOW
        )
        assert priority == f"{want.name.lower()} ({int(want)})", f"DSCP {code}: {priority}"
    ecn = re.search(r"ECN \(the low 2 bits of the IPv6 traffic class\): ([^.]*)\.", text)
    assert ecn is not None
    shown = dict(re.findall(r"([01]{2}) ([\w()-]+)", ecn[1]))
    assert {int(bits, 2) for bits in shown} == {int(e) for e in contract.Ecn}


@pytest.mark.parametrize("doc", ["wire-format.md", "p4-pipeline.md"])
def test_the_docs_name_the_contract_module(doc: str) -> None:
    assert "p4src/contract.py" in (ROOT / "docs" / doc).read_text()
