"""A free TCP port, and switchmodel's P4Runtime server in this process.

:class:`InProcessSwitch` is the switch without a data path: a
:class:`switchmodel.runtime.TargetSlot` whose pipeline state the tests read and drive directly
(:func:`switchmodel.pipeline.ingress`), served over real gRPC on a free port of 127.0.0.1, so a
:class:`controller.client.SwitchClient` talks to it as to a switch process::

    switch = InProcessSwitch(device_id=3)
    client = SwitchClient(switch.address, 3, p4info=P4Info.load()).connect()
    ...
    switch.stop()
"""

from __future__ import annotations

import socket
from typing import Any

from switchmodel.runtime import TargetSlot
from switchmodel.server import P4RuntimeServicer, serve

#: The device id of an in-process switch unless one is given.
DEVICE_ID = 1


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class InProcessSwitch:
    """A P4Runtime server over a :class:`TargetSlot`, serving at :attr:`address` until
    :meth:`stop`; :attr:`slot` holds the pipeline state once a pipeline is set."""

    def __init__(self, device_id: int = DEVICE_ID) -> None:
        self.device_id = device_id
        self.slot = TargetSlot()
        self.servicer = P4RuntimeServicer(self.slot, device_id)
        self.address = f"127.0.0.1:{free_port()}"
        self.server: Any = serve(self.servicer, self.address)

    def stop(self) -> None:
        """Stop serving at once (safe to call twice)."""
        self.server.stop(grace=0).wait()
