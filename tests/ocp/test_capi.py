"""lib_mrc.so and the emulated verbs device build cleanly, export the whole OCP API, and the C
programs that use them (the OCP smoke test, the project's example and checks) build.

The OCP headers are looked for where the install step looks (``MRC_H_PATH``, default
``../shared/ocp-mrc`` next to the repository); tests that need them skip, saying so, where
they are absent.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MRC_H_PATH = Path(os.environ.get("MRC_H_PATH", str(ROOT.parent / "shared" / "ocp-mrc")))
HAVE_HEADERS = (MRC_H_PATH / "mrc.h").is_file()
NO_HEADERS = (
    f"no OCP MRC API headers at {MRC_H_PATH}: they are published in"
    " opencomputeproject/OCP-Multipath-Reliable-Connection; set MRC_H_PATH to a copy"
)
HAVE_VERBS_DEV = Path("/usr/include/infiniband/verbs.h").is_file()

pytestmark = pytest.mark.skipif(
    shutil.which("make") is None or shutil.which("cc") is None or not HAVE_VERBS_DEV,
    reason="needs make, a C compiler and libibverbs-dev (scripts/install.sh installs them)",
)


def make(*args: str, cwd: Path = ROOT / "capi") -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        ["make", *args], cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def build_strict(build: Path) -> None:
    """Everything of capi/ with -Wall -Wextra -Werror into ``build``."""
    target = "all" if HAVE_HEADERS else "verbs"
    done = make(target, f"BUILD={build}", f"MRC_H_PATH={MRC_H_PATH}", "EXTRA_CFLAGS=-Werror")
    assert "warning" not in done.stderr, done.stderr


def test_verbs_device_builds_without_warnings(tmp_path: Path) -> None:
    make("verbs", f"BUILD={tmp_path}", "EXTRA_CFLAGS=-Werror")
    lib = tmp_path / "verbs" / "libibverbs.so.1"
    symbols = subprocess.run(
        ["objdump", "-T", str(lib)], capture_output=True, text=True, check=True
    ).stdout
    for name in ("ibv_get_device_list", "ibv_open_device", "ibv_reg_mr", "ibv_query_port",
                 "ibv_query_gid", "ibv_wc_status_str"):  # fmt: skip
        assert re.search(rf"IBVERBS_1\.1\s+{name}$", symbols, re.M), f"{name} not at IBVERBS_1.1"


@pytest.mark.skipif(not HAVE_HEADERS, reason=NO_HEADERS)
def test_lib_mrc_builds_without_warnings_and_exports_every_function(tmp_path: Path) -> None:
    build_strict(tmp_path)
    exported = set(
        subprocess.run(
            ["nm", "-D", "--defined-only", str(tmp_path / "lib_mrc.so")],
            capture_output=True, text=True, check=True,
        ).stdout.split()
    )  # fmt: skip
    declared: set[str] = set()
    for header in ("mrc.h", "mrc_ctl.h"):
        text = re.sub(r"/\*.*?\*/", "", (MRC_H_PATH / header).read_text(), flags=re.S)
        declared |= set(re.findall(r"\b(mrc_\w+)\s*\(", text))
    assert len(declared) > 40
    missing = sorted(declared - exported)
    assert not missing, f"lib_mrc.so lacks {missing}"
    assert (tmp_path / "mrc_pingpong").is_file()  # the example, built with -Werror too


@pytest.mark.skipif(not HAVE_HEADERS, reason=NO_HEADERS)
def test_ocp_smoke_test_builds_with_its_own_makefile(tmp_path: Path) -> None:
    test_dir = MRC_H_PATH / "test"
    if not (test_dir / "Makefile").is_file():
        pytest.skip(f"no OCP smoke test in {test_dir}")
    # the OCP Makefile's own line, run from a scratch folder so nothing is written beside it
    make("-f", str(test_dir / "Makefile"), f"SRC={test_dir / 'mrc_test.c'}",
         f"INC=-I{test_dir} -I{MRC_H_PATH}", f"BIN={tmp_path / 'mrc_test'}", cwd=tmp_path)  # fmt: skip
    assert (tmp_path / "mrc_test").is_file()


@pytest.mark.skipif(not HAVE_HEADERS, reason=NO_HEADERS)
def test_checks_program_builds_without_warnings(tmp_path: Path) -> None:
    build_strict(tmp_path)
    subprocess.run(
        ["cc", "-Wall", "-Wextra", "-Werror", f"-I{MRC_H_PATH}", "-o", str(tmp_path / "ocp_check"),
         str(ROOT / "tests" / "ocp" / "c" / "ocp_check.c"), f"-L{tmp_path}", "-l_mrc",
         "-libverbs"],
        check=True, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
