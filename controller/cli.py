"""mrc-ctl: the controller's command line.

Commands (switch addresses from the testbed state file, or ``--topo FILE --switch NAME=HOST:PORT``)::

    mrc-ctl push [SWITCH...] [--dry-run]      install the static tables (only the difference)
    mrc-ctl show SWITCH [--table T]           the installed entries, readable
    mrc-ctl diff [SWITCH...]                  intended vs installed (exit status 1 if they differ)
    mrc-ctl counters [SWITCH...]              per port in/out/trimmed/ECN-marked, drops by reason
    mrc-ctl set-qos SWITCH [--port P] [--trim N|full] [--ecn N] [--ecn-mode M] [--ecn-max N]
                                              persisted trimming / ECN settings, pushed at once
    mrc-ctl watch                             keep every switch reconciled until SIGINT/SIGTERM
    mrc-ctl shell SWITCH [-c CODE]            a p4runtime-shell session on one switch

Every failure ends in one or two lines on stderr: exit status 2 for usage errors, 1 for failures.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from google.protobuf import text_format

from controller.client import P4RuntimeError, SwitchClient, SwitchUnreachable
from controller.counters import SwitchCounters, read_counters
from controller.endpoints import TARGETS, Endpoints, EndpointsError, resolve
from controller.entries import (
    GROUP,
    IPV6_LPM,
    MANAGED_PROFILES,
    TABLE_ENTRY,
    Entry,
    SwitchTables,
    diff,
    fabric_tables,
)
from controller.p4info import (
    REPO_ROOT,
    P4Info,
    P4InfoError,
    default_bmv2_json_path,
    default_p4info_path,
)
from controller.push import (
    DEFAULT_BATCH,
    PushOptions,
    PushReport,
    pipeline_matches,
    push_fabric,
    read_installed,
)
from controller.qos import QosError, QosOverrides, default_qos
from p4src import contract
from topologies import Fabric, Switch, TopologyError


class UsageError(Exception):
    """Bad command-line use (exit status 2)."""


class Failure(Exception):
    """A command that could not do its job (exit status 1)."""


# -- setup -------------------------------------------------------------------------------------


def _add_common(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("where the switches are")
    g.add_argument(
        "--state",
        type=Path,
        help="testbed state file (default: $MRC_TESTBED_STATE or /run/mrc-testbed/state.json)",
    )
    g.add_argument("--topo", help="topology file (with --switch: no state file needed)")
    g.add_argument(
        "--switch",
        action="append",
        default=[],
        metavar="NAME=HOST:PORT",
        help="a switch's P4Runtime address (repeatable; device ids from the fabric)",
    )
    g.add_argument("--target", choices=TARGETS, help="switch kind: model (switchmodel) or bmv2")
    g = parser.add_argument_group("pipeline and session")
    g.add_argument("--p4info", type=Path, help="P4Info text file (default: the committed one)")
    g.add_argument(
        "--bmv2-json",
        type=Path,
        help="BMv2 JSON for --target bmv2 (default: the committed p4src/mrc_switch.json)",
    )
    g.add_argument(
        "--overrides",
        type=Path,
        help="QoS overrides file (default: qos-overrides.json next to the state file)",
    )
    g.add_argument(
        "--timeout", type=float, default=5.0, help="seconds to wait for a switch (default 5)"
    )
    g.add_argument(
        "--election-id",
        type=int,
        default=0,
        help="P4Runtime election id (default: from the clock, so the latest wins)",
    )
    g.add_argument("-v", "--verbose", action="store_true", help="log P4Runtime activity")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``mrc-ctl``."""
    common = argparse.ArgumentParser(add_help=False)
    _add_common(common)
    parser = argparse.ArgumentParser(
        prog="mrc-ctl",
        description="Install the fabric's static tables over P4Runtime and inspect the switches.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("push", parents=[common], help="install the static tables")
    p.add_argument("switches", nargs="*", metavar="SWITCH", help="only these switches")
    p.add_argument("--dry-run", action="store_true", help="print the entries, connect to nothing")
    p.add_argument(
        "--batch-size",
        type=int,
        default=DEFAULT_BATCH,
        help=f"updates per Write request (default {DEFAULT_BATCH})",
    )

    p = sub.add_parser("show", parents=[common], help="the installed entries of one switch")
    p.add_argument("name", metavar="SWITCH")
    p.add_argument(
        "--table", help="only this table or action profile (e.g. ipv6_lpm, ecmp_selector)"
    )
    p.add_argument("--dry-run", action="store_true", help="show the intended entries instead")

    p = sub.add_parser("diff", parents=[common], help="intended vs installed (exit 1 if different)")
    p.add_argument("switches", nargs="*", metavar="SWITCH")

    p = sub.add_parser("counters", parents=[common], help="port and drop counters")
    p.add_argument("switches", nargs="*", metavar="SWITCH")

    p = sub.add_parser("set-qos", parents=[common], help="set trim/ECN thresholds (persisted)")
    p.add_argument("name", metavar="SWITCH")
    p.add_argument("--port", type=int, help="one port (default: every port of the switch)")
    p.add_argument(
        "--trim",
        help="trim threshold in packets, or 'full' to trim only when the queue is full",
    )
    p.add_argument("--ecn", type=int, help="ECN threshold in packets (RED: where marking starts)")
    p.add_argument(
        "--ecn-mode",
        choices=("threshold", "red"),
        help="ECN at a fixed threshold, or RED-like between --ecn and --ecn-max",
    )
    p.add_argument("--ecn-max", type=int, help="RED: depth from which every ECT packet is marked")
    p.add_argument("--ecn-pmax", type=float, help="RED: marking probability just below --ecn-max")
    p.add_argument("--no-push", action="store_true", help="only save the override")
    p.add_argument("--dry-run", action="store_true", help="print the new entries, save nothing")

    p = sub.add_parser("watch", parents=[common], help="keep every switch reconciled")
    p.add_argument(
        "--interval",
        type=float,
        help="seconds between checks of each switch (default: controller.watch's "
        "default_interval, which bounds the reads a second the whole fabric gets)",
    )

    p = sub.add_parser("shell", parents=[common], help="p4runtime-shell on one switch")
    p.add_argument("name", metavar="SWITCH")
    p.add_argument("-c", "--command", dest="code", help="run this Python code instead of IPython")

    return parser


class Context:
    """What every command needs: endpoints, P4Info, options, output."""

    def __init__(self, args: argparse.Namespace, need_switches: bool = True) -> None:
        self.args = args
        try:
            self.endpoints: Endpoints = resolve(
                topo=args.topo,
                switch_flags=args.switch,
                target=args.target,
                state=args.state,
                overrides=args.overrides,
            )
        except EndpointsError as exc:
            raise (UsageError if exc.usage else Failure)(str(exc)) from None
        if need_switches and not self.endpoints.switches:
            raise Failure("no switch addresses: give --switch NAME=HOST:PORT or a state file")
        self.info = P4Info.load(args.p4info or default_p4info_path())
        lacking = self.info.missing()
        if lacking:
            raise Failure(f"{self.info.source}: the P4Info lacks {', '.join(lacking)}")
        self.overrides = QosOverrides.load(self.endpoints.overrides_path)
        election = args.election_id or int(time.time() * 1000)
        self.options = PushOptions(
            device_config=self._device_config(),
            batch_size=getattr(args, "batch_size", DEFAULT_BATCH),
            timeout=args.timeout,
            election_id=election,
        )

    def _device_config(self) -> bytes:
        if self.endpoints.target != "bmv2":
            return b""
        path = self.args.bmv2_json or default_bmv2_json_path()
        try:
            return path.read_bytes()
        except OSError as exc:
            raise Failure(
                f"{path}: cannot read the BMv2 JSON ({exc.strerror}); regenerate it with "
                "'./testbed p4' or give --bmv2-json"
            ) from None

    @property
    def fabric(self) -> Fabric:
        return self.endpoints.fabric

    def tables(self, names: Sequence[str] = ()) -> dict[str, SwitchTables]:
        for name in names:
            self.switch_of(name)
        return fabric_tables(self.fabric, self.overrides, list(names) or None)

    def switch_of(self, name: str) -> Switch:
        try:
            return self.fabric.switch(name)
        except KeyError as exc:
            raise UsageError(str(exc.args[0])) from None

    def client(self, name: str, arbitrate: bool = False) -> SwitchClient:
        self.switch_of(name)
        try:
            target = self.endpoints.address_of(name)
        except EndpointsError as exc:
            raise Failure(str(exc)) from None
        return SwitchClient(
            target.address,
            target.device_id,
            election_id=self.options.election_id,
            timeout=self.options.timeout,
            name=name,
            p4info=self.info,
        ).connect(arbitrate=arbitrate)


def _console(stderr: bool = False) -> Any:
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else 160
    return Console(stderr=stderr, highlight=False, width=width)


def _peer_label(ctx: Context, switch: str, port_text: str) -> str:
    try:
        port = ctx.fabric.switch(switch).port(int(port_text))
    except (KeyError, ValueError):
        return port_text
    return f"{port_text} ({port.peer})"


def _entries_table(ctx: Context, switch: str, entries: Sequence[Entry], title: str) -> Any:
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for column in ("table", "match", "action", "parameters"):
        table.add_column(column)
    for e in entries:
        match = (
            ", ".join(
                _peer_label(ctx, switch, v) if k.endswith("egress_spec") else v for k, v in e.match
            )
            or "(default)"
        )
        if e.kind != TABLE_ENTRY:
            match = f"{e.kind} {e.number}"
        params = ", ".join(
            f"{k}={_peer_label(ctx, switch, v) if k == 'port' else v}" for k, v in e.params
        )
        action = e.action.rsplit(".", 1)[-1]
        if e.kind == GROUP:
            action, params = "(group)", f"members {', '.join(map(str, e.members))}"
        elif e.group:
            action = f"group {e.group}"
        table.add_row(e.table.rsplit(".", 1)[-1], match, action, params)
    return table


# -- commands ----------------------------------------------------------------------------------


def cmd_push(args: argparse.Namespace) -> int:
    ctx = Context(args, need_switches=not args.dry_run)
    tables = ctx.tables(args.switches)
    if args.dry_run:
        console = _console()
        console.print(ctx.fabric.summary())
        for name, intended in tables.items():
            console.print(_entries_table(ctx, name, intended.entries, f"{name} (intended)"))
        return 0
    targets = ctx.endpoints.select(args.switches)
    start = time.monotonic()
    reports = _push_with_progress(ctx, targets, tables)
    for report in reports:
        print(report.summary())
        for error in report.errors:
            print(f"  {error}")
    failed = [r for r in reports if not r.ok]
    total = sum(r.added + r.modified + r.deleted for r in reports)
    print(
        f"tables: {len(reports)} switches, {total} changes, "
        f"{sum(len(r.errors) for r in reports)} errors, "
        f"{len(failed)} failed, {time.monotonic() - start:.2f} s"
    )
    return 1 if failed else 0


def _push_with_progress(
    ctx: Context, targets: Sequence[Any], tables: Mapping[str, SwitchTables]
) -> list[PushReport]:
    if sys.stderr.isatty():
        from rich.progress import Progress

        with Progress(console=_console(stderr=True), transient=True) as progress:
            task = progress.add_task("pushing", total=len(targets))

            def done(report: PushReport) -> None:
                progress.update(task, advance=1, description=f"pushed {report.switch}")

            return push_fabric(targets, ctx.info, tables, ctx.options, on_done=done)
    return push_fabric(targets, ctx.info, tables, ctx.options)


def cmd_show(args: argparse.Namespace) -> int:
    ctx = Context(args, need_switches=not args.dry_run)
    name = args.name
    wanted = _table_or_profile(ctx.info, args.table) if args.table else None
    profiles = [p for p in MANAGED_PROFILES if wanted in (None, p)]
    if args.dry_run:
        entries = list(ctx.tables([name])[name].entries)
        title = f"{name} (intended)"
    else:
        client = ctx.client(name)
        try:
            if client.get_pipeline() is None:
                raise Failure(f"{name}: no pipeline installed (run 'mrc-ctl push {name}')")
            tables = [] if wanted in MANAGED_PROFILES else [wanted] if wanted else None
            entries = (
                [Entry.from_proto(ctx.info, e) for e in client.read_table_entries(wanted)]
                if tables != []
                else []
            )
            for profile in profiles:
                members, groups = client.read_profile(profile)
                entries += [Entry.from_member(ctx.info.decode_member(m)) for m in members]
                entries += [Entry.from_group(ctx.info.decode_group(g)) for g in groups]
            for table in ctx.info.table_names() if tables is None else tables:
                try:
                    default = client.read_default_entry(table)
                except P4RuntimeError:
                    default = None
                if default is not None:
                    entries.append(Entry.from_proto(ctx.info, default))
        finally:
            client.close()
        title = f"{name} at {ctx.endpoints.address_of(name).address}"
    if wanted:
        entries = [e for e in entries if e.table == wanted]
    entries.sort(key=lambda e: (e.table, e.is_default, e.match))
    _console().print(_entries_table(ctx, name, entries, f"{title}: {len(entries)} entries"))
    return 0


def _table_or_profile(info: P4Info, name: str) -> str:
    """The full name of the table, or of the action profile, called ``name`` (a suffix will
    do); the error names both kinds when neither exists."""
    try:
        return str(info.table(name).preamble.name)
    except P4InfoError as exc:
        try:
            return str(info.action_profile(name).preamble.name)
        except P4InfoError:
            raise exc from None


def cmd_diff(args: argparse.Namespace) -> int:
    ctx = Context(args)
    tables = ctx.tables(args.switches)

    def compare(name: str) -> list[str]:
        try:
            client = ctx.client(name)
        except (SwitchUnreachable, P4RuntimeError) as exc:
            return [f"{name}: cannot compare: {exc}"]
        try:
            if not pipeline_matches(client, ctx.info, ctx.options.device_config):
                return [f"{name}: pipeline missing or different"]
            changes = diff(tables[name].entries, read_installed(client, ctx.info))
        finally:
            client.close()
        if changes.empty:
            return []
        return [f"{name}: {changes.count} entries differ"] + [f"  {x}" for x in changes.lines()]

    names = [t.name for t in ctx.endpoints.select(args.switches)]
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(names)))) as pool:
        results = list(pool.map(compare, names))
    for name, lines in zip(names, results, strict=True):
        print("\n".join(lines) if lines else f"{name}: in sync")
    return 1 if any(results) else 0


