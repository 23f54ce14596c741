"""The flows of an experiment phase: one declared interface, one module per kind.

- :mod:`experiments.flows.base` -- :class:`Flows` (the interface a phase drives) and
  :class:`PhaseView` (what flows see of their phase);
- :mod:`experiments.flows.mrc` -- :class:`MrcFlows`, transfers of the MRC host agents;
- :mod:`experiments.flows.kernel` -- :class:`KernelFlows`, kernel TCP / MPTCP baselines over
  SRv6 routes (:mod:`experiments.flows.kernel_flow` is their sender and receiver program).
"""

from __future__ import annotations

from experiments.flows.base import Flows, PhaseView
from experiments.flows.kernel import KernelFlows
from experiments.flows.mrc import MrcFlows


def flows_for(phase: PhaseView) -> Flows:
    """The flows of the phase's transport: kernel baselines or MRC agents."""
    return KernelFlows(phase) if phase.transport.is_kernel else MrcFlows(phase)


__all__ = ["Flows", "KernelFlows", "MrcFlows", "PhaseView", "flows_for"]
