"""The virtual-time target: MRC's transport on a simulated fabric in real units.

Nothing waits in real time: a discrete-event loop moves frames between the hosts'
transport contexts (:class:`host.transport.api.Context`) over links with a rate in Gb/s, a
per-hop latency and switch queues as UET's reference simulator configures them, with the
switches deciding as the P4 program does. A run is a pure function of its seed.

- :mod:`sim.network`: the simulated network (:class:`~sim.network.SimNet`) and the faults a
  scenario applies to it;
- :mod:`sim.queues`: port queues as the reference sizes them (BDP, RED ECN, trim when full);
- :mod:`sim.fabric`: one fabric description in real units (:class:`~sim.fabric.SimFabric`);
- :mod:`sim.workload`: flows of a traffic matrix, run and measured;
- :mod:`sim.htsim`: uet-htsim's traffic matrices, topology files, plans and output, and
  running it.
"""
