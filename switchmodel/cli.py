"""mrc-switch: the switchmodel's command line."""

from __future__ import annotations

import argparse


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``mrc-switch``."""
    parser = argparse.ArgumentParser(prog="mrc-switch", description="the mrc_switch pipeline as a P4Runtime target")
    parser.parse_args(argv)
    return 0
