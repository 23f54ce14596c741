"""When a host agent dies: its peers' QPs fail after their retry budget, and the applications of
the dead agent are told (docs/host-agent.md, "Failure behaviour").

The transport checks run on the in-memory network: a peer whose agent is gone (every NIC of
its host down) and a QP whose every EV an operator DENIED both end in a failed QP and a
failed completion, with ``retry.exp_cnt`` 25 ("no limit"), instead of waiting forever. The
application side (``IBV_EVENT_DEVICE_FATAL``, every posted WR flushed) is
``tests/ocp/c/agent_death.c`` against real agents in namespaces: the agent of one host is
killed while the program holds QPs on it.
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
from host.transport.config import StackConfig
from host.transport.events import STATUS_RETRY_EXCEEDED, QpError
from host.transport.evs import EvState
from topologies import Fabric, load_topology
from topologies.config import shipped_topology

ROOT = Path(__file__).resolve().parents[2]
MRC_H_PATH = Path(os.environ.get("MRC_H_PATH", str(ROOT.parent / "shared" / "ocp-mrc")))


def _post(net: Any, src: str = "h0", dst: str = "h3") -> Any:
    flow = net.connect(src, dst)
    flow.sender.post_write(b"x" * 65536, flow.region.addr, flow.region.rkey)
    return flow


def _failed(net: Any, flow: Any, until: float) -> tuple[list[Any], list[QpError]]:
    net.sim.kick(flow.src)
    net.run(until, stop=lambda: len(net.cqs[flow.src]) > 0)
    errors = [e for e in net.events if isinstance(e, QpError) and e.qpn == flow.sender.qpn]
    return net.cqs[flow.src].poll(), errors


def test_peer_of_a_dead_agent_fails_after_its_retry_budget(make_net: Any) -> None:
    net = make_net(seed=3, config=StackConfig(retry_exp_cnt=25))
    flow = _post(net)
    for plane in range(len(net.fabric.host("h3").nics)):
        net.sim.fail_nic("h3", plane, 0.0)  # the agent of h3 is gone: nothing answers
    completions, errors = _failed(net, flow, until=3600.0)
    assert [c.status for c in completions] == [STATUS_RETRY_EXCEEDED]
    assert len(errors) == 1, errors
    assert flow.sender.error is not None


def test_qp_with_every_ev_denied_fails_after_the_ack_timeout_budget(make_net: Any) -> None:
    # nothing is ever in flight, so no ACK timeout fires; before, the QP waited forever
    net = make_net(seed=4, config=StackConfig(retry_exp_cnt=25))
    flow = _post(net)
    evs = [info.ev for info in flow.sender.ev_table.evs()]
    net.hosts["h0"].set_ev_states(flow.sender.qpn, evs, EvState.DENIED, 0.0)
    completions, errors = _failed(net, flow, until=3600.0)
    assert [c.status for c in completions] == [STATUS_RETRY_EXCEEDED]
    assert len(errors) == 1 and "no EV to send on" in errors[0].reason
    assert f"{len(evs)} denied" in errors[0].reason  # says why


def test_the_budget_follows_the_retry_counters(make_net: Any) -> None:
    # a smaller retry budget fails sooner; EVs released before the budget runs out save the QP
    short = make_net(seed=5, config=StackConfig(retry_linear_cnt=1, retry_exp_cnt=2))
    flow = _post(short)
    evs = [info.ev for info in flow.sender.ev_table.evs()]
    short.hosts["h0"].set_ev_states(flow.sender.qpn, evs, EvState.DENIED, 0.0)
    _failed(short, flow, until=3600.0)
    quick = next(e.time for e in short.events if isinstance(e, QpError))

    slow = make_net(seed=5, config=StackConfig(retry_exp_cnt=25))
    flow = _post(slow)
    slow.hosts["h0"].set_ev_states(flow.sender.qpn, evs, EvState.DENIED, 0.0)
    _failed(slow, flow, until=3600.0)
    assert quick < next(e.time for e in slow.events if isinstance(e, QpError))

    saved = make_net(seed=6, config=StackConfig(retry_exp_cnt=25))
    flow = _post(saved)
    saved.hosts["h0"].set_ev_states(flow.sender.qpn, evs, EvState.DENIED, 0.0)
    saved.sim.kick("h0")
    saved.run(quick / 2)
    saved.hosts["h0"].set_ev_states(flow.sender.qpn, evs, EvState.GOOD)
    completions, errors = _failed(saved, flow, until=3600.0)
    assert [c.status for c in completions] == ["ok"] and not errors


def _skip_reason() -> str | None:
    if (reason := netns_available()) is not None:
        return reason
    if not (MRC_H_PATH / "mrc.h").is_file():
        return f"no OCP MRC API headers at {MRC_H_PATH} (set MRC_H_PATH)"
    if shutil.which("make") is None or not Path("/usr/include/infiniband/verbs.h").is_file():
        return "needs make and libibverbs-dev (scripts/install.sh installs them)"
    return None


def _build(out: Path) -> Path:
    """lib_mrc.so, the verbs device and tests/ocp/c/agent_death.c, into ``out``."""
    run: dict[str, Any] = {"capture_output": True, "text": True, "timeout": 300, "check": True}
    subprocess.run(["make", "-C", str(ROOT / "capi"), f"BUILD={out}", f"MRC_H_PATH={MRC_H_PATH}",
                    "EXTRA_CFLAGS=-Werror", "verbs", str(out / "lib_mrc.so")], **run)  # fmt: skip
    program = out / "agent_death"
    subprocess.run(["cc", "-Wall", "-Wextra", "-Werror", f"-I{MRC_H_PATH}", "-o", str(program),
                    str(ROOT / "tests" / "ocp" / "c" / "agent_death.c"), f"-L{out}", "-l_mrc",
                    f"-Wl,-rpath,{out}", "-libverbs"], **run)  # fmt: skip
    return program


def _turn(proc: subprocess.Popen[str], n: int, seen: list[str]) -> None:
    """Read the program's output up to "READY n" (failing on its end), then let it go on."""
    assert proc.stdout is not None and proc.stdin is not None
    for line in proc.stdout:
        seen.append(line)
        if line.strip() == f"READY {n}":
            break
    else:
        pytest.fail(f"the program ended before turn {n}:\n{''.join(seen)}")


