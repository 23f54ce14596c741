"""The C library under sanitizers: lib_mrc.so, the verbs device and the C checks built with
AddressSanitizer and UndefinedBehaviorSanitizer (``make -C capi sanitize``) and with
ThreadSanitizer (``make -C capi tsan``), run against two real agents in namespaces.

- ``ocp_check`` (every error path of the library) and ``agent_death`` (a killed agent: the
  flush of what the library held; last, as it restarts h0's agent) under ASan + UBSan: no invalid access, no leak, no
  undefined behaviour;
- ``conn_threads`` under TSan: threads sharing one context's session connection, the WRs it
  holds and a completion channel, with no data race.

Any sanitizer finding stops the program (``halt_on_error``) and fails the test with its report.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import capi

from experiments.hostnets import BackToBack

pytestmark = [pytest.mark.netns, pytest.mark.slow]

SKIP = capi.skip_reason()
if SKIP is not None:
    pytest.skip(f"C library under sanitizers: {SKIP}", allow_module_level=True)


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BackToBack]:
    two = capi.two_hosts(tmp_path_factory.mktemp("sannet"), "sa")
    try:
        yield two
    finally:
        two.close()


@pytest.fixture(scope="module")
def asan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return capi.build(tmp_path_factory.mktemp("capi"), "asan")


def agent_logs(net: BackToBack) -> str:
    """The last lines of both agents' logs (for a failure's message)."""
    return "".join(
        f"\n-- {host}.log --\n" + "\n".join(path.read_text(errors="replace").splitlines()[-15:])
        for host, path in net.logs.items()
    )


def run(program: Path, net: BackToBack, timeout: float = 300) -> str:
    """``program`` inside h0's namespace; it must end well with no sanitizer report."""
    done = subprocess.run(
        net.exec_argv("h0", [str(program)]), env=capi.env(program.parent, net),
        capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert not [r for r in capi.SANITIZER_REPORTS if r in out], out[-6000:]
    assert done.returncode == 0 and "ALL OK" in out, out[-6000:] + agent_logs(net)
    return out


def test_error_paths_under_address_and_undefined_behaviour_sanitizers(
    asan: Path, net: BackToBack
) -> None:
    out = run(capi.program("ocp_check", asan, "asan"), net)
    assert out.count("\nok ") >= 45, out


def test_threads_sharing_the_connection_under_thread_sanitizer(
    tmp_path: Path, net: BackToBack
) -> None:
    tsan = capi.build(tmp_path / "capi", "tsan")
    out = run(capi.program("conn_threads", tsan, "tsan"), net)
    assert "ok events_on_the_channel_from_a_thread" in out


def test_agent_death_under_address_and_undefined_behaviour_sanitizers(
    asan: Path, net: BackToBack
) -> None:
    status, out = capi.run_agent_death(capi.program("agent_death", asan, "asan"), net)
    assert not [r for r in capi.SANITIZER_REPORTS if r in out], out[-6000:]
    assert status == 0 and "ALL OK" in out, out + agent_logs(net)
