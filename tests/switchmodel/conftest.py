"""Fixtures of the switchmodel tests: switchmodel's P4Runtime server in this process.

``switch`` is a :class:`support.switch.InProcessSwitch` with device id ``device_id`` (1; a
module may override the ``device_id`` fixture), ``client`` a primary
:class:`controller.client.SwitchClient` (election id 10) that has set the committed P4Info.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.switch import DEVICE_ID, InProcessSwitch

from controller.client import SwitchClient
from controller.p4info import P4Info


@pytest.fixture
def device_id() -> int:
    """The device id the in-process switch serves."""
    return DEVICE_ID


@pytest.fixture
def switch(device_id: int) -> Iterator[InProcessSwitch]:
    """An in-process switch, stopped after the test."""
    served = InProcessSwitch(device_id)
    yield served
    served.stop()


@pytest.fixture
def client(switch: InProcessSwitch) -> Iterator[SwitchClient]:
    """The primary controller of ``switch``, with the committed P4Info set as its pipeline."""
    info = P4Info.load()
    c = SwitchClient(switch.address, switch.device_id, election_id=10, p4info=info).connect()
    c.set_pipeline(info)
    yield c
    c.close()
