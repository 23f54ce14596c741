"""PNG plots of a results folder (matplotlib, Agg backend, no display needed).

- ``goodput.png``        aggregate goodput over time per transport, the capacity that survives
                         the faults as a dashed line, faults as vertical markers, the intervals
                         where the machine fell behind (not faithful) shaded in its colour;
- ``completion_cdf.png`` CDF of message completion times per transport;
- ``ev_states.png``      EVs per state (GOOD / ASSUMED_BAD / UNKNOWN / DENIED) over time, summed
                         over every sender, one panel per MRC transport;
- ``switches.png``       trims, ECN marks and drops per switch (from the switch counters);
- ``fabric.png``         the fabric plane by plane, links coloured by utilisation and failed
                         links dashed, per transport (:mod:`experiments.fabric_plot`);
- ``steps.png``          a job's step times over the run, one panel per transport with its
                         fault-free baseline beside it and its faults marked (a job only).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 -- after choosing the backend

from experiments.fidelity import judge  # noqa: E402
from experiments.metrics import (  # noqa: E402
    TransportResult,
    capacity_series,
    goodput_series,
)
from topologies import Fabric  # noqa: E402

FAULT_COLOURS = {"down": "tab:red", "up": "tab:green", "kill": "tab:purple", "start": "tab:olive"}
FAULT_LABELS = {
    "down": "link down",
    "up": "link up",
    "kill": "switch killed",
    "start": "switch started",
}
STATE_COLOURS = {
    "GOOD": "tab:green",
    "ASSUMED_BAD": "tab:red",
    "UNKNOWN": "tab:gray",
    "DENIED": "black",
}


def _fault_markers(ax: plt.Axes, result: TransportResult, label: bool) -> None:
    seen: set[str] = set()
    for mark in result.faults:
        colour = FAULT_COLOURS.get(mark.action, "black")
        text = (
            FAULT_LABELS.get(mark.action, mark.action)
            if mark.action not in seen and label
            else None
        )
        ax.axvline(mark.t, color=colour, linestyle=":", linewidth=1, label=text)
        seen.add(mark.action)


def _save(fig: Any, path: Path) -> Path:
    """Lay the figure out, write it as ``path`` and close it."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_goodput(
    out: Path, fabric: Fabric, interval: float, results: Sequence[TransportResult]
) -> Path:
    """Goodput over time per transport with fault markers and surviving capacity."""
    fig, ax = plt.subplots(figsize=(11, 4.5))
    for i, r in enumerate(results):
        series = goodput_series(r.progress, r.duration, interval)
        (line,) = ax.plot(
            [t for t, _ in series], [g / 1e6 for _, g in series], label=r.name, linewidth=1.6
        )
        behind = judge(r.fidelity, fabric.topology.frame_time).intervals
        for k, (start, end) in enumerate(behind):
            ax.axvspan(
                start, end, color=line.get_color(), alpha=0.15, linewidth=0,
                label=f"{r.name}: not faithful (CPU-bound)" if k == 0 else None,
            )  # fmt: skip
        if i == 0:
            longest = max(x.duration for x in results)
            cap = capacity_series(fabric, r.flows, r.faults, longest, interval)
            ax.plot(
                [t for t, _ in cap],
                [c / 1e6 for _, c in cap],
                color="gray",
                linestyle="--",
                linewidth=1,
                label="capacity (max-min, with faults)",
            )
            _fault_markers(ax, r, label=True)
    ax.set_xlabel("time since start of the run (s)")
    ax.set_ylabel("aggregate goodput (Mb/s)")
    ax.set_title(f"goodput: {fabric.summary().split(',')[0]}")
    ax.grid(alpha=0.3)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _save(fig, out / "goodput.png")


