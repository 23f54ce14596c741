"""The C library under sanitizers: lib_mrc.so, the verbs device and the C checks built with
AddressSanitizer and UndefinedBehaviorSanitizer (``make -C capi sanitize``) and with
ThreadSanitizer (``make -C capi tsan``), run against two real agents in namespaces.

- ``ocp_check`` (every error path of the library) and ``agent_death`` (a killed agent: the
  flush of what the library held; last, as it restarts h0's agent) under ASan + UBSan: no invalid access, no leak, no
  undefined behaviour;
- ``capi/examples/mrc_bw`` under ASan + UBSan, its server (h1's device, the default 64 MiB
  buffer) and client (h0's device, ``-m 65536 -n 20``) meeting over TCP on the loopback: the
  client's rounds fit its own smaller buffer as well as the server's;
- ``conn_threads`` under TSan: threads sharing one context's session connection, the WRs it
  holds and a completion channel, with no data race.

Any sanitizer finding stops the program (``halt_on_error``) and fails the test with its report.
"""

from __future__ import annotations

import subprocess
import time
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


def test_mrc_bw_with_a_client_buffer_smaller_than_the_servers_under_sanitizers(
    asan: Path, net: BackToBack, tmp_path: Path
) -> None:
    """The client (-m 64 KiB) writes each round from its own buffer: rounds sized by the
    server's 64 MiB buffer alone ran past the client's from 4 KiB on (20 messages of it)."""
    bw, env, log = str(asan / "mrc_bw"), capi.env(asan, net), tmp_path / "server.out"
    with log.open("w") as sink:
        server = subprocess.Popen(net.exec_argv("h0", [bw, "-d", "h1", "-t", "200"]), env=env,
                                  stdout=sink, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        # the client starts once the server has its QP and listens
        for _ in range(600):
            if "Waiting for a client" in log.read_text() or server.poll() is not None:
                break
            time.sleep(0.1)
        assert "Waiting for a client" in log.read_text(), log.read_text() + agent_logs(net)
        client = subprocess.run(
            net.exec_argv("h0", [bw, "-d", "h0", "-m", "65536", "-n", "20", "-t", "200",
                                 "127.0.0.1"]),
            env=env, capture_output=True, text=True, timeout=220, check=False,
        )  # fmt: skip
        server.wait(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    out, served = client.stdout + client.stderr, log.read_text()
    for text in (out, served):
        assert not [r for r in capi.SANITIZER_REPORTS if r in text], text[-6000:]
    assert client.returncode == 0, out[-6000:] + agent_logs(net)
    rows = [line.split() for line in out.splitlines() if line[:2].strip().isdigit()]
    assert [(int(r[0]), int(r[1])) for r in rows] == [(1 << k, 20) for k in range(17)], out
    assert "every byte checked by the server" in out, out
    assert server.returncode == 0, served
    assert f"17 sizes, {20 * ((1 << 17) - 1)} bytes received, every byte checked" in served


def test_agent_death_under_address_and_undefined_behaviour_sanitizers(
    asan: Path, net: BackToBack
) -> None:
    status, out = capi.run_agent_death(capi.program("agent_death", asan, "asan"), net)
    assert not [r for r in capi.SANITIZER_REPORTS if r in out], out[-6000:]
    assert status == 0 and "ALL OK" in out, out + agent_logs(net)
