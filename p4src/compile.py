"""Compile the switch's P4 program with p4c, and keep its committed outputs p4c's own.

- :func:`compile_p4` compiles ``p4src/mrc_switch.p4`` for BMv2 (v1model) into a directory;
- :func:`committed_pipeline` names the two committed outputs, the P4Info and the BMv2 JSON:
  they are the contract that the controller, BMv2 and the switchmodel share, so p4c is only
  needed to change the program;
- :func:`stale_outputs` compiles afresh and names the committed files that differ, byte for byte.

Run as a program (``./testbed p4`` runs it)::

    python -m p4src.compile           # rewrite the committed P4Info and BMv2 JSON
    python -m p4src.compile --check   # write nothing: exit 1 if they differ from p4c's output
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

P4SRC = Path(__file__).resolve().parent
REPO_ROOT = P4SRC.parent
P4_SOURCE = P4SRC / "mrc_switch.p4"
P4_P4INFO = P4SRC / "mrc_switch.p4info.txtpb"
P4_JSON = P4SRC / "mrc_switch.json"
P4C = "p4c"
REGENERATE = "./testbed p4"


class ToolMissing(RuntimeError):
    """p4c is not on PATH."""


class P4BuildError(RuntimeError):
    """p4c failed; the message carries its output."""


def compile_p4(out_dir: Path, source: Path = P4_SOURCE) -> tuple[Path, Path]:
    """Compile ``source`` for BMv2 (v1model) with p4c into ``out_dir``.

    p4c runs from the repository root on the source's relative path, so the source file names
    recorded in the JSON are the same on every machine. Returns ``(p4info_path,
    bmv2_json_path)``. Raises :class:`ToolMissing` when p4c is not on PATH and
    :class:`P4BuildError` (with p4c's output) when the compilation fails or warns.
    """
    source = source.resolve()
    if not source.is_file():
        raise FileNotFoundError(f"P4 source {source}: no such file")
    p4c = shutil.which(P4C)
    if p4c is None:
        raise ToolMissing(
            f"{P4C} is not on PATH: cannot compile {source.name} for BMv2 "
            "(install it with scripts/install.sh --with-bmv2, or use the committed "
            f"{P4_JSON.relative_to(REPO_ROOT)})"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = source.stem
    p4info = out_dir.resolve() / f"{stem}.p4info.txtpb"
    bmv2_json = out_dir.resolve() / f"{stem}.json"
    try:
        relative = source.relative_to(REPO_ROOT)
    except ValueError:
        relative = source
    argv = [
        p4c, "--target", "bmv2", "--arch", "v1model", "-Xp4c=--Werror",
        "--p4runtime-files", str(p4info), "-o", str(out_dir.resolve()), str(relative),
    ]  # fmt: skip
    result = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=REPO_ROOT)
    if result.returncode != 0 or not bmv2_json.is_file() or not p4info.is_file():
        output = (result.stdout + result.stderr).strip() or "(no output)"
        raise P4BuildError(f"p4c failed on {relative} (status {result.returncode}):\n{output}")
    # p4c also leaves its preprocessed source (<stem>.p4i), and names it in the JSON by its
    # absolute path in out_dir: neither belongs in the contract, so the JSON names the source.
    preprocessed = out_dir.resolve() / f"{stem}.p4i"
    text = bmv2_json.read_text()
    bmv2_json.write_text(text.replace(f'"{preprocessed}"', f'"{relative}"', 1))
    preprocessed.unlink(missing_ok=True)
    return p4info, bmv2_json


def committed_pipeline() -> tuple[Path, Path]:
    """The committed compiler outputs: ``(p4info_path, bmv2_json_path)``."""
    for path in (P4_P4INFO, P4_JSON):
        if not path.is_file():
            raise FileNotFoundError(
                f"{path.relative_to(REPO_ROOT)} is missing: regenerate it with '{REGENERATE}'"
            )
    return P4_P4INFO, P4_JSON


def stale_outputs(out_dir: Path) -> list[str]:
    """Compile into ``out_dir`` and name the committed outputs that differ from p4c's."""
    p4info, bmv2_json = compile_p4(out_dir)
    stale = []
    for fresh, committed in ((p4info, P4_P4INFO), (bmv2_json, P4_JSON)):
        if not committed.is_file() or committed.read_bytes() != fresh.read_bytes():
            stale.append(str(committed.relative_to(REPO_ROOT)))
    return stale


def main(argv: list[str] | None = None) -> int:
    """Rewrite (or with ``--check`` compare) the committed outputs; 1 on failure."""
    parser = argparse.ArgumentParser(
        prog=REGENERATE,
        description="compile p4src/mrc_switch.p4 with p4c and write its committed P4Info and JSON",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing: exit 1 if the committed files differ from p4c's output",
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="mrc-p4c-") as tmp:
        try:
            if args.check:
                stale = stale_outputs(Path(tmp))
                if stale:
                    print(
                        f"p4src: {', '.join(stale)} differ from p4c's output: "
                        f"run '{REGENERATE}' and commit",
                        file=sys.stderr,
                    )
                    return 1
                print("p4src: the committed P4Info and BMv2 JSON are p4c's output")
                return 0
            outputs = compile_p4(Path(tmp))
        except (ToolMissing, P4BuildError, FileNotFoundError) as exc:
            print(f"p4src: error: {exc}", file=sys.stderr)
            return 1
        for fresh, committed in zip(outputs, (P4_P4INFO, P4_JSON), strict=True):
            shutil.copyfile(fresh, committed)
            print(f"wrote {committed.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
