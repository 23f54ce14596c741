"""``mrc-testbed``: the testbed's command line.

Each group of subcommands lives in its own module with a ``register(subparsers)`` function;
this module only assembles them and turns expected failures into one or two readable lines.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from experiments import collective_cmd, exec_cmd, runner, testbed, topo_cmd
from targets.interrupt import handle_termination
from topologies import TopologyError

# Modules that add subcommands; each has register(subparsers).
COMMAND_MODULES: list[Callable[[argparse._SubParsersAction], None]] = [
    topo_cmd.register,
    testbed.register,
    runner.register,
    exec_cmd.register,
    collective_cmd.register,
]


def build_parser() -> argparse.ArgumentParser:
    """The full ``mrc-testbed`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="mrc-testbed",
        description="Emulated two-tier multi-plane fabric running MRC: topologies, "
        "testbed up/down, experiments and reports.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register in COMMAND_MODULES:
        register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``mrc-testbed``."""
    args = build_parser().parse_args(argv)
    handle_termination()  # SIGTERM cleans up as Ctrl-C does: a run takes its fabric down
    try:
        result: int = args.func(args)
        return result
    except (TopologyError, KeyError, ValueError) as exc:
        # a KeyError's text is its repr: the message is its argument
        plain = isinstance(exc, TopologyError) or not exc.args
        print(f"mrc-testbed: {exc if plain else exc.args[0]}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("mrc-testbed: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
