"""The ``target`` fixtures: every data-plane test runs once per target.

- ``pipeline``: switchmodel's pipeline called in this process (``targets_pipeline``), over an
  in-process P4Runtime server: runs everywhere, no root, no namespace;
- ``sim``: the virtual-time simulator's switch (``targets_sim``), its tables made from the
  entries: runs everywhere, so any divergence of the sim from the program fails in CI;
- ``bmv2``: p4c + simple_switch_grpc on veth pairs in namespace ``dpb<id>`` (skips with the
  reason when p4c/BMv2 are not on PATH or when not root);
- ``model``: ``ModelTarget`` from ``tests/dataplane/targets_model.py``, written by the
  switchmodel part (skips while that module does not exist).

``target`` has no port shaped; ``shaped_target`` has the output port of the burst cases
shaped to :data:`cases.SHAPED_RATE_BPS` (:func:`cases.shaped_ports`), so a burst queues up.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from .cases import PORTS, shaped_ports
from .target import DataplaneTarget, TargetUnavailable

TARGETS = ("pipeline", "sim", "bmv2", "model")
#: the fixture parameters: BMv2's are marked ``bmv2`` (they may not skip in CI)
TARGET_PARAMS = ["pipeline", "sim", pytest.param("bmv2", marks=pytest.mark.bmv2), "model"]
MODEL_MODULE = Path(__file__).with_name("targets_model.py")


def make_target(
    kind: str, workdir: Path, port_rates: Mapping[int, int] | None = None
) -> DataplaneTarget:
    """A target of ``kind``, not started; skips the test when the kind cannot exist here."""
    if kind == "pipeline":
        from .targets_pipeline import PipelineTarget

        return PipelineTarget(PORTS, workdir, port_rates)
    if kind == "sim":
        from .targets_sim import SimTarget

        return SimTarget(PORTS, workdir, port_rates)
    if kind == "bmv2":
        from .targets_bmv2 import Bmv2Target

        return Bmv2Target(PORTS, workdir, port_rates)
    if kind == "model":
        if not MODEL_MODULE.exists():
            pytest.skip(
                "switchmodel target: tests/dataplane/targets_model.py does not exist yet "
                "(the switchmodel part provides ModelTarget there)"
            )
        module = importlib.import_module(f"{__package__}.targets_model")
        target: DataplaneTarget = module.ModelTarget(PORTS, workdir, port_rates)
        return target
    raise ValueError(f"target {kind!r}: expected one of {', '.join(TARGETS)}")


def started(switch: DataplaneTarget, kind: str) -> Iterator[DataplaneTarget]:
    """Start ``switch`` (skip the test when it cannot run here), yield it, stop it."""
    try:
        switch.start()
    except TargetUnavailable as exc:
        switch.stop()
        pytest.skip(f"{kind} target unavailable: {exc}")
    try:
        yield switch
    finally:
        switch.stop()


@pytest.fixture(scope="module", params=TARGET_PARAMS)
def target(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DataplaneTarget]:
    """A started target, shared by the tests of one module, stopped at the end."""
    kind: str = request.param
    yield from started(make_target(kind, tmp_path_factory.mktemp(f"dataplane-{kind}")), kind)


@pytest.fixture(scope="module", params=TARGET_PARAMS)
def shaped_target(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DataplaneTarget]:
    """A started target whose burst output port is shaped to a low rate (skips, with the
    target's reason, where the target cannot shape a port)."""
    kind: str = request.param
    workdir = tmp_path_factory.mktemp(f"dataplane-{kind}-shaped")
    switch = make_target(kind, workdir, shaped_ports())
    if switch.cannot_shape is not None:
        pytest.skip(f"{kind} target cannot shape a port: {switch.cannot_shape}")
    yield from started(switch, kind)
