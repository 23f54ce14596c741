"""The committed P4Info against the P4 program.

- everywhere: the committed P4Info matches the contract, and a static reading of the P4 source
  finds every table (keys, match kinds, size), action (parameters and widths), counter (size,
  unit) and register (width, size) of the P4Info, with the same names and bit widths;
- where p4c exists: p4c's own P4Info of the program equals the committed one in every name,
  match kind, bit width and size (ids may differ).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2 as p4i

from controller.bmv2 import P4_SOURCE, p4_build
from controller.p4info import CONTRACT, CONTRACT_COUNTERS, default_p4info_path

P4SRC = P4_SOURCE.parent
MATCH_KIND = {
    "lpm": p4i.MatchField.LPM,
    "exact": p4i.MatchField.EXACT,
    "ternary": p4i.MatchField.TERNARY,
}
V1MODEL_WIDTHS = {"standard_metadata.egress_spec": 9, "standard_metadata.ingress_port": 9}


def load(path: Path) -> Any:
    info = p4i.P4Info()
    text_format.Parse(path.read_text(), info)
    return info


def summary(info: Any) -> dict[str, Any]:
    """Everything that must agree between two P4Infos of the program, ids left out."""
    actions = {a.preamble.id: a.preamble.name for a in info.actions}
    return {
        "arch": info.pkg_info.arch,
        "tables": {
            t.preamble.name: (
                [(m.name, m.bitwidth, m.match_type) for m in t.match_fields],
                sorted(actions[r.id] for r in t.action_refs),
                t.size,
            )
            for t in info.tables
        },
        "actions": {
            a.preamble.name: [(p.name, p.bitwidth) for p in a.params] for a in info.actions
        },
        "counters": {c.preamble.name: (c.spec.unit, c.size) for c in info.counters},
        "registers": {
            r.preamble.name: (r.type_spec.bitstring.bit.bitwidth, r.size) for r in info.registers
        },
    }


def source_text() -> str:
    """The program with its includes, comments removed."""
    text = "\n".join(p.read_text() for p in [P4_SOURCE, *sorted((P4SRC / "include").glob("*.p4"))])
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def widths(text: str) -> dict[str, int]:
    """Bit width of every typedef and of every ``header.field`` (by header type)."""
    types = {m[1]: int(m[0]) for m in re.findall(r"typedef\s+bit<(\d+)>\s+(\w+)\s*;", text)}

    def width(t: str) -> int:
        m = re.fullmatch(r"bit<(\d+)>", t)
        return int(m[1]) if m else types[t]

    found = {name: w for name, w in types.items()}
    headers = dict(re.findall(r"header\s+(\w+)\s*\{(.*?)\}", text, flags=re.S))
    for struct_body in re.findall(r"struct\s+headers_t\s*\{(.*?)\}", text, flags=re.S):
        for htype, member in re.findall(r"(\w+)(?:\[\w+\])?\s+(\w+)\s*;", struct_body):
            for ftype, fname in re.findall(r"([\w<>]+)\s+(\w+)\s*;", headers.get(htype, "")):
                found[f"hdr.{member}.{fname}"] = width(ftype)
    found["__resolve__"] = 0
    found.update({f"bit<{n}>": n for n in range(1, 257)})
    return found


def control_body(text: str, name: str) -> str:
    start = re.search(rf"control\s+{name}\s*\(", text)
    assert start, f"control {name} not found in the P4 source"
    nxt = re.search(r"\ncontrol\s+\w+\s*\(", text[start.end() :])
    return text[start.start() : start.end() + (nxt.start() if nxt else len(text))]


def section(block: str, name: str) -> str:
    """The body of ``name = { ... }`` inside a table declaration."""
    found = re.search(rf"{name}\s*=\s*\{{(.*?)\}}", block, re.S)
    assert found, f"no '{name} = {{...}}' in table declaration"
    return found[1]


def test_committed_p4info_has_the_contract() -> None:
    got = summary(load(default_p4info_path()))
    assert got["arch"] == "v1model"
    for table, actions in CONTRACT.items():
        assert table in got["tables"], table
        assert set(actions) <= set(got["tables"][table][1])
    assert set(CONTRACT_COUNTERS) == set(got["counters"])
    assert got["tables"]["MrcIngress.ipv6_lpm"][0] == [
        ("hdr.ipv6.dst_addr", 128, p4i.MatchField.LPM)
    ]
    assert got["tables"]["MrcIngress.port_qos"][0] == [
        ("standard_metadata.egress_spec", 9, p4i.MatchField.EXACT)
    ]
    assert got["actions"]["MrcIngress.set_next_hop"] == [("port", 9), ("smac", 48), ("dmac", 48)]
    assert got["actions"]["MrcIngress.set_port_qos"] == [
        ("trim_threshold", 19),
        ("ecn_threshold", 19),
    ]
    assert got["counters"]["MrcIngress.drops"] == (p4i.CounterSpec.BOTH, 16)
    assert got["registers"] == {"port_qdepth": (19, 512)}


def test_p4_source_declares_what_the_p4info_says() -> None:
    """A static reading of the program (no compiler here): names, kinds, widths and sizes."""
    text = source_text()
    bits = widths(text)
    info = summary(load(default_p4info_path()))
    for full, (keys, actions, size) in info["tables"].items():
        control, table = full.split(".")
        body = control_body(text, control)
        found = re.search(rf"table\s+{table}\s*\{{(.*?)\n    \}}", body, flags=re.S)
        assert found, f"table {full} not declared in control {control}"
        block = found[1]
        declared_keys = re.findall(r"([\w.]+)\s*:\s*(\w+)\s*;", section(block, "key"))
        assert [
            (k, V1MODEL_WIDTHS.get(k, bits.get(k)), MATCH_KIND[kind]) for k, kind in declared_keys
        ] == keys, full
        declared_actions = re.findall(r"(\w+)\s*;", section(block, "actions"))
        assert (
            sorted(a if a == "NoAction" else f"{control}.{a}" for a in declared_actions) == actions
        ), full
        assert re.search(rf"size\s*=\s*{size}\s*;", block), f"{full}: size {size}"
    for full, params in info["actions"].items():
        if full == "NoAction":
            continue
        control, action = full.split(".")
        found = re.search(rf"action\s+{action}\s*\((.*?)\)", control_body(text, control), re.S)
        assert found, f"action {full} not declared"
        declared = [p.split() for p in found[1].split(",") if p.strip()]
        assert [(name, bits[ptype]) for ptype, name in declared] == params, full
    for full, (unit, size) in info["counters"].items():
        control, counter = full.split(".")
        found = re.search(
            rf"counter<\w+>\((\d+),\s*CounterType\.(\w+)\)\s+{counter}\s*;",
            control_body(text, control),
        )
        assert found, f"counter {full} not declared in {control}"
        assert (
            int(found[1]) == size
            and found[2] == "packets_and_bytes"
            and unit == p4i.CounterSpec.BOTH
        )
    for name, (width, size) in info["registers"].items():
        found = re.search(rf"register<(\w+),\s*\w+>\((\d+)\)\s+{name}\s*;", text)
        assert found, f"register {name} not declared at top level"
        assert (bits[found[1]], int(found[2])) == (width, size)


@pytest.mark.bmv2
@pytest.mark.skipif(shutil.which("p4c") is None, reason="p4c is not on PATH: cannot compile")
def test_p4c_p4info_matches_the_committed_one(tmp_path: Path) -> None:
    p4info_path, _ = p4_build(build_dir=tmp_path, force=True)
    assert summary(load(p4info_path)) == summary(load(default_p4info_path()))
