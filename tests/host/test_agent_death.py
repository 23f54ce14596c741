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

from pathlib import Path
from typing import Any

import pytest
from support import capi

from host.transport.config import StackConfig
from host.transport.events import STATUS_RETRY_EXCEEDED, QpError
from host.transport.evs import EvState


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


@pytest.mark.netns
def test_application_of_a_dead_agent_gets_device_fatal_and_every_wr_flushed(
    tmp_path: Path,
) -> None:
    if (reason := capi.skip_reason()) is not None:
        pytest.skip(f"agent death with the C library: {reason}")
    agent_death = capi.program("agent_death", capi.build(tmp_path / "capi"))
    net = capi.two_hosts(tmp_path / "net", "ad")
    try:
        status, out = capi.run_agent_death(agent_death, net)
    finally:
        net.close()
    assert status == 0 and "ALL OK" in out, out
    for check in ("device_fatal_event", "every_write_flushed", "every_receive_flushed",
                  "completion_event_for_the_flushed_cq", "restarted_agent_opens_a_new_session"):  # fmt: skip
        assert f"ok {check}" in out, out
