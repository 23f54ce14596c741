"""The host agent ``mrc-host``: drives the transport over one raw socket per plane NIC, with a
control socket, timers and captures. The only part of ``host`` that does I/O."""
