"""The interface of a data-plane target: one switch running the mrc_switch pipeline.

The shared case list (``cases.py``) runs against every implementation of
:class:`DataplaneTarget`: BMv2 (``targets_bmv2.Bmv2Target``) and switchmodel
(``targets_model.ModelTarget``, written by the switchmodel part). A target is constructed with
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
``targets_model.py`` must define ``ModelTarget`` with this constructor; it imports this module
relatively (``from .target import DataplaneTarget``).
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from controller.p4info import P4Info


class TargetUnavailable(RuntimeError):
    """The target cannot run on this machine (missing tools, no root); the message says why."""


class DataplaneTarget(abc.ABC):
    """One switch under test, driven packet by packet."""

    #: short name used in test ids ("bmv2", "model")
    name = "target"

    def __init__(self, ports: Sequence[int], workdir: Path) -> None:
        self.ports = list(ports)
        self.workdir = workdir

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

    def priority_of_last(self, port: int) -> int | None:
        """Priority class (0 low, 1 high) of the last frame sent out of ``port``, if the target
        can tell; None when it cannot (BMv2 does not expose it)."""
        return None