def cmd_counters(args: argparse.Namespace) -> int:
    from rich.table import Table

    ctx = Context(args)
    console = _console()

    def read(name: str) -> SwitchCounters:
        client = ctx.client(name)
        try:
            return read_counters(client, [p.number for p in ctx.fabric.switch(name).ports])
        finally:
            client.close()

    targets = ctx.endpoints.select(args.switches)
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(targets)))) as pool:
        everything = list(pool.map(read, [t.name for t in targets]))
    for target, counters in zip(targets, everything, strict=True):
        switch = ctx.fabric.switch(target.name)
        table = Table(title=f"{target.name} counters", title_justify="left")
        for column in (
            "port",
            "peer",
            "in pkts",
            "in bytes",
            "out pkts",
            "out bytes",
            "trimmed",
            "ecn marked",
        ):
            table.add_column(column, justify="left" if column == "peer" else "right")
        for row in counters.ports:
            try:
                peer = switch.port(row.port).peer
            except KeyError:
                peer = "-"
            table.add_row(
                str(row.port),
                peer,
                str(row.rx_packets),
                str(row.rx_bytes),
                str(row.tx_packets),
                str(row.tx_bytes),
                str(row.trimmed),
                str(row.ecn_marked),
            )
        console.print(table)
        drops = ", ".join(f"{k} {v}" for k, v in counters.drops.items()) or "none"
        print(f"drops: {drops}")
    return 0


