"""The in-process data-plane target: switchmodel's pipeline called directly, no root needed.

The switch is a :class:`support.switch.InProcessSwitch` (switchmodel's P4Runtime server in this
process over a bare pipeline state), driven over P4Runtime like the other targets; a frame sent
in goes through :func:`switchmodel.pipeline.ingress` at once, and what it forwards waits in the
output port until the test reads it (:meth:`PipelineTarget.expect`). An unshaped port sends at
once: :func:`switchmodel.pipeline.egress` runs on arrival with an empty queue behind the frame.
A port of ``port_rates`` is a strict-priority pair of queues that sends one frame each time the
test reads from it, high priority first, with egress told the depth the frame leaves behind
in its queue: the test's reads are the port's clock, so a burst queues up as it does behind a
shaped port, and the order frames leave in is the traffic manager's.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path

from support.switch import InProcessSwitch

from controller.p4info import P4Info
from switchmodel.pipeline import PRIORITY_HIGH, Forward, egress, ingress

from .targets_p4rt import DEVICE_ID, P4RuntimeDriven

PRIORITIES = PRIORITY_HIGH + 1  # queues per port, indexed by priority (0: data)


class PipelineTarget(P4RuntimeDriven[InProcessSwitch]):
    """switchmodel's pipeline in this process, its ports as queues of frames."""

    name = "pipeline"
    label = "in-process pipeline"
    cannot_shape = None  # a shaped port sends a frame per read

    def __init__(
        self, ports: Sequence[int], workdir: Path, port_rates: Mapping[int, int] | None = None
    ) -> None:
        super().__init__(ports, workdir, port_rates)
        self._sent: dict[int, deque[bytes]] = {port: deque() for port in self.ports}
        # shaped port -> priority -> (frame out, length as it arrived)
        self._queued: dict[int, list[deque[tuple[bytes, int]]]] = {
            port: [deque() for _ in range(PRIORITIES)] for port in self.port_rates
        }

    def start(self) -> None:
        self._info = P4Info.load()
        self._switch = InProcessSwitch(DEVICE_ID)
        try:
            self.connect(self._switch.address)
        except BaseException:
            self.stop()
            raise

    def send(self, port: int, frame: bytes) -> None:
        slot = self._require_switch().slot
        with slot.lock:
            state = slot.state
            assert state is not None, "the pipeline is set in start()"
            verdict = ingress(frame, port, state)
            if not isinstance(verdict, Forward):
                return
            out_port, priority, out = verdict
            if out_port in self._queued:
                self._queued[out_port][priority].append((bytes(out), len(frame)))
            elif out_port in self._sent:
                egress(state, out_port, priority, 0, len(frame))
                self._sent[out_port].append(bytes(out))
            # a port the target does not have: the frame is lost, as on a switch without it

    def expect(self, port: int, timeout: float) -> bytes | None:
        if self._sent[port]:
            return self._sent[port].popleft()
        queues = self._queued.get(port)
        if queues is None:
            return None
        for priority in reversed(range(PRIORITIES)):  # strict priority: high first
            if queues[priority]:
                frame, length = queues[priority].popleft()
                slot = self._require_switch().slot
                with slot.lock:
                    assert slot.state is not None
                    egress(slot.state, port, priority, len(queues[priority]), length)
                return frame
        return None

    def release(self) -> None:
        for sent in self._sent.values():
            sent.clear()
        for queues in self._queued.values():
            for queue in queues:
                queue.clear()
