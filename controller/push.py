"""Reconciling switches with their intended tables: pipeline, read, diff, batched writes.

For each switch :func:`reconcile` makes the installed state equal to the intended one with as
few writes as possible:

1. the forwarding pipeline is set when the switch has none or a different one (the P4Info, plus
   the BMv2 JSON as device config on BMv2; a cookie derived from both identifies it);
2. the managed tables, the members and groups of the managed action profiles (the ECMP
   groups) and the default entries the controller sets are read back;
3. only the difference is written, in Write requests of at most ``batch_size`` updates, each
   failed update decoded into an error line. The order keeps every reference valid: table
   entries are deleted first, then groups; members are written before the groups that hold
   them, groups before the table entries that point at them; members are deleted last.

:func:`push_fabric` does this for many switches in parallel (one thread per switch, each with its
own :class:`~controller.client.SwitchClient`) and returns one :class:`PushReport` per switch.
A second push of an unchanged fabric writes nothing; a switch that lost its pipeline (restart)
gets everything reinstalled.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any

from controller.client import P4RuntimeError, SwitchClient, SwitchUnreachable
from controller.entries import (
    GROUP,
    MANAGED_PROFILES,
    MANAGED_TABLES,
    MEMBER,
    TABLE_ENTRY,
    Diff,
    Entry,
    SwitchTables,
    diff,
)
from controller.p4info import P4Info
from p4src.contract import IPV6_LPM
from p4src.proto import p4r

DEFAULT_BATCH = 500


@dataclass(frozen=True)
class SwitchAddress:
    """Where one switch serves P4Runtime."""

    name: str
    address: str  # HOST:PORT
    device_id: int


@dataclass(frozen=True)
class PushOptions:
    """How to push (immutable; :meth:`with_` returns a changed copy)."""

    device_config: bytes = b""  # BMv2 JSON for BMv2 targets; empty for switchmodel
    batch_size: int = DEFAULT_BATCH
    timeout: float = 5.0  # seconds to wait for a switch to answer
    election_id: int = 1

    def with_(self, **changes: Any) -> PushOptions:
        """A copy with some options changed."""
        return dataclasses.replace(self, **changes)


@dataclass
class PushReport:
    """What a push did to one switch."""

    switch: str
    address: str
    pipeline_set: bool = False
    added: int = 0
    modified: int = 0
    deleted: int = 0
    errors: list[str] = field(default_factory=list)  # one line per failed update
    failure: str = ""  # the switch could not be pushed at all (unreachable, pipeline refused)
    seconds: float = 0.0

    @property
    def changes(self) -> int:
        """Number of entries written (plus one when the pipeline was set)."""
        return self.added + self.modified + self.deleted + int(self.pipeline_set)

    @property
    def ok(self) -> bool:
        """True when everything intended is installed."""
        return not self.errors and not self.failure

    def summary(self, with_name: bool = True) -> str:
        """One line such as ``t0-p0-r0: +11 ~0 -0, 0 errors, 0.04 s``."""
        name = f"{self.switch}: " if with_name else ""
        if self.failure:
            return f"{name}FAILED: {self.failure}"
        pipeline = "pipeline set, " if self.pipeline_set else ""
        return (
            f"{name}{pipeline}+{self.added} ~{self.modified} -{self.deleted}, "
            f"{len(self.errors)} errors, {self.seconds:.2f} s"
        )


def pipeline_cookie(info: P4Info, device_config: bytes = b"") -> int:
    """A 63-bit cookie identifying a pipeline (P4Info and device config)."""
    digest = hashlib.sha256(info.serialized() + b"\0" + device_config).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def pipeline_matches(client: SwitchClient, info: P4Info, device_config: bytes = b"") -> bool:
    """True when the switch runs this pipeline (by cookie, else by P4Info)."""
    config = client.get_pipeline_config()
    if config is None:
        return False
    installed = int(config.cookie.cookie) if config.HasField("cookie") else 0
    if installed:
        return installed == pipeline_cookie(info, device_config)
    return bool(config.p4info == info.proto)


def installed_patterns(
    info: P4Info,
    tables: Sequence[str] = MANAGED_TABLES,
    defaults: Sequence[str] = (IPV6_LPM,),
    profiles: Sequence[str] = MANAGED_PROFILES,
) -> list[Any]:
    """Read patterns (``p4r.Entity``) for the entries of ``tables``, the members and groups of
    ``profiles`` and the defaults of ``defaults``."""
    patterns = []
    for table in tables:
        entity = p4r.Entity()
        entity.table_entry.table_id = info.table_id(table)
        patterns.append(entity)
    for profile in profiles:  # groups before members: read order is a valid delete order
        profile_id = info.action_profile_id(profile)
        entity = p4r.Entity()
        entity.action_profile_group.action_profile_id = profile_id
        patterns.append(entity)
        entity = p4r.Entity()
        entity.action_profile_member.action_profile_id = profile_id
        patterns.append(entity)
    for table in defaults:
        entity = p4r.Entity()
        entity.table_entry.table_id = info.table_id(table)
        entity.table_entry.is_default_action = True
        patterns.append(entity)
    return patterns


def decode_entities(info: P4Info, entities: Sequence[Any]) -> list[Entry]:
    """The table entries, action profile members and groups among read ``p4r.Entity``
    messages, as :class:`Entry` values."""
    found = (Entry.from_entity(info, e) for e in entities)
    return [e for e in found if e is not None]


def read_installed(
    client: SwitchClient,
    info: P4Info,
    tables: Sequence[str] = MANAGED_TABLES,
    defaults: Sequence[str] = (IPV6_LPM,),
    profiles: Sequence[str] = MANAGED_PROFILES,
) -> list[Entry]:
    """The installed entries of ``tables``, members and groups of ``profiles`` plus the default
    entries of ``defaults``.

    One Read request carries every pattern; a switch that refuses to read default entries is
    asked again without them.
    """
    try:
        found = client.read(installed_patterns(info, tables, defaults, profiles))
    except P4RuntimeError as exc:
        if exc.code not in ("UNIMPLEMENTED", "INVALID_ARGUMENT") or not defaults:
            raise
        found = client.read(installed_patterns(info, tables, (), profiles))
    return decode_entities(info, found)


def _batches(items: Sequence[Entry], size: int) -> list[Sequence[Entry]]:
    return [items[i : i + size] for i in range(0, len(items), max(1, size))]


def write_diff(
    client: SwitchClient, info: P4Info, changes: Diff, batch_size: int = DEFAULT_BATCH
) -> tuple[int, int, int, list[str]]:
    """Write a :class:`Diff` in batches; returns (added, modified, deleted, error lines)."""
    errors: list[str] = []
    done = {"delete": 0, "modify": 0, "insert": 0}

    def of(entries: Sequence[Entry], kind: str) -> Sequence[Entry]:
        return [e for e in entries if e.kind == kind]

    # references stay valid at every step: a table entry -> its group -> the group's members
    steps: list[tuple[str, int, Sequence[Entry]]] = [
        ("delete", p4r.Update.DELETE, of(changes.deletes, TABLE_ENTRY)),
        ("delete", p4r.Update.DELETE, of(changes.deletes, GROUP)),
        ("modify", p4r.Update.MODIFY, of(changes.modifies, MEMBER)),
        ("insert", p4r.Update.INSERT, of(changes.inserts, MEMBER)),
        ("modify", p4r.Update.MODIFY, of(changes.modifies, GROUP)),
        ("insert", p4r.Update.INSERT, of(changes.inserts, GROUP)),
        ("modify", p4r.Update.MODIFY, of(changes.modifies, TABLE_ENTRY)),
        ("insert", p4r.Update.INSERT, of(changes.inserts, TABLE_ENTRY)),
        ("delete", p4r.Update.DELETE, of(changes.deletes, MEMBER)),
    ]
    for name, kind, entries in steps:
        for batch in _batches(entries, batch_size):
            try:
                client.write_entries(kind, [e.to_proto(info) for e in batch])
                done[name] += len(batch)
            except P4RuntimeError as exc:
                if exc.errors:
                    done[name] += len(batch) - len(exc.errors)
                    errors.extend(str(e) for e in exc.errors)
                else:
                    errors.append(f"{name} of {len(batch)} entries: {exc}")
    return done["insert"], done["modify"], done["delete"], errors


def reconcile(
    client: SwitchClient,
    info: P4Info,
    intended: SwitchTables,
    options: PushOptions = PushOptions(),
) -> PushReport:
    """Make one connected switch match ``intended``; see the module docstring."""
    start = time.monotonic()
    report = PushReport(switch=client.name, address=client.address)
    client.p4info = info
    if not pipeline_matches(client, info, options.device_config):
        client.set_pipeline(
            info, options.device_config, cookie=pipeline_cookie(info, options.device_config)
        )
        report.pipeline_set = True
    installed = read_installed(client, info)
    changes = diff(intended.entries, installed)
    added, modified, deleted, errors = write_diff(client, info, changes, options.batch_size)
    report.added, report.modified, report.deleted = added, modified, deleted
    report.errors = errors
    report.seconds = time.monotonic() - start
    return report


def push_switch(
    target: SwitchAddress,
    info: P4Info,
    intended: SwitchTables,
    options: PushOptions = PushOptions(),
) -> PushReport:
    """Connect to one switch, reconcile it, disconnect; failures end up in the report."""
    start = time.monotonic()
    client = SwitchClient(
        target.address,
        target.device_id,
        election_id=options.election_id,
        timeout=options.timeout,
        name=target.name,
        p4info=info,
    )
    try:
        client.connect()
        return reconcile(client, info, intended, options)
    except (SwitchUnreachable, P4RuntimeError) as exc:
        return PushReport(
            switch=target.name,
            address=target.address,
            failure=str(exc),
            seconds=time.monotonic() - start,
        )
    finally:
        client.close()


def push_fabric(
    targets: Sequence[SwitchAddress],
    info: P4Info,
    tables: Mapping[str, SwitchTables],
    options: PushOptions = PushOptions(),
    on_done: Callable[[PushReport], None] | None = None,
    workers: int = 16,
) -> list[PushReport]:
    """Push every target in parallel; reports come back in the order of ``targets``.

    ``on_done`` is called (from the calling thread) as each switch finishes, for progress.
    """
    reports: dict[str, PushReport] = {}
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(targets)))) as pool:
        futures = {pool.submit(push_switch, t, info, tables[t.name], options): t for t in targets}
        for future in as_completed(futures):
            report = future.result()
            reports[report.switch] = report
            if on_done is not None:
                on_done(report)
    return [reports[t.name] for t in targets]
