"""switchmodel's P4Runtime server in this process.

:class:`InProcessSwitch` is the switch without a data path: a
:class:`switchmodel.runtime.TargetSlot` whose pipeline state the tests read and drive directly
(:func:`switchmodel.pipeline.ingress`), served over real gRPC on a free port of 127.0.0.1
(:func:`targets.lab.free_port`), so a
:class:`controller.client.SwitchClient` talks to it as to a switch process::

    switch = InProcessSwitch(device_id=3)
    client = SwitchClient(switch.address, 3, p4info=P4Info.load()).connect()
    ...
    switch.stop()
"""

from __future__ import annotations

from typing import Any

from switchmodel.runtime import TargetSlot
from switchmodel.server import P4RuntimeServicer, serve
from targets.lab import free_port

#: The device id of an in-process switch unless one is given.
DEVICE_ID = 1


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
