"""The controller library as the testbed calls it: tables, QoS and counters, in-process.

:class:`FabricControl` is what ``mrc-ctl push``, ``set-qos``, ``counters`` and ``diff`` do,
called through :mod:`controller.push`, :mod:`controller.qos` and :mod:`controller.counters`
instead of as processes. QoS overrides are kept in the same file next to the state file
(:func:`controller.qos.overrides_path`), so ``mrc-ctl watch`` -- which stays a process of its
own and re-installs a switch that lost its tables -- keeps them too.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from controller.client import P4RuntimeError, SwitchClient, SwitchUnreachable
from controller.counters import SwitchCounters, read_counters
from controller.entries import diff, fabric_tables
from controller.p4info import P4Info, default_bmv2_json_path, default_p4info_path
from controller.push import (
    PushOptions,
    PushReport,
    SwitchAddress,
    pipeline_matches,
    push_fabric,
    read_installed,
)
from controller.qos import QosOverrides, default_qos, overrides_path
from topologies import Fabric


class ControlError(RuntimeError):
    """A switch could not be configured; the message names it and says why."""


class FabricControl:
    """P4Runtime towards the switches of a running testbed.

    ``switches`` gives the switches' addresses as they are now (a restarted switch keeps its
    address; the callable lets the testbed own the list).
    """

    def __init__(
        self,
        fabric: Fabric,
        target: str,
        state_path: Path,
        switches: Callable[[], Sequence[SwitchAddress]],
        timeout: float = 5.0,
    ) -> None:
        self.fabric = fabric
        self.target = target
        self.overrides_path = overrides_path(state_path)
        self._switches = switches
        self.timeout = timeout
        self._info: P4Info | None = None

    @property
    def info(self) -> P4Info:
        """The committed P4Info of the switch program (loaded once)."""
        if self._info is None:
            self._info = P4Info.load(path=default_p4info_path())
        return self._info

    def switches(self, names: Sequence[str] = ()) -> list[SwitchAddress]:
        """The named switches' addresses (every switch when none is named)."""
        every = list(self._switches())
        return [s for s in every if s.name in names] if names else every

    def options(self) -> PushOptions:
        """As ``mrc-ctl`` pushes: BMv2 gets its JSON, the newest election id wins."""
        config = default_bmv2_json_path().read_bytes() if self.target == "bmv2" else b""
        return PushOptions(
            device_config=config, timeout=self.timeout, election_id=int(time.time() * 1000)
        )

    # -- tables --------------------------------------------------------------------------------

    def push(self, names: Sequence[str] = ()) -> list[PushReport]:
        """Install the intended tables (with the QoS overrides) on the named switches, or on
        every switch; raises :class:`ControlError` when a switch could not be pushed."""
        overrides = QosOverrides.load(self.overrides_path)
        targets = self.switches(names)
        tables = fabric_tables(self.fabric, overrides, [t.name for t in targets])
        reports = push_fabric(targets, self.info, tables, self.options())
        failed = [r for r in reports if not r.ok]
        if failed:
            raise ControlError("; ".join(r.summary() for r in failed))
        return reports

    def in_sync(self, name: str) -> bool:
        """True when switch ``name`` runs the pipeline and holds exactly its intended tables
        (False while it does not answer, e.g. being restarted)."""
        overrides = QosOverrides.load(self.overrides_path)
        intended = fabric_tables(self.fabric, overrides, [name])[name]
        try:
            client = self.client(name)
        except SwitchUnreachable:
            return False
        try:
            if not pipeline_matches(client, self.info, self.options().device_config):
                return False
            return diff(intended.entries, read_installed(client, self.info)).empty
        except (SwitchUnreachable, P4RuntimeError):
            return False
        finally:
            client.close()

    # -- QoS -------------------------------------------------------------------------------------

    def set_qos(
        self, switch: str, trim: int | None, ecn: int | None, port: int | None = None
    ) -> None:
        """Trim and fixed ECN thresholds (packets) of a switch, or of one of its ports (None
        leaves that one as it is); saved as an override and pushed to that switch."""
        changes: dict[str, object] = {}
        if trim is not None:
            changes.update(trim_mode="threshold", trim=trim)
        if ecn is not None:
            changes.update(ecn_mode="threshold", ecn=ecn)
        overrides = QosOverrides.load(self.overrides_path)
        first = port if port is not None else self.fabric.switch(switch).ports[0].number
        current = overrides.lookup(switch, first) or default_qos(self.fabric.topology)
        overrides.with_override(switch, port, current.with_(**changes)).save(self.overrides_path)
        self.push([switch])

    def reset_qos(self) -> None:
        """Drop every override and push: the controller's default thresholds everywhere."""
        with contextlib.suppress(FileNotFoundError):
            self.overrides_path.unlink()
        self.push()

    # -- counters ------------------------------------------------------------------------------

    def client(self, name: str) -> SwitchClient:
        """A connected client of switch ``name`` without arbitration (reads only: the primary,
        ``mrc-ctl watch``, is left undisturbed). Close it after use."""
        (address,) = self.switches([name])
        return SwitchClient(
            address.address,
            address.device_id,
            timeout=self.timeout,
            name=name,
            p4info=self.info,
        ).connect(arbitrate=False)

    def counters(self) -> dict[str, SwitchCounters]:
        """Every switch's counters (a switch that does not answer, e.g. one being rebooted,
        is left out)."""

        def read(name: str) -> SwitchCounters | None:
            try:
                client = self.client(name)
            except Exception:
                return None
            try:
                return read_counters(client)
            except Exception:
                return None
            finally:
                with contextlib.suppress(Exception):
                    client.close()

        names = [s.name for s in self.switches()]
        with ThreadPoolExecutor(max_workers=max(1, min(16, len(names)))) as pool:
            read_all = list(pool.map(read, names))
        return {name: c for name, c in zip(names, read_all, strict=True) if c is not None}


__all__ = ["ControlError", "FabricControl"]
