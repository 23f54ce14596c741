"""The MRC host stack: a sans-IO transport core and the raw-socket host agent (mrc-host)."""