def plot_completion_cdf(out: Path, results: Sequence[TransportResult]) -> Path:
    """CDF of message completion times per transport (incomplete messages are left out)."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in results:
        times = sorted(c.end - c.start for c in r.completions if c.end is not None)
        if not times:
            continue
        total = len(r.completions)
        ax.step(
            times,
            [(i + 1) / total for i in range(len(times))],
            where="post",
            label=f"{r.name} ({len(times)}/{total} done)",
        )
    ax.set_xscale("log")
    ax.set_xlabel("message completion time (s)")
    ax.set_ylabel("fraction of messages")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3, which="both")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no message completed", transform=ax.transAxes, ha="center")
    return _save(fig, out / "completion_cdf.png")


def plot_ev_states(out: Path, results: Sequence[TransportResult]) -> Path:
    """EV state counts over time, one panel per transport that reports EVs."""
    with_evs = [r for r in results if r.ev_states]
    panels = max(1, len(with_evs))
    fig, axes = plt.subplots(panels, 1, figsize=(9, 2.6 * panels), squeeze=False, sharex=True)
    for ax, r in zip(axes[:, 0], with_evs, strict=False):
        times = [s["t"] for s in r.ev_states]
        for state, colour in STATE_COLOURS.items():
            values = [s.get(state, 0) for s in r.ev_states]
            if any(values):
                ax.step(times, values, where="post", color=colour, label=state)
        _fault_markers(ax, r, label=False)
        ax.set_ylabel("EVs")
        ax.set_title(f"EV states: {r.name}", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if not with_evs:
        axes[0, 0].text(
            0.5,
            0.5,
            "no transport with EVs in this run",
            ha="center",
            transform=axes[0, 0].transAxes,
        )
    axes[-1, 0].set_xlabel("time since start of the run (s)")
    return _save(fig, out / "ev_states.png")


def plot_switches(out: Path, results: Sequence[TransportResult]) -> Path:
    """Trims, ECN marks and drops per switch, one group of bars per transport."""
    counters = ("trimmed", "ecn_marked", "drops")
    fig, axes = plt.subplots(len(counters), 1, figsize=(10, 7), sharex=True)
    switches = sorted({sw for r in results for sw in r.switches})
    width = 0.8 / max(1, len(results))
    for ax, counter in zip(axes, counters, strict=True):
        for i, r in enumerate(results):
            xs = [j + i * width for j in range(len(switches))]
            ax.bar(
                xs, [r.switches.get(sw, {}).get(counter, 0) for sw in switches], width, label=r.name
            )
        ax.set_ylabel(counter.replace("_", " "))
        ax.grid(alpha=0.3, axis="y")
    axes[0].legend(fontsize=8)
    axes[-1].set_xticks([j + width * (len(results) - 1) / 2 for j in range(len(switches))])
    axes[-1].set_xticklabels(switches, rotation=45, ha="right", fontsize=8)
    axes[0].set_title("switch counters over each transport's run")
    return _save(fig, out / "switches.png")


def plot_steps(out: Path, results: Sequence[TransportResult]) -> Path | None:
    """``steps.png``: step time against the step's start, per transport (its ``-baseline`` run
    drawn in grey on the same panel), with the transport's faults marked; None without a job."""
    from experiments.jobs.steps import BASELINE_SUFFIX

    by_name = {r.name: r for r in results}
    runs = [r for r in results if r.steps and not r.name.endswith(BASELINE_SUFFIX)]
    runs = runs or [r for r in results if r.steps]
    if not runs:
        return None
    fig, axes = plt.subplots(len(runs), 1, figsize=(11, 3.2 * len(runs)), squeeze=False)
    for ax, r in zip(axes[:, 0], runs, strict=True):
        base = by_name.get(r.name + BASELINE_SUFFIX)
        for run, colour in ((base, "tab:gray"), (r, "tab:blue")):
            if run is None:
                continue
            done = [s for s in run.steps if s.time is not None]
            ax.plot(
                [s.start for s in done],
                [(s.time or 0.0) * 1000 for s in done],
                marker=".",
                color=colour,
                linewidth=1.2,
                label=run.name,
            )
        _fault_markers(ax, r, label=True)
        ax.set_ylabel("step time (ms)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.set_title(f"{r.name}: step time over the run", fontsize=10)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    axes[-1, 0].set_xlabel("step start, since the start of the run (s)")
    return _save(fig, out / "steps.png")


def plot_all(
    out: Path, fabric: Fabric, interval: float, results: Sequence[TransportResult]
) -> list[Path]:
    """Every plot of a results folder (``steps.png`` when there is a job)."""
    steps = plot_steps(out, results)
    return [
        plot_goodput(out, fabric, interval, results),
        plot_completion_cdf(out, results),
        plot_ev_states(out, results),
        plot_switches(out, results),
        plot_fabric(out, fabric, results),
        *([steps] if steps is not None else []),
    ]


def plot_fabric(out: Path, fabric: Fabric, results: Sequence[TransportResult]) -> Path:
    """``fabric.png``: one group of plane panels per transport, links coloured by their
    utilisation over that transport's run, links it failed dashed, switch counters noted."""
    from experiments.fabric_plot import draw_fabric, failed_links, link_loads

    loads = []
    notes = []
    for r in results:
        failed = failed_links([(m.action, m.target) for m in r.faults])
        loads.append(link_loads(fabric, r.ports, failed, r.duration))
        notes.append(
            {
                sw: f"trims {c.get('trimmed', 0)}  ECN {c.get('ecn_marked', 0)}  "
                f"drops {c.get('drops', 0)}"
                for sw, c in r.switches.items()
            }
        )
    caption = None
    if not any(r.ports for r in results):
        caption = (
            "no per-port byte counters in this results folder (ports.csv): links are not coloured"
        )
    return draw_fabric(
        fabric,
        out / "fabric.png",
        loads=loads,
        notes=notes,
        row_titles=[r.name for r in results],
        title=f"{fabric.summary()}: link utilisation per transport",
        caption=caption,
    )
