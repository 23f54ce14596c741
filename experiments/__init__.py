"""The experiment runner: scenarios, workloads, faults, metrics, plots and the mrc-testbed CLI."""
