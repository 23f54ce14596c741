"""Suite-wide rules and fixtures.

Where BMv2 is required (CI with the toolchain), a BMv2 test may not skip.

``MRC_REQUIRE_BMV2=1`` (set by ``.ci/run`` once it has installed p4c and BMv2) turns the skip
of any test marked ``bmv2`` into a failure that carries the skip reason, so a missing tool or a
broken launcher cannot hide behind a skip.

SIGTERM stops a test run as Ctrl-C does (:mod:`targets.interrupt`): fixtures and ``finally``
blocks take down the fabrics, agents and namespaces the tests started.

``fabric`` is the shipped small fabric (:func:`support.fabric.small_fabric`); the helpers the
suites share are in the ``support`` package beside this file.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from support.fabric import small_fabric

from targets.interrupt import handle_termination
from topologies import Fabric


def pytest_configure(config: pytest.Config) -> None:
    handle_termination()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if (
        report.skipped
        and os.environ.get("MRC_REQUIRE_BMV2") == "1"
        and item.get_closest_marker("bmv2") is not None
    ):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = (
            f"BMv2 is required here (MRC_REQUIRE_BMV2=1) but the test skipped: {reason}"
        )


@pytest.fixture(scope="session")
def fabric() -> Fabric:
    """The shipped small fabric: 2 planes x 2 racks x 2 spines, hosts h0..h3 (a module may
    define a ``fabric`` of its own)."""
    return small_fabric()
