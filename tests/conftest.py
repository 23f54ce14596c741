"""Suite-wide rules: where BMv2 is required (CI with the toolchain), a BMv2 test may not skip.

``MRC_REQUIRE_BMV2=1`` (set by ``.ci/run`` once it has installed p4c and BMv2) turns the skip
of any test marked ``bmv2`` into a failure that carries the skip reason, so a missing tool or a
broken launcher cannot hide behind a skip.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest


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
