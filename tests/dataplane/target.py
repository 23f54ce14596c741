"""The interface of a data-plane target: one switch running the mrc_switch pipeline.

The shared case list (``cases.py``) runs against every implementation of
:class:`DataplaneTarget`: switchmodel's pipeline in this process
(``targets_pipeline.PipelineTarget``, no root needed), the virtual-time simulator's switch
(``targets_sim.SimTarget``, no root needed), BMv2 (``targets_bmv2.Bmv2Target``) and
mrc-switch on veth pairs (``targets_model.ModelTarget``). A target is constructed with
the data-plane port numbers the cases use and a working directory for its logs::

    target = ModelTarget(ports=[1, 2, 3, 4], workdir=tmp_path)
    target.start()                         # switch up, pipeline pushed, no table entries
    target.install(entries, defaults)      # replaces every entry of the previous install
    target.send(3, frame)                  # frame in on port 3
    target.expect(1, timeout=2.0)          # next frame out of port 1, or None
    target.counters("MrcIngress.drops")    # index -> (packets, bytes)
    target.stop()

Entries are ``p4r.TableEntry`` messages built with :attr:`DataplaneTarget.p4info` (the P4Info
the target was given: p4c's for BMv2, the committed one for switchmodel), so ids always match.

``port_rates`` (port -> bit/s) shapes egress ports from the start, so that a burst queues up
and priority shows in the order frames leave (``test_priority.py``). A target that cannot
shape a port says why in :attr:`DataplaneTarget.cannot_shape`; the tests that need shaping skip
with that reason.
"""

from __future__ import annotations

import abc
import itertools
import os
import string
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from controller.p4info import P4Info


class TargetUnavailable(RuntimeError):
    """The target cannot run on this machine (missing tools, no root); the message says why."""


class DataplaneTarget(abc.ABC):
    """One switch under test, driven packet by packet."""

    #: short name used in test ids ("pipeline", "sim", "bmv2", "model")
    name = "target"
    #: why this target cannot shape an egress port to ``port_rates`` (None: it can)
    cannot_shape: str | None = "the target does not implement port_rates"

    def __init__(
        self, ports: Sequence[int], workdir: Path, port_rates: Mapping[int, int] | None = None
    ) -> None:
        self.ports = list(ports)
        self.workdir = workdir
        self.port_rates = dict(port_rates or {})
        for port, rate in self.port_rates.items():
            if port not in self.ports or rate <= 0:
                raise ValueError(
                    f"port_rates {port}={rate}: expected one of ports {self.ports} and a rate > 0"
                )

    @property
    @abc.abstractmethod
    def p4info(self) -> P4Info:
        """The P4Info the pipeline was installed with (build entries with it)."""

    @abc.abstractmethod
    def start(self) -> None:
        """Bring the switch up with the mrc_switch pipeline and empty tables.

        Raises :class:`TargetUnavailable` when it cannot run here.
        """

    @abc.abstractmethod
    def install(self, entries: Sequence[Any], defaults: Sequence[Any] = ()) -> None:
        """Make ``entries`` (``p4r.TableEntry``) the only table entries and set ``defaults``
        (default-entry ``p4r.TableEntry`` messages); defaults set by an earlier call and not
        repeated return to the program's defaults."""

    @abc.abstractmethod
    def send(self, port: int, frame: bytes) -> None:
        """Inject ``frame`` as if it arrived on data-plane ``port``."""

    @abc.abstractmethod
    def expect(self, port: int, timeout: float) -> bytes | None:
        """The next frame the switch sends out of ``port``, or None within ``timeout`` s."""

    @abc.abstractmethod
    def set_register(self, name: str, index: int, value: int) -> None:
        """Set one cell of register ``name`` (over P4Runtime)."""

    @abc.abstractmethod
    def counters(self, name: str) -> dict[int, tuple[int, int]]:
        """Every cell of counter ``name``: index -> (packets, bytes)."""

    @abc.abstractmethod
    def stop(self) -> None:
        """Stop the switch and release everything ``start`` made (safe to call twice)."""

    def drain(self) -> None:
        """Forget frames already sent out (default: read every port until quiet)."""
        for port in self.ports:
            while self.expect(port, 0.0) is not None:
                pass


_instances = itertools.count()


def instance_tag() -> str:
    """A short tag for the names of one target instance (namespace, interfaces): the process
    id and a letter counting the instances of this process, so two never share a name."""
    return f"{os.getpid() % 100000}{string.ascii_lowercase[next(_instances) % 26]}"


def counter_deltas(
    target: DataplaneTarget,
    before: Mapping[str, Mapping[int, tuple[int, int]]],
    wanted: Mapping[tuple[str, int], int],
    wait: float = 3.0,
) -> dict[tuple[str, int], int]:
    """Packet deltas of the ``wanted`` cells since ``before``, read again until each reached its
    wanted value or ``wait`` seconds passed (counters are read over gRPC after the frames)."""
    deadline = time.monotonic() + wait
    while True:
        now = {name: target.counters(name) for name in before}
        deltas = {
            (name, index): now[name].get(index, (0, 0))[0] - before[name].get(index, (0, 0))[0]
            for name, index in wanted
        }
        if all(deltas[k] >= v for k, v in wanted.items()) or time.monotonic() > deadline:
            return deltas
        time.sleep(0.05)
