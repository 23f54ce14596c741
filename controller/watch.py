"""The reconcile loop behind ``mrc-ctl watch``: keep every switch equal to its intended tables.

One thread per switch keeps a P4Runtime session open and, every ``interval`` seconds (a timer,
not a busy loop; by default :func:`default_interval`, so that a fabric of any size costs its
switches and the watch a bounded number of reads a second):

- if the session is down (the StreamChannel broke: the switch process died or restarted),
  reconnects and reconciles fully -- pipeline, then entries; a broken stream wakes the switch's
  thread at once instead of waiting for the next tick;
- otherwise reads the managed tables back and, when they differ from the intended ones (an
  emptied switch, an entry changed by hand), reconciles; a read refused because the switch has
  no pipeline also triggers a full reconcile;
- every ``pipeline_every`` checks, also verifies the pipeline itself.

A switch that cannot be reached is tried again every :data:`RETRY_S` at most, whatever the
interval: a rebooted switch gets its tables back as soon as it serves again.

Each action is logged with a timestamp through the ``controller.watch`` logger; state changes
(unreachable, back) are logged once, not every tick. The intended tables are asked for on every
check (``tables()``), so QoS overrides saved by ``mrc-ctl set-qos`` are followed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from controller.client import P4RuntimeError, SwitchClient, SwitchUnreachable
from controller.entries import SwitchTables, diff
from controller.p4info import P4Info
from controller.push import (
    PushOptions,
    PushReport,
    SwitchAddress,
    decode_entities,
    installed_patterns,
    pipeline_matches,
    reconcile,
)

log = logging.getLogger("controller.watch")

MIN_INTERVAL_S = 0.5  # the check interval of a small fabric
#: table reads a second the whole fabric gets (each switch every ``switches / this`` seconds):
#: on 32 model switches a read every 0.5 s each cost the watch 0.12 of a core and the switches
#: as much again, a tenth of what a 2-core machine gives the fabric
READS_PER_S = 8.0
RETRY_S = 0.5  # how soon an unreachable (e.g. rebooting) switch is tried again


def default_interval(switches: int) -> float:
    """Seconds between the checks of each switch when a fabric has ``switches`` switches."""
    return max(MIN_INTERVAL_S, switches / READS_PER_S)


class SwitchWatch:
    """Keeps one switch reconciled; :meth:`check` is one round of the loop."""

    def __init__(
        self,
        target: SwitchAddress,
        info: P4Info,
        tables: Callable[[], Mapping[str, SwitchTables]],
        options: PushOptions,
        pipeline_every: int = 8,
    ) -> None:
        self.target = target
        self.info = info
        self.tables = tables
        self.options = options
        self.pipeline_every = pipeline_every
        self.client: SwitchClient | None = None
        self.reachable: bool | None = None  # None until the first attempt
        self.checks = 0
        self.backup = False  # another controller with a higher election id is primary
        self.wake = threading.Event()  # set when the session breaks: check at once
        self._patterns = installed_patterns(info)
        # the entities read when last found in sync, and the intended tables they matched
        self._in_sync: tuple[list[Any] | None, SwitchTables | None] = (None, None)
        self.pushes: list[PushReport] = []  # every reconcile that wrote something

    def _connect(self) -> SwitchClient | None:
        client = SwitchClient(
            self.target.address,
            self.target.device_id,
            election_id=self.options.election_id,
            timeout=min(self.options.timeout, 1.0),
            name=self.target.name,
            p4info=self.info,
        )
        client.on_stream_end = self.wake.set
        try:
            client.connect()
        except SwitchUnreachable as exc:
            if self.reachable is not False:
                log.warning("%s: unreachable (%s); retrying", self.target.name, exc.reason)
            self.reachable = False
            return None
        except P4RuntimeError as exc:  # e.g. a device id that is not this switch's
            if self.reachable is not False:
                log.error("%s: %s; retrying", self.target.name, exc)
            self.reachable = False
            return None
        if self.reachable is False:
            log.info("%s: reachable again at %s", self.target.name, self.target.address)
        self.reachable = True
        return client

    def _drop(self, why: str) -> None:
        log.warning("%s: session lost (%s)", self.target.name, why)
        if self.client is not None:
            self.client.close()
        self.client = None

    def _reconcile(self, why: str) -> PushReport | None:
        assert self.client is not None
        if not self.client.is_primary:
            if not self.backup:
                log.info("%s: another controller is primary; waiting", self.target.name)
            self.backup = True
            return None
        self.backup = False
        intended = self.tables()[self.target.name]
        report = reconcile(self.client, self.info, intended, self.options)
        if report.changes or report.errors:
            self.pushes.append(report)
            log.info("%s: %s -> %s", self.target.name, why, report.summary(with_name=False))
            for error in report.errors:
                log.error("%s: %s", self.target.name, error)
        return report

    def check(self) -> PushReport | None:
        """One round: reconnect if needed, compare, reconcile when different."""
        self.checks += 1
        try:
            if self.client is None or not self.client.stream_alive:
                if self.client is not None:
                    self._drop(self.client.stream_error or "stream closed")
                self.client = self._connect()
                if self.client is None:
                    return None
                return self._reconcile("connected")
            if self.checks % self.pipeline_every == 0 and not pipeline_matches(
                self.client, self.info, self.options.device_config
            ):
                return self._reconcile("pipeline missing or different")
            try:
                found = self.client.read(self._patterns)
            except P4RuntimeError as exc:
                return self._reconcile(f"read refused ({exc.code})")
            intended = self.tables()[self.target.name]
            if found == self._in_sync[0] and intended is self._in_sync[1]:
                return None  # the same reply as when last found in sync: nothing to decode
            installed = decode_entities(self.info, found)
            changes = diff(intended.entries, installed)
            if not changes.empty:
                self._in_sync = (None, None)
                return self._reconcile(f"{changes.count} entries differ")
            self._in_sync = (found, intended)
            return None
        except SwitchUnreachable as exc:
            self._drop(exc.reason)
        except P4RuntimeError as exc:
            log.error("%s: %s", self.target.name, exc)
        return None

    def run(self, stop: threading.Event, interval: float) -> None:
        """Check every ``interval`` seconds until ``stop`` is set."""
        while not stop.is_set():
            self.check()
            self.wake.wait(interval if self.client is not None else min(interval, RETRY_S))
            self.wake.clear()
        if self.client is not None:
            self.client.close()
            self.client = None


def watch(
    targets: Sequence[SwitchAddress],
    info: P4Info,
    tables: Callable[[], Mapping[str, SwitchTables]],
    options: PushOptions,
    stop: threading.Event,
    interval: float | None = None,
) -> list[SwitchWatch]:
    """Run one :class:`SwitchWatch` thread per switch until ``stop`` is set, checking each
    every ``interval`` seconds (default: :func:`default_interval`)."""
    watches = [SwitchWatch(t, info, tables, options) for t in targets]
    if interval is None:
        interval = default_interval(len(watches))

    def wake_all_on_stop() -> None:
        stop.wait()
        for w in watches:
            w.wake.set()

    threading.Thread(target=wake_all_on_stop, name="watch-stop", daemon=True).start()
    threads = [
        threading.Thread(target=w.run, args=(stop, interval), name=f"watch-{w.target.name}")
        for w in watches
    ]
    log.info("watching %d switches every %.2f s", len(watches), interval)
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    log.info("watch stopped")
    return watches
