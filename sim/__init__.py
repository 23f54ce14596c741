"""The virtual-time target: MRC's transport on a simulated fabric in real units.

Nothing waits in real time: a discrete-event loop moves frames between the hosts'
transport contexts (:class:`host.transport.api.Context`) over links with a rate in Gb/s, a
per-hop latency and switch queues as UET's reference simulator configures them, with the
switches deciding as the P4 program does. A run is a pure function of its seed.

- :mod:`sim.network`: the simulated network (:class:`~sim.network.SimNet`).
"""
