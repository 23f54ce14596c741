"""MRC's eight planes (``topologies/mrc8.yaml``: 32 switches, 4 hosts with 8 NICs) boot on each
switch target and carry a transfer between racks over every plane, intact.

The fabric is booted for this module alone (not the shared small one of conftest.py), at a low
link rate: 32 switch processes and 4 agents share the machine's cores. Waits are bounded, never
timed assertions.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from topologies import load_topology
from topologies.config import shipped_topology

from .conftest import TARGET_PARAMS, skip_reason, target_skip_reason, transfer
from .test_fabric import plane_tx_bytes

pytestmark = [pytest.mark.mininet, pytest.mark.slow]

LINK_RATE_MBPS = 5


@pytest.fixture(scope="module", params=TARGET_PARAMS)
def mrc8(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The running mrc8 fabric on one target."""
    target: str = request.param
    reason = skip_reason() or target_skip_reason(target)
    if reason:
        pytest.skip(reason)
    from experiments.testbed import Testbed

    topology = load_topology(shipped_topology("mrc8")).with_(link={"rate_mbps": LINK_RATE_MBPS})
    tb = Testbed(topology, target, state_path=tmp_path_factory.mktemp("mrc8") / "state.json")
    try:
        tb.up()
        yield tb
    finally:
        tb.down()


def test_mrc8_boots_and_carries_a_transfer_over_all_eight_planes(mrc8: Any) -> None:
    fabric = mrc8.fabric
    assert fabric.topology.planes == 8 and len(fabric.switches) == 32
    src, dst = "h0", "h3"
    assert fabric.host(src).rack != fabric.host(dst).rack
    before = plane_tx_bytes(mrc8, src)
    size = 2 << 20
    transfer(mrc8, src, dst, size, seed=8)
    after = plane_tx_bytes(mrc8, src)
    for plane in range(8):
        # every plane carried a real share of the data (an eighth of an even share), not a
        # probe or two: MRC steers by congestion feedback, so shares are not equal
        assert after[plane] - before[plane] > size // (8 * 8), plane
