"""The contract module (p4src/contract.py) against the P4 program and p4c's committed P4Info.

- every ``const`` of the program (``p4src/include/*.p4``, and the ``#define`` of the segment
  bound) has the contract's value, and the contract states no constant the program lacks;
- the committed P4Info is the contract's program: each table, action, parameter, match field,
  action profile, counter and register, with widths and sizes, and nothing more;
- the selector fields of ``ipv6_ecmp`` are the ones the contract's ECMP hash packs, in order;
- the one P4Info check names what a wrong P4Info lacks.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import text_format

from p4src import contract
from p4src.proto import p4i

P4SRC = Path(contract.__file__).resolve().parent
CONST = re.compile(r"^\s*const\s+\S+\s+(\w+)\s*=\s*(\w+)\s*;", re.MULTILINE)
DEFINE = re.compile(r"^#define\s+(\w+)\s+(\d+)\s*$", re.MULTILINE)


def program_constants() -> dict[str, int]:
    """``const T NAME = VALUE;`` and numeric ``#define``s of the program, by name."""
    found: dict[str, int] = {}
    for path in sorted((P4SRC / "include").glob("*.p4")) + [P4SRC / "mrc_switch.p4"]:
        text = path.read_text()
        for name, value in CONST.findall(text) + DEFINE.findall(text):
            assert name not in found, f"{path.name}: {name} declared twice"
            found[name] = int(value, 0)
    return found


@pytest.fixture(scope="module")
def info() -> Any:
    proto = p4i.P4Info()
    text_format.Parse((P4SRC / "mrc_switch.p4info.txtpb").read_text(), proto)
    return proto


def test_every_constant_of_the_program_is_the_contracts() -> None:
    consts = program_constants()
    assert len(consts) > 30
    assert consts == {name: int(value) for name, value in contract.P4_CONSTANTS.items()}


def test_the_committed_p4info_is_the_contracts_program(info: Any) -> None:
    assert info.pkg_info.arch == "v1model"
    assert contract.p4info_problems(info) == []
    actions = {a.preamble.id: a.preamble.name for a in info.actions}
    assert {a.name for a in contract.ACTIONS} == set(actions.values())
    for spec in contract.TABLES:
        found = next(t for t in info.tables if t.preamble.name == spec.name)
        assert sorted(actions[r.id] for r in found.action_refs) == sorted(spec.actions)
        assert found.size == spec.size
    assert [t.name for t in contract.TABLES] == [t.preamble.name for t in info.tables]
    assert dict(contract.COUNTERS) == {c.preamble.name: c.size for c in info.counters}
    assert all(c.spec.unit == p4i.CounterSpec.BOTH for c in info.counters)
    assert set(contract.PROFILES.items()) == {
        (p.preamble.name, p.size) for p in info.action_profiles
    }
    assert set(contract.REGISTERS) == {r.preamble.name for r in info.registers}
    assert {t.profile for t in contract.TABLES if t.profile} == set(contract.PROFILES)
    assert {int(m) for m in contract.MatchKind} <= set(p4i.MatchField.MatchType.values())
    assert contract.MatchKind.LPM == p4i.MatchField.LPM
    assert contract.MatchKind.EXACT == p4i.MatchField.EXACT


def test_the_ecmp_selector_fields_are_the_hashs() -> None:
    ingress = (P4SRC / "include" / "ingress.p4").read_text()
    table = ingress[ingress.index(f"table {contract.IPV6_ECMP.split('.')[-1]}") :]
    fields = re.findall(r"([\w.]+)\s*:\s*selector\s*;", table[: table.index("}")])
    assert fields == [name for name, _ in contract.ECMP_SELECTOR_FIELDS]
    assert contract.SELECTOR_BYTES == 37


def test_a_wrong_p4info_is_named(info: Any) -> None:
    proto = p4i.P4Info()
    proto.CopyFrom(info)
    kept = [t for t in proto.tables if t.preamble.name != contract.MY_SID]
    del proto.tables[:]
    proto.tables.extend(kept)
    next(c for c in proto.counters if c.preamble.name == contract.DROPS).size = 8
    next(a for a in proto.actions if a.preamble.name == contract.SET_NEXT_HOP).params[
        0
    ].bitwidth = 8
    problems = contract.p4info_problems(proto)
    assert f"table {contract.MY_SID}" in problems
    assert f"counter {contract.DROPS} of size 16 (it has 8)" in problems
    assert f"action {contract.SET_NEXT_HOP} parameter 'port' of bit<9> in place 1" in " ".join(
        problems
    )
    assert len(problems) == 3


def test_the_ecmp_hash_is_crc32_over_the_packed_fields() -> None:
    packed = contract.selector_input(1, 2, 0xFFFFF, 0xC000)
    assert len(packed) == contract.SELECTOR_BYTES
    assert int.from_bytes(packed, "big") == ((((1 << 128 | 2) << 20 | 0xFFFFF) << 16 | 0xC000) << 4)
    with pytest.raises(ValueError, match="flow_label"):
        contract.selector_input(0, 0, 1 << 20, 0)
    assert 0 <= contract.member_index(1, 2, 3, 4, 3) < 3
