"""The flows of an experiment phase: one declared interface, one module per kind.

- :mod:`experiments.flows.base` -- :class:`Flows` (the interface a phase drives) and
  :class:`PhaseView` (what flows see of their phase);
- :mod:`experiments.flows.mrc` -- :class:`MrcFlows`, transfers of the MRC host agents;
- :mod:`experiments.flows.collective` -- :class:`CollectiveFlows`, a scenario's training job
  (collectives in steps) through the MRC host agents, besides any transfers;
- :mod:`experiments.flows.kernel` -- :class:`KernelFlows`, kernel TCP / MPTCP baselines over
  SRv6 routes (:mod:`experiments.flows.kernel_flow` is their sender and receiver program).
"""

from __future__ import annotations

from experiments.flows.base import Flows, PhaseView
from experiments.flows.collective import CollectiveFlows
from experiments.flows.kernel import KernelFlows
from experiments.flows.mrc import MrcFlows


def flows_for(phase: PhaseView) -> Flows:
    """The flows of the phase's transport: kernel baselines, or MRC agents (with the job, if
    the scenario has one)."""
    if phase.transport.is_kernel:
        return KernelFlows(phase)
    return CollectiveFlows(phase) if phase.scenario.job is not None else MrcFlows(phase)


__all__ = ["CollectiveFlows", "Flows", "KernelFlows", "MrcFlows", "PhaseView", "flows_for"]
