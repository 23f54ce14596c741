"""mrc-host: the host agent's command line."""

from __future__ import annotations

import argparse


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``mrc-host``."""
    parser = argparse.ArgumentParser(prog="mrc-host", description="run the MRC transport on a host")
    parser.parse_args(argv)
    return 0