def cmd_set_qos(args: argparse.Namespace) -> int:
    given = (args.trim, args.ecn, args.ecn_mode, args.ecn_max, args.ecn_pmax)
    if all(value is None for value in given):
        raise UsageError("set-qos: give --trim, --ecn, --ecn-mode, --ecn-max or --ecn-pmax")
    changes: dict[str, object] = {}
    if args.trim is not None:
        if args.trim == "full":
            changes["trim_mode"] = "full"
        elif args.trim.isdigit():
            changes.update(trim_mode="threshold", trim=int(args.trim))
        else:
            raise UsageError(f"--trim {args.trim}: expected a number of packets or 'full'")
    for name in ("ecn", "ecn_mode", "ecn_max", "ecn_pmax"):
        if getattr(args, name) is not None:
            changes[name] = getattr(args, name)
    ctx = Context(args, need_switches=not (args.no_push or args.dry_run))
    switch = ctx.switch_of(args.name)
    if args.port is not None:
        try:
            switch.port(args.port)
        except KeyError:
            raise UsageError(
                f"--port {args.port}: {switch.name} has ports "
                f"{', '.join(str(p.number) for p in switch.ports)}"
            ) from None
    first = args.port if args.port is not None else switch.ports[0].number
    current = ctx.overrides.lookup(switch.name, first) or default_qos(ctx.fabric.topology)
    try:
        qos = current.with_(**changes)
    except QosError as exc:
        raise UsageError(f"set-qos: {exc}") from None
    overrides = ctx.overrides.with_override(switch.name, args.port, qos)
    ctx.overrides = overrides
    console = _console()
    if args.dry_run:
        intended = ctx.tables([switch.name])[switch.name]
        console.print(
            _entries_table(
                ctx,
                switch.name,
                intended.by_table(contract.PORT_QOS),
                f"{switch.name} port_qos (intended)",
            )
        )
        return 0
    path = overrides.save(ctx.endpoints.overrides_path)
    where = f"port {args.port}" if args.port is not None else "every port"
    print(f"{switch.name} {where}: {qos.describe()} (saved in {path})")
    if args.no_push:
        return 0
    targets = ctx.endpoints.select([switch.name])
    reports = push_fabric(targets, ctx.info, ctx.tables([switch.name]), ctx.options)
    for report in reports:
        print(report.summary())
        for error in report.errors:
            print(f"  {error}")
    return 0 if all(r.ok for r in reports) else 1