def _go(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    proc.stdin.write("go\n")
    proc.stdin.flush()


@pytest.mark.netns
def test_application_of_a_dead_agent_gets_device_fatal_and_every_wr_flushed(
    tmp_path: Path,
) -> None:
    if (reason := _skip_reason()) is not None:
        pytest.skip(f"agent death with the C library: {reason}")
    program = _build(tmp_path / "capi")
    topo = shipped_topology("small")
    net = BackToBack(Fabric(load_topology(topo)), topo, ("h0", "h1"), prefix="ad",
                     workdir=tmp_path / "net")  # fmt: skip
    proc: subprocess.Popen[str] | None = None
    stopped: int | None = None
    try:
        net.create()
        net.start_agent("h0")
        net.start_agent("h1")
        env = dict(os.environ, LD_LIBRARY_PATH=f"{program.parent}/verbs:{program.parent}",
                   MRC_TESTBED_RUN_DIR=str(net.workdir))  # fmt: skip
        env.pop("MRC_TESTBED_OCP_SOCKET", None)
        proc = subprocess.Popen(
            net.exec_argv("h0", [str(program)]), env=env, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        seen: list[str] = []
        _turn(proc, 1, seen)
        stopped = net.agents["h1"].pid
        os.kill(stopped, signal.SIGSTOP)  # h1 acknowledges nothing: h0's WRITEs stay posted
        _go(proc)
        _turn(proc, 2, seen)
        net.agents["h0"].kill()  # the agent dies without a word
        net.agents["h0"].wait(10)
        net.agents.pop("h0")
        net.start_agent("h0")  # and a new one takes its place
        _go(proc)
        _turn(proc, 3, seen)
        os.kill(stopped, signal.SIGCONT)
        stopped = None
        _go(proc)
        rest, _ = proc.communicate(timeout=60)
        out = "".join(seen) + rest
        assert proc.returncode == 0 and "ALL OK" in out, out
        for check in ("device_fatal_event", "every_write_flushed", "every_receive_flushed",
                      "completion_event_for_the_flushed_cq", "restarted_agent_opens_a_new_session"):  # fmt: skip
            assert f"ok {check}" in out, out
    finally:
        if stopped is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(stopped, signal.SIGCONT)
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        net.close()
