"""The committed compiler outputs are the contract: p4c's P4Info and BMv2 JSON of the program.

- everywhere: the default P4Info is the committed one (tests/test_contract.py holds it against
  the contract module, p4src/contract.py);
- where p4c exists (always in CI): compiling ``p4src/mrc_switch.p4`` gives exactly the committed
  P4Info and BMv2 JSON, byte for byte, and without a warning.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import text_format

from controller.p4info import default_p4info_path
from p4src.compile import P4_JSON, P4_P4INFO, compile_p4, stale_outputs
from p4src.proto import p4i

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
