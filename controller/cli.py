"""mrc-ctl: the controller's command line."""

from __future__ import annotations

import argparse


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``mrc-ctl``."""
    parser = argparse.ArgumentParser(prog="mrc-ctl", description="install static tables over P4Runtime")
    parser.parse_args(argv)
    return 0
