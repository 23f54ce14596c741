"""Integration tests: MRC over the emulated fabric on each switch target."""
