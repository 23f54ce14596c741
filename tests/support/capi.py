"""The C library and the C programs of ``tests/ocp/c`` built for a test, plain or with a
sanitizer (the flags are ``capi/Makefile``'s), and the agent-death run that
``tests/host/test_agent_death.py`` and ``tests/ocp/test_capi_sanitizers.py`` both drive.

``SANITIZERS`` names the builds: ``None`` (the library as installed), ``"asan"``
(AddressSanitizer and UndefinedBehaviorSanitizer, ``make sanitize``) and ``"tsan"``
(ThreadSanitizer, ``make tsan``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from experiments.hostnets import BackToBack, netns_available
from topologies import Fabric, load_topology
from topologies.config import shipped_topology

ROOT = Path(__file__).resolve().parents[2]
MRC_H_PATH = Path(os.environ.get("MRC_H_PATH", str(ROOT.parent / "shared" / "ocp-mrc")))
C_DIR = ROOT / "tests" / "ocp" / "c"
#: sanitizer -> the make target that builds with it, and the Makefile variable of its flags
SANITIZERS: dict[str | None, tuple[str, str]] = {
    None: ("all", "CFLAGS"),
    "asan": ("sanitize", "ASAN_CFLAGS"),
    "tsan": ("tsan", "TSAN_CFLAGS"),
}
#: what a sanitizer's runtime is told: stop at the first finding, say where
SANITIZER_ENV = {
    "ASAN_OPTIONS": "abort_on_error=0:halt_on_error=1:detect_leaks=1",
    "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
    "TSAN_OPTIONS": "halt_on_error=1:second_deadlock_stack=1",
}
#: lines a sanitizer prints when it finds something
SANITIZER_REPORTS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                     "WARNING: ThreadSanitizer")  # fmt: skip


def skip_reason(*, netns: bool = True) -> str | None:
    """Why the C programs cannot run here (namespaces, headers, tools), or None."""
    if netns and (reason := netns_available()) is not None:
        return reason
    if not (MRC_H_PATH / "mrc.h").is_file():
        return f"no OCP MRC API headers at {MRC_H_PATH} (set MRC_H_PATH)"
    if shutil.which("make") is None or not Path("/usr/include/infiniband/verbs.h").is_file():
        return "needs make, a C compiler and libibverbs-dev (scripts/install.sh installs them)"
    return None


def _make(*args: str) -> str:
    done = subprocess.run(
        ["make", "-s", "-C", str(ROOT / "capi"), f"MRC_H_PATH={MRC_H_PATH}", *args],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def build(out: Path, sanitizer: str | None = None) -> Path:
    """lib_mrc.so and the verbs device (and the examples) into ``out``, with ``sanitizer``;
    returns the folder of the libraries."""
    target, _ = SANITIZERS[sanitizer]
    _make(f"BUILD={out}", "EXTRA_CFLAGS=-Werror", target)
    return out if sanitizer is None else out / sanitizer


def program(name: str, libs: Path, sanitizer: str | None = None) -> Path:
    """``tests/ocp/c/NAME.c`` compiled and linked against the libraries in ``libs`` (built
    with the same ``sanitizer``)."""
    _, variable = SANITIZERS[sanitizer]
    flags = _make(f"print-{variable}").split() if sanitizer else ["-O2", "-g"]
    out = libs / name
    subprocess.run(
        ["cc", *flags, "-Wall", "-Wextra", "-Werror", "-pthread", f"-I{MRC_H_PATH}", "-o",
         str(out), str(C_DIR / f"{name}.c"), f"-L{libs}", "-l_mrc", f"-Wl,-rpath,{libs}",
         "-libverbs"],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    return out


def env(libs: Path, net: BackToBack) -> dict[str, str]:
    """The environment of a C program using both hosts' devices of ``net``."""
    out = dict(os.environ, LD_LIBRARY_PATH=f"{libs}/verbs:{libs}",
               MRC_TESTBED_RUN_DIR=str(net.workdir), **SANITIZER_ENV)  # fmt: skip
    out.pop("MRC_TESTBED_OCP_SOCKET", None)
    return out


def two_hosts(workdir: Path, prefix: str) -> BackToBack:
    """h0 and h1 of the small fabric back to back, their agents running (close it)."""
    topo = shipped_topology("small")
    net = BackToBack(Fabric(load_topology(topo)), topo, ("h0", "h1"), prefix=prefix,
                     workdir=workdir)  # fmt: skip
    try:
        net.create()
        net.start_agent("h0")
        net.start_agent("h1")
    except BaseException:
        net.close()
        raise
    return net


def _turn(proc: subprocess.Popen[str], n: int, seen: list[str]) -> None:
    """Read the program's output up to "READY n" (failing at its end)."""
    assert proc.stdout is not None
    for line in proc.stdout:
        seen.append(line)
        if line.strip() == f"READY {n}":
            return
    pytest.fail(f"the program ended before turn {n}:\n{''.join(seen)}")


def _go(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    proc.stdin.write("go\n")
    proc.stdin.flush()


def run_agent_death(agent_death: Path, net: BackToBack) -> tuple[int, str]:
    """``tests/ocp/c/agent_death.c`` through its turns: h1's agent stopped (SIGSTOP) while h0
    posts WRITEs, h0's agent killed (SIGKILL) and started again, h1's resumed. Returns the
    program's exit status and output."""
    proc = subprocess.Popen(
        net.exec_argv("h0", [str(agent_death)]), env=env(agent_death.parent, net), text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    stopped: int | None = None
    seen: list[str] = []
    try:
        _turn(proc, 1, seen)
        stopped = net.agents["h1"].pid
        os.kill(stopped, signal.SIGSTOP)  # h1 acknowledges nothing: h0's WRITEs stay posted
        _go(proc)
        _turn(proc, 2, seen)
        agent: Any = net.agents.pop("h0")
        agent.kill()  # the agent dies without a word
        agent.wait(10)
        net.start_agent("h0")  # and a new one takes its place
        _go(proc)
        _turn(proc, 3, seen)
        os.kill(stopped, signal.SIGCONT)
        stopped = None
        _go(proc)
        rest, _ = proc.communicate(timeout=120)
        return proc.returncode, "".join(seen) + rest
    finally:
        if stopped is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(stopped, signal.SIGCONT)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
