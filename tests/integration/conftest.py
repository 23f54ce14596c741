"""The shared fabric of the integration tests: the small topology, on each switch target.

One :class:`experiments.testbed.Testbed` (Mininet, eight switch processes, BMv2 or
``mrc-switch``, tables pushed, ``mrc-ctl watch``, four ``mrc-host`` agents) per target serves
every test of a module (the ``testbed`` fixture runs each test once per target); each test
leaves it healthy (links up, switches running). Its state file lives in a temporary directory,
so a testbed a user runs is never touched; the node names are the fabric's, so the tests skip
when a fabric with those names already exists.

The helpers the tests share talk to the agents of a running testbed over their control
sockets: :func:`agent` (a control client), :func:`core_stats`, :func:`path_states` and
:func:`all_good` (EV states per path), :func:`transfer` (a WRITE that must arrive intact).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from support.fabric import SMALL_TOPOLOGY, small_fabric
from support.hostnet import intact_write

from topologies import load_topology

LINK_RATE_MBPS = 20
#: :func:`wait_for`'s signature, as the ``wait`` fixture gives it
Wait = Callable[[Callable[[], bool], float, str], None]
#: the switch targets every integration test runs on; BMv2's may not skip in CI
TARGET_PARAMS = [pytest.param("model"), pytest.param("bmv2", marks=pytest.mark.bmv2)]


def target_skip_reason(target: str) -> str | None:
    """Why ``target`` cannot run here, or None."""
    if target == "bmv2":
        from targets.bmv2 import missing_tools

        missing = missing_tools()
        if missing:
            return f"BMv2 target needs {', '.join(missing)} on PATH"
    return None


def skip_reason() -> str | None:
    """Why the integration tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "integration tests need root (Mininet, network namespaces, AF_PACKET)"
    if shutil.which("mnexec") is None:
        return "integration tests need Mininet (mnexec not on PATH; apt install mininet)"
    try:
        import mininet.net  # noqa: F401
    except ImportError:
        return "integration tests need the mininet Python package"
    fabric = small_fabric()
    taken = [
        p.intf
        for sw in fabric.switches
        for p in sw.ports
        if Path(f"/sys/class/net/{p.intf}").exists()
    ]
    if taken:
        return (
            f"a fabric is already running here (interface {taken[0]} exists): "
            "stop it with 'mrc-testbed down'"
        )
    return None


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting {timeout:g} s for {what}")
        time.sleep(0.1)


@pytest.fixture
def fabric_free() -> None:
    """Skip unless a fabric can be built here (root, Mininet, no fabric running)."""
    reason = skip_reason()
    if reason:
        pytest.skip(reason)


@pytest.fixture
def wait() -> Callable[[Callable[[], bool], float, str], None]:
    """:func:`wait_for` as a fixture."""
    return wait_for


@pytest.fixture(scope="module", params=TARGET_PARAMS)
def testbed(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[object]:
    """The running small fabric on one target, shared by the module's tests."""
    target: str = request.param
    reason = skip_reason() or target_skip_reason(target)
    if reason:
        pytest.skip(reason)
    from experiments.testbed import Testbed

    topology = load_topology(SMALL_TOPOLOGY).with_(
        link={"rate_mbps": LINK_RATE_MBPS, "delay_us": 0}
    )
    state = tmp_path_factory.mktemp("testbed") / "state.json"
    tb = Testbed(topology, target, state_path=state)
    try:
        tb.up()
        yield tb
    finally:
        tb.down()


# -- the agents of a running testbed ---------------------------------------------------------


@contextmanager
def agent(testbed: Any, host: str, timeout: float = 120.0) -> Iterator[Any]:
    """A :class:`host.agent.control_client.ControlClient` of ``host``'s agent."""
    from host.agent.control_client import ControlClient

    with ControlClient(testbed.control_path(host), timeout=timeout) as client:
        yield client


def core_stats(testbed: Any, host: str) -> dict[str, Any]:
    """The transport core's statistics of ``host``."""
    with agent(testbed, host) as client:
        stats: dict[str, Any] = client.stats()["stats"]["core"]
        return stats


def path_states(testbed: Any, src: str, dst: str, policy: str = "mrc") -> dict[str, dict[str, int]]:
    """Path label -> EV state -> how many EVs of ``src``'s QP of ``policy`` to ``dst``."""
    with agent(testbed, src) as client:
        table = client.paths(dst, policy)["paths"][dst]["paths"]
    return {label: dict(entry["states"]) for label, entry in table.items()}


def all_good(testbed: Any, src: str, dst: str) -> Callable[[], bool]:
    """A condition for ``wait``: every EV of every path ``src`` -> ``dst`` is GOOD."""
    return lambda: all(set(s) == {"good"} for s in path_states(testbed, src, dst).values())


def transfer(testbed: Any, src: str, dst: str, size: int, seed: int, policy: str = "mrc") -> None:
    """A WRITE of ``size`` bytes into region ``r<seed>`` of ``dst``; it must arrive intact."""
    with agent(testbed, src) as tx, agent(testbed, dst) as rx:
        intact_write(tx, rx, dst, f"r{seed}", size, seed, policy=policy)
