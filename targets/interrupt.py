"""SIGTERM handled as Ctrl-C, so that an interrupted run, benchmark or test takes down what it
started.

Python ends on SIGTERM (``timeout``, ``kill``, a CI job stopped) without running ``finally``
blocks or context managers: a fabric brought up by ``mrc-testbed run``, a benchmark or a test
would be left running, with its switches, agents and ``mrc-ctl watch``. After
:func:`handle_termination`, SIGTERM raises :class:`KeyboardInterrupt` in the main thread, as
SIGINT does, and the same cleanup runs for both. ``mrc-testbed``, the benchmarks and the test
suite call it at start; :meth:`experiments.testbed.Testbed.up` calls it too, for any other
program that brings up a fabric.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType


class _Terminate:
    """The SIGTERM handler: raises ``raise_as`` once."""

    def __init__(self, raise_as: type[BaseException]) -> None:
        self.raise_as = raise_as

    def __call__(self, signum: int, _frame: FrameType | None) -> None:
        # one is enough: a second SIGTERM must not cut the cleanup the first one started short
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if issubclass(self.raise_as, SystemExit):
            raise self.raise_as(128 + signum)
        raise self.raise_as(f"terminated by signal {signum}")


def handle_termination(raise_as: type[BaseException] | None = None) -> bool:
    """From now on SIGTERM raises :class:`KeyboardInterrupt` (or ``raise_as``) in the main
    thread; a second one, while the cleanup runs, is ignored. ``SystemExit`` is for code that
    swallows KeyboardInterrupt (Mininet's CLI takes it for a Ctrl-C at its prompt); without
    ``raise_as`` a handler installed here before is kept as it is. Does nothing
    outside the main thread or when the process has a SIGTERM handler of its own. SIGINT keeps
    Python's handler (which raises :class:`KeyboardInterrupt`); a process started with SIGINT
    ignored keeps ignoring it. Returns True when SIGTERM is handled so."""
    if threading.current_thread() is not threading.main_thread():
        return False
    current = signal.getsignal(signal.SIGTERM)
    if isinstance(current, _Terminate):
        if raise_as is not None:
            current.raise_as = raise_as
        return True
    if current not in (signal.SIG_DFL, None):
        return False
    signal.signal(signal.SIGTERM, _Terminate(raise_as or KeyboardInterrupt))
    return True
