"""The ``target`` fixture: every data-plane test runs once per target (BMv2, switchmodel).

- ``bmv2``: p4c + simple_switch_grpc on veth pairs in namespace ``dpb<pid>`` (skips with the
  reason when p4c/BMv2 are not on PATH or when not root);
- ``model``: ``ModelTarget`` from ``tests/dataplane/targets_model.py``, written by the
  switchmodel part (skips while that module does not exist).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from .cases import PORTS
from .target import DataplaneTarget, TargetUnavailable

TARGETS = ("bmv2", "model")
MODEL_MODULE = Path(__file__).with_name("targets_model.py")


def make_target(kind: str, workdir: Path) -> DataplaneTarget:
    """A target of ``kind``, not started; skips the test when the kind cannot exist here."""
    if kind == "bmv2":
        from .targets_bmv2 import Bmv2Target

        return Bmv2Target(PORTS, workdir)
    if kind == "model":
        if not MODEL_MODULE.exists():
            pytest.skip(
                "switchmodel target: tests/dataplane/targets_model.py does not exist yet "
                "(the switchmodel part provides ModelTarget there)"
            )
        module = importlib.import_module(f"{__package__}.targets_model")
        target: DataplaneTarget = module.ModelTarget(PORTS, workdir)
        return target
    raise ValueError(f"target {kind!r}: expected one of {', '.join(TARGETS)}")


@pytest.fixture(scope="module", params=TARGETS)
def target(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DataplaneTarget]:
    """A started target, shared by the tests of one module, stopped at the end."""
    kind: str = request.param
    switch = make_target(kind, tmp_path_factory.mktemp(f"dataplane-{kind}"))
    try:
        switch.start()
    except TargetUnavailable as exc:
        switch.stop()
        pytest.skip(f"{kind} target unavailable: {exc}")
    try:
        yield switch
    finally:
        switch.stop()
