"""C programs written against the OCP MRC API, run inside testbed hosts, moving data with MRC.

Two real agents (h0 and h1 of the small fabric, ``mrc-host --direct`` in namespaces
``oc<pid>-h0/h1``, planes joined back to back). A state file like the one ``mrc-testbed up``
writes names them, so ``mrc-testbed exec`` runs programs inside them as it would in a running
testbed: the OCP smoke test prints its greeting, the project's example runs its WRITE_IMM
ping-pong and bandwidth sweep between the hosts checking every byte, and a checks program
drives lib_mrc.so's error paths (bad handles, unregistered and out-of-bounds memory, WRITE_IMM
without a receive) with both hosts' devices in one process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from experiments.hostnets import BackToBack, netns_available
from host.agent.ocp import ocp_socket_path
from targets import state as tbstate
from topologies import Fabric, load_topology
from topologies.config import shipped_topology

pytestmark = pytest.mark.netns

SKIP = netns_available()
if SKIP is not None:
    pytest.skip(f"OCP API namespace tests: {SKIP}", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
MRC_H_PATH = Path(os.environ.get("MRC_H_PATH", str(ROOT.parent / "shared" / "ocp-mrc")))
if not (MRC_H_PATH / "mrc.h").is_file():
    pytest.skip(f"no OCP MRC API headers at {MRC_H_PATH} (set MRC_H_PATH)", allow_module_level=True)
TOPO = shipped_topology("small")


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """lib_mrc.so, the verbs device, the example, the OCP smoke test and the checks program."""
    out = tmp_path_factory.mktemp("capi")
    run = {"capture_output": True, "text": True, "timeout": 300, "check": True}
    subprocess.run(["make", "-C", str(ROOT / "capi"), f"BUILD={out}", f"MRC_H_PATH={MRC_H_PATH}",
                    "EXTRA_CFLAGS=-Werror"], **run)  # type: ignore[call-overload]  # fmt: skip
    test_dir = MRC_H_PATH / "test"
    subprocess.run(["make", "-f", str(test_dir / "Makefile"), f"SRC={test_dir / 'mrc_test.c'}",
                    f"INC=-I{test_dir} -I{MRC_H_PATH}", f"BIN={out / 'mrc_test'}"], cwd=out, **run)  # type: ignore[call-overload]  # fmt: skip
    subprocess.run(["cc", "-Wall", "-Wextra", "-Werror", f"-I{MRC_H_PATH}", "-o",
                    str(out / "ocp_check"), str(ROOT / "tests" / "ocp" / "c" / "ocp_check.c"),
                    f"-L{out}", "-l_mrc", f"-Wl,-rpath,{out}", "-libverbs"], **run)  # type: ignore[call-overload]  # fmt: skip
    return out


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BackToBack]:
    work = tmp_path_factory.mktemp("ocpnet")
    b2b = BackToBack(Fabric(load_topology(TOPO)), TOPO, ("h0", "h1"), prefix="oc", workdir=work)
    try:
        b2b.create()
        b2b.start_agent("h0")
        b2b.start_agent("h1")
        yield b2b
    finally:
        b2b.close()


@pytest.fixture(scope="module")
def state_file(net: BackToBack, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A state file naming the two agents, as ``mrc-testbed up`` writes one."""
    path = tmp_path_factory.mktemp("state") / "state.json"
    hosts = {
        h: tbstate.HostState(pid=net.agents[h].pid, control=str(net.control(h)))
        for h in ("h0", "h1")
    }
    tbstate.TestbedState(topology=str(TOPO), target="model", hosts=hosts).save(path)
    return path


def run_in_host(
    state: Path, build: Path, host: str, argv: list[str], timeout: float = 180
) -> subprocess.Popen[str]:
    """``mrc-testbed exec HOST -- argv`` against ``state``, with the libraries of ``build``."""
    env = dict(os.environ, MRC_TESTBED_STATE=str(state), LD_LIBRARY_PATH=f"{build}/verbs:{build}")
    code = (
        "import sys; from experiments import exec_cmd; from pathlib import Path; "
        f"exec_cmd.CAPI_BUILD = Path({str(build)!r}); "
        "from experiments.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    return subprocess.Popen(
        [sys.executable, "-c", code, "exec", host, "--", *argv],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def test_ocp_smoke_test_says_hello_inside_a_host(state_file: Path, build: Path) -> None:
    proc = run_in_host(state_file, build, "h0", [str(build / "mrc_test"), "-d", "h0"])
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert "Hello MRC!" in out


def test_exec_errors_are_one_line(state_file: Path, build: Path) -> None:
    proc = run_in_host(state_file, build, "h9", ["true"])
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert out.strip() == "mrc-testbed exec: no host 'h9' in the running testbed (hosts: h0, h1)"


def test_exec_environment_finds_the_device(state_file: Path, build: Path, net: BackToBack) -> None:
    script = (
        "import os; print(os.environ['MRC_TESTBED_HOST'], os.environ['MRC_TESTBED_OCP_SOCKET'])"
    )
    proc = run_in_host(state_file, build, "h1", [sys.executable, "-c", script])
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert out.split() == ["h1", str(ocp_socket_path(net.control("h1")))]


def test_example_pingpong_and_sweep_across_hosts(
    state_file: Path, build: Path, tmp_path: Path
) -> None:
    args = ["-r", str(tmp_path), "-i", "20", "-s", "262144", "-t", "150"]
    procs = {
        me: run_in_host(state_file, build, me, [str(build / "mrc_pingpong"), "-n", me, "-p", peer, *args])
        for me, peer in (("h0", "h1"), ("h1", "h0"))
    }  # fmt: skip
    outs = {me: p.communicate(timeout=200)[0] for me, p in procs.items()}
    for me, proc in procs.items():
        assert proc.returncode == 0, f"{me}:\n{outs[me]}"
        assert f"{me}: done, every byte checked" in outs[me]
    assert outs["h0"].count("every byte checked by h1") == 7  # 4 KiB .. 256 KiB
    assert "ping-pong 20 round trips" in outs["h1"]


def test_error_paths_of_the_c_library(net: BackToBack, build: Path) -> None:
    env = dict(os.environ, LD_LIBRARY_PATH=f"{build}/verbs:{build}",
               MRC_TESTBED_RUN_DIR=str(net.workdir))  # fmt: skip
    env.pop("MRC_TESTBED_OCP_SOCKET", None)
    done = subprocess.run(
        net.exec_argv("h0", [str(build / "ocp_check")]),
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 0 and "ALL OK" in out, out
    assert "FAIL" not in out
    assert out.count("\nok ") >= 45, out
