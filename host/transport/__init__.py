"""The MRC transport, sans-IO: QPs, EVs, congestion control, the wire codec.

Nothing here opens a socket, starts a thread or reads a clock: callers pass time in and take
frames out (:mod:`host.agent` does that over raw sockets, :mod:`sim.network` in
simulated time).
"""
