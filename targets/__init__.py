"""Switch targets: the processes that run the testbed's switches, and what they run on.

A target is a program that runs the P4 program of ``p4src/`` behind P4Runtime: BMv2
(``simple_switch_grpc``) or the switchmodel (``mrc-switch``). Modules:

- ``process`` -- :class:`~targets.process.SwitchProcess`, the one process base: configuration,
  start, readiness, stop and log of a switch process;
- ``bmv2``    -- :class:`~targets.bmv2.Bmv2Switch` and BMv2's queue shaping commands;
- ``model``   -- :class:`~targets.model.ModelSwitch`, ``mrc-switch`` as a process;
- ``factory`` -- :func:`~targets.factory.fabric_switch`, a switch of the fabric as a process of a
  target (one mapping, one gRPC port base), and :func:`~targets.factory.choose_target`;
- ``state``   -- the state file of a running testbed (what ``mrc-testbed up`` started) and the
  registry of live runs, through which ``mrc-testbed down`` finds every running fabric;
- ``interrupt`` -- SIGTERM handled as Ctrl-C, so that an interrupted run, benchmark or test
  takes down what it started;
- ``pcap``    -- the pcap writer of the switchmodel's and the host agent's captures;
- ``delayline`` -- a link's latency as a delay line, applied by the switchmodel's ports and
  the host agents' NICs where the kernel has no ``netem``;
- ``rxring`` -- a memory-mapped ``PACKET_RX_RING``: the switchmodel's ports and the host
  agents' NICs read frames from it with no system call each;
- ``lab``     -- network-namespace labs (namespaces, veth pairs, packet sockets that remove
  exactly what they made) for tests, the agent networks and the benchmarks.

Nothing here imports the controller, the host stack or the switchmodel: they sit above.
"""
