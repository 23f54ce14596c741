"""A selector loop in a thread: the agent's loop in miniature, serving its sockets (a
:class:`host.agent.control.LineServer`: the control or the OCP socket) while a test talks to
them as a client would."""

from __future__ import annotations

import selectors
import threading
from collections.abc import Callable
from typing import Any


class SelectorLoop:
    """Runs ``server`` (anything with ``register(selector)``) until :meth:`close`; ``tick`` runs
    after every turn of the loop."""

    def __init__(self, server: Any, tick: Callable[[], None] | None = None) -> None:
        self.server = server
        self.tick = tick
        self.selector = selectors.DefaultSelector()
        server.register(self.selector)
        self.running = True
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while self.running:
            for key, mask in self.selector.select(0.02):
                key.data(mask)
            if self.tick is not None:
                self.tick()

    def close(self) -> None:
        """Stop the loop (the server stays open: its owner closes it)."""
        self.running = False
        self.thread.join(5)
        self.selector.close()