def cmd_watch(args: argparse.Namespace) -> int:
    from controller.watch import watch

    ctx = Context(args)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s.%(msecs)03d %(message)s",
        datefmt="%Y-%m-%dT%H:%M:%S",
        stream=sys.stdout,
        force=True,
    )
    path = ctx.endpoints.overrides_path
    cache: dict[str, Any] = {"stamp": None, "tables": None}
    lock = threading.Lock()

    def tables() -> dict[str, SwitchTables]:
        try:
            stamp: Any = path.stat().st_mtime_ns
        except OSError:
            stamp = None
        with lock:
            if cache["tables"] is None or stamp != cache["stamp"]:
                try:
                    ctx.overrides = QosOverrides.load(path)
                except QosError as exc:
                    logging.getLogger("controller.watch").error("%s (keeping the last one)", exc)
                cache["stamp"] = stamp
                cache["tables"] = fabric_tables(ctx.fabric, ctx.overrides)
            result: dict[str, SwitchTables] = cache["tables"]
            return result

    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    sys.stdout.flush()
    watch(list(ctx.endpoints.switches), ctx.info, tables, ctx.options, stop, args.interval)
    return 0


def shell_python() -> Path:
    """The Python of p4runtime-shell's own environment (``.venv-shell``, or $MRC_SHELL_PYTHON)."""
    given = os.environ.get("MRC_SHELL_PYTHON")
    python = Path(given) if given else REPO_ROOT / ".venv-shell" / "bin" / "python"
    if not os.access(python, os.X_OK):
        raise Failure(
            f"{python}: no p4runtime-shell environment (./testbed install makes it; "
            "p4runtime-shell's pins keep it out of the project's own)"
        )
    return python


