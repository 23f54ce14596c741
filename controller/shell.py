"""The p4runtime-shell session of ``mrc-ctl shell``, run by the Python of its own environment.

p4runtime-shell 0.0.6 pins ``protobuf<3.21``, ``p4runtime==1.4.1``, IPython 7 and jedi 0.17, so
it lives in an environment of its own, ``.venv-shell`` beside the project's ``.venv`` (made by
``scripts/install.sh``), and the project's pins stay its own. ``mrc-ctl shell`` checks the
switch, writes the P4Info it uses to a file and runs this file with that environment's Python::

    .venv-shell/bin/python controller/shell.py --address 127.0.0.1:50001 --device-id 1 \\
        --election-id 1 --p4info P4INFO_FILE [--banner TEXT] [-c CODE]

It therefore imports nothing of the project: only the standard library and p4runtime-shell
(with the protobuf classes that come with it). The session offers p4runtime-shell's names
(``table_entry``, ``counter_entry``, ``TableEntry``, ``tables``, ...) under IPython, or runs
``CODE`` in them.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def shell_namespace() -> dict[str, Any]:
    """The names a p4runtime-shell session offers (entities by type, P4Info objects, Write)."""
    from p4runtime_sh import shell
    from p4runtime_sh.context import P4RuntimeEntity, P4Type

    names = [
        "TableEntry",
        "MatchKey",
        "Action",
        "CounterEntry",
        "DirectCounterEntry",
        "MeterEntry",
        "DirectMeterEntry",
        "ActionProfileMember",
        "GroupMember",
        "ActionProfileGroup",
        "OneshotAction",
        "Oneshot",
        "Write",
        "Replica",
        "MulticastGroupEntry",
        "CloneSessionEntry",
        "DigestEntry",
        "APIVersion",
        "global_options",
    ]
    ns: dict[str, Any] = {n: getattr(shell, n) for n in names if hasattr(shell, n)}
    ns["p4info"] = shell.context.p4info
    for kind in P4Type:
        ns[kind.p4info_name] = shell.P4Objects(kind)
    builders = {
        P4RuntimeEntity.table_entry: (P4Type.table, shell.TableEntry),
        P4RuntimeEntity.counter_entry: (P4Type.counter, shell.CounterEntry),
        P4RuntimeEntity.direct_counter_entry: (P4Type.direct_counter, shell.DirectCounterEntry),
        P4RuntimeEntity.meter_entry: (P4Type.meter, shell.MeterEntry),
    }
    for entity, (kind, cls) in builders.items():
        ns[entity.name] = shell.P4RuntimeEntityBuilder(kind, entity, cls)
    return ns


def main(argv: list[str] | None = None) -> int:
    """Connect p4runtime-shell to one switch and run IPython (or ``-c CODE``) in its names."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--address", required=True, help="the switch's P4Runtime HOST:PORT")
    parser.add_argument("--device-id", type=int, required=True)
    parser.add_argument("--election-id", type=int, default=1)
    parser.add_argument("--p4info", required=True, help="the switch's P4Info, in text format")
    parser.add_argument("--banner", default="p4runtime-shell", help="IPython's banner")
    parser.add_argument("-c", "--command", dest="code", help="run this Python code instead")
    args = parser.parse_args(argv)

    from google.protobuf import text_format
    from p4.config.v1 import p4info_pb2
    from p4runtime_sh import shell

    with open(args.p4info) as text:
        p4info = text_format.Parse(text.read(), p4info_pb2.P4Info())
    election = args.election_id
    shell.setup(
        device_id=args.device_id,
        grpc_addr=args.address,
        election_id=(election >> 64, election & ((1 << 64) - 1)),
        config=None,
        verbose=False,
    )
    shell.context.set_p4info(p4info)
    try:
        ns = shell_namespace()
        if args.code is not None:
            exec(compile(args.code, "<mrc-ctl shell -c>", "exec"), ns)
        else:
            import IPython
            from traitlets.config import Config

            config = Config()
            config.TerminalInteractiveShell.banner1 = args.banner
            IPython.start_ipython(user_ns=ns, config=config, argv=[])
    finally:
        shell.teardown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
