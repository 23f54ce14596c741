"""The flows of an experiment phase: one declared interface, one module per kind.

- :mod:`experiments.flows.base` -- :class:`Flows` (the interface a phase drives) and
  :class:`PhaseView` (what flows see of their phase);
- :mod:`experiments.flows.mrc` -- :class:`MrcFlows`, transfers of the MRC host agents;
- :mod:`experiments.flows.collective` -- a scenario's training job (collectives in steps),
  besides any transfers: :class:`CollectiveFlows` through the MRC host agents,
  :class:`KernelCollectiveFlows` over kernel TCP / MPTCP (:mod:`experiments.flows.kernel_rank`
  is their rank program);
- :mod:`experiments.flows.kernel` -- :class:`KernelFlows`, kernel TCP / MPTCP baselines over
  SRv6 routes (:mod:`experiments.flows.kernel_flow` is their sender and receiver program).
"""

from __future__ import annotations

from experiments.flows.base import Flows, PhaseView
from experiments.flows.collective import CollectiveFlows, KernelCollectiveFlows
from experiments.flows.kernel import KernelFlows
from experiments.flows.mrc import MrcFlows


def flows_for(phase: PhaseView) -> Flows:
    """The flows of the phase's transport: kernel baselines, or MRC agents (with the job, if
    the scenario has one)."""
    job = phase.scenario.job is not None
    if phase.transport.is_kernel:
        return KernelCollectiveFlows(phase) if job else KernelFlows(phase)
    return CollectiveFlows(phase) if job else MrcFlows(phase)


__all__ = [
    "CollectiveFlows",
    "Flows",
    "KernelCollectiveFlows",
    "KernelFlows",
    "MrcFlows",
    "PhaseView",
    "flows_for",
]