def cmd_shell(args: argparse.Namespace) -> int:
    ctx = Context(args)
    target = ctx.endpoints.address_of(ctx.switch_of(args.name).name)
    probe = ctx.client(target.name)
    try:
        if probe.get_pipeline() is None:
            raise Failure(
                f"{target.name}: no pipeline installed (run 'mrc-ctl push {target.name}')"
            )
    finally:
        probe.close()
    python = shell_python()
    with tempfile.NamedTemporaryFile("w", prefix="mrc-ctl-shell-", suffix=".txtpb") as p4info:
        p4info.write(text_format.MessageToString(ctx.info.proto))
        p4info.flush()
        command = [
            str(python),
            str(Path(__file__).with_name("shell.py")),
            f"--address={target.address}",
            f"--device-id={target.device_id}",
            f"--election-id={ctx.options.election_id}",
            f"--p4info={p4info.name}",
            f"--banner=p4runtime-shell on {target.name} ({target.address}, device id "
            f"{target.device_id}); try: table_entry['{IPV6_LPM}'].read(print)",
        ]
        if args.code is not None:
            command.append(f"--command={args.code}")
        sys.stdout.flush()
        return subprocess.run(command, check=False).returncode


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "push": cmd_push,
    "show": cmd_show,
    "diff": cmd_diff,
    "counters": cmd_counters,
    "set-qos": cmd_set_qos,
    "watch": cmd_watch,
    "shell": cmd_shell,
}


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``mrc-ctl``."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.verbose:
        logging.basicConfig(level=logging.DEBUG, format="%(asctime)s %(name)s %(message)s")
    try:
        return COMMANDS[args.command](args)
    except UsageError as exc:
        parser.print_usage(sys.stderr)
        print(f"mrc-ctl: error: {exc}", file=sys.stderr)
        return 2
    except (
        Failure,
        EndpointsError,
        TopologyError,
        P4InfoError,
        QosError,
        P4RuntimeError,
        OSError,  # SwitchUnreachable too, and e.g. an overrides file that cannot be written
    ) as exc:
        print(f"mrc-ctl: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("mrc-ctl: interrupted", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
