"""The mrc_switch P4 pipeline in Python, served as a P4Runtime target (mrc-switch)."""
