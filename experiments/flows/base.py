"""The interface of a phase's flows (:class:`Flows`) and what they see of the phase (:class:`PhaseView`).

A phase (:class:`experiments.runner.Phase`) runs one transport's workload through one kind of
flows: host agents' transfers (:class:`experiments.flows.mrc.MrcFlows`) or kernel TCP / MPTCP
connections (:class:`experiments.flows.kernel.KernelFlows`). The phase calls, in this order:
:meth:`Flows.prepare`, starts :meth:`Flows.threads`, calls :meth:`Flows.sample` every sampling
interval until :meth:`Flows.finished` or the scenario's duration, then :meth:`Flows.finish`
and, after the switch counters are read, :meth:`Flows.cleanup`.

The flows read the phase's scenario, testbed and clock and append to its result; the
:class:`PhaseView` protocol is that view, so that the flow modules need not import the runner
that imports them.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
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


class Flows(ABC):
    """A phase's workload as one kind of flows."""

    def __init__(self, phase: PhaseView) -> None:
        self.phase = phase
        self.testbed = phase.testbed
        self.flows = phase.scenario.flows()  # (workload index, source, destination)

    @abstractmethod
    def prepare(self) -> None:
        """Set the hosts and switches up for this transport (before the clock starts)."""

    @abstractmethod
    def threads(self) -> list[threading.Thread]:
        """The threads that start the flows at their times (the phase starts them)."""

    @abstractmethod
    def sample(self) -> None:
        """Record the progress so far in the phase's result."""

    @abstractmethod
    def finished(self) -> bool:
        """True when every flow completed."""

    @abstractmethod
    def finish(self) -> None:
        """Stop what still runs; record completions and the hosts' statistics."""

    @abstractmethod
    def cleanup(self) -> None:
        """Leave the hosts as the next phase expects them."""
