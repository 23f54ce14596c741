"""What the flows of a run see of the phase that runs them (:class:`PhaseView`).

A phase (:class:`experiments.runner.Phase`) starts one kind of flows for its transport: host
agents' transfers (:class:`experiments.runner.MrcFlows`) or kernel TCP / MPTCP connections
(:class:`experiments.kernel.KernelFlows`). The flows read the phase's scenario, testbed and
clock and append to its result; this protocol is that view, so that the flow modules need not
import the runner that imports them.
"""

from __future__ import annotations

import threading
from typing import Protocol

from experiments.metrics import TransportResult
from experiments.scenario import Scenario, Transport
from experiments.testbed import Testbed


class PhaseView(Protocol):
    """The phase as its flows use it."""

    testbed: Testbed
    scenario: Scenario
    transport: Transport
    result: TransportResult
    t0: float
    stop: threading.Event
    lock: threading.Lock
    errors: list[str]

    def now(self) -> float:
        """Seconds since the phase started."""
        ...
