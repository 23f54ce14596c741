"""Fixtures for the controller tests: a fabric of real mrc-switch processes (see ctl_model)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from ctl_model import HAVE_MODEL, ModelFabric, start_model_fabric


@pytest.fixture(scope="module")
def model_fabric(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModelFabric]:
    """The small fabric (8 switches) as mrc-switch processes on free loopback ports."""
    if not HAVE_MODEL:
        pytest.skip("switchmodel.server (the mrc-switch P4Runtime target) is not available yet")
    model = start_model_fabric("small", tmp_path_factory.mktemp("model-fabric"))
    try:
        yield model
    finally:
        model.stop()
