"""The shared fabric of the integration tests: the small topology, on each switch target.

One :class:`experiments.testbed.Testbed` (Mininet, eight switch processes, BMv2 or
``mrc-switch``, tables pushed, ``mrc-ctl watch``, four ``mrc-host`` agents) per target serves
every test of a module (the ``testbed`` fixture runs each test once per target); each test
leaves it healthy (links up, switches running). Its state file lives in a temporary directory,
so a testbed a user runs is never touched; the node names are the fabric's, so the tests skip
when a fabric with those names already exists.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from topologies import Fabric, load_topology
from topologies.config import shipped_topology

LINK_RATE_MBPS = 20
#: the switch targets every integration test runs on; BMv2's may not skip in CI
TARGET_PARAMS = [pytest.param("model"), pytest.param("bmv2", marks=pytest.mark.bmv2)]


def target_skip_reason(target: str) -> str | None:
    """Why ``target`` cannot run here, or None."""
    if target == "bmv2":
        from controller.bmv2 import missing_tools

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
    fabric = Fabric(load_topology(shipped_topology("small")))
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

    topology = load_topology(shipped_topology("small")).with_(
        link={"rate_mbps": LINK_RATE_MBPS, "delay_us": 0}
    )
    state = tmp_path_factory.mktemp("testbed") / "state.json"
    tb = Testbed(topology, target, state_path=state)
    try:
        tb.up()
        yield tb
    finally:
        tb.down()
