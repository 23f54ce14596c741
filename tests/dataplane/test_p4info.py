"""The committed compiler outputs are the contract: p4c's P4Info and BMv2 JSON of the program.

- everywhere: the committed P4Info declares the contract the controller and switchmodel rely on
  (tables, match fields, actions and parameters, counters, the depth register, with their widths);
- where p4c exists (always in CI): compiling ``p4src/mrc_switch.p4`` gives exactly the committed
  P4Info and BMv2 JSON, byte for byte, and without a warning.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2 as p4i

from controller.p4info import CONTRACT, CONTRACT_COUNTERS, default_p4info_path
from p4src.compile import P4_JSON, P4_P4INFO, compile_p4, stale_outputs

needs_p4c = pytest.mark.skipif(shutil.which("p4c") is None, reason="p4c is not on PATH")


def load(path: Path) -> Any:
    info = p4i.P4Info()
    text_format.Parse(path.read_text(), info)
    return info


def summary(info: Any) -> dict[str, Any]:
    """Everything the contract says of a P4Info of the program, ids left out."""
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


def test_the_default_p4info_is_the_committed_compiler_output() -> None:
    assert default_p4info_path() == P4_P4INFO
    assert P4_JSON.is_file(), "the committed BMv2 JSON is missing"


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
        ("ecn_max_threshold", 19),
        ("ecn_slope", 16),
        ("last_hop", 1),
    ]
    assert got["counters"]["MrcIngress.drops"] == (p4i.CounterSpec.BOTH, 16)
    assert got["registers"] == {"port_qdepth": (19, 512), "port_arrivals": (19, 512)}


@pytest.mark.bmv2
@needs_p4c
def test_committed_outputs_are_what_p4c_produces(tmp_path: Path) -> None:
    """Regenerate with ``./testbed p4`` when this fails, and commit."""
    assert stale_outputs(tmp_path) == []


@pytest.mark.bmv2
@needs_p4c
def test_p4c_compiles_the_program_warning_free(tmp_path: Path) -> None:
    """compile_p4 runs p4c with --Werror: a warning would have raised P4BuildError."""
    p4info, bmv2_json = compile_p4(tmp_path)
    assert summary(load(p4info)) == summary(load(P4_P4INFO))
    assert bmv2_json.read_bytes() == P4_JSON.read_bytes()
    assert not (tmp_path / "mrc_switch.p4i").exists()
