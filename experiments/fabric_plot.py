"""Pictures of the fabric: ``mrc-testbed topo draw`` and the ``fabric.png`` of a results folder.

:func:`draw_fabric` draws a two-tier multi-plane fabric plane by plane, one panel per plane: T1
spines on top, T0 leaves below them, the hosts at the bottom (each host appears in every
plane through its NIC of that plane), every link with the switch port number at each switch
end. Names, ports and links come from :class:`topologies.Fabric` only.

With a :class:`LinkLoad` per link (utilisation over a run, failed or not) and notes per switch
(trims, ECN marks, drops), the same drawing becomes a results picture: links coloured by
utilisation on a colour bar, failed links dashed red, switch counters under each switch.
:func:`fabric_results_figure` makes that picture for every transport of a results folder.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 -- after choosing the backend
from matplotlib import colormaps  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.colors import Normalize  # noqa: E402

from topologies import Fabric, Link, Tier  # noqa: E402

FORMATS = (".png", ".svg")
LEVELS = {"t1": 2.0, "t0": 1.0, "host": 0.0}
COLOURS = {"t1": "#c9d7f2", "t0": "#d6ecd2", "host": "#f3e2c6"}
UNUSED = "#9a9a9a"  # a link with no load figure
CMAP = "viridis"


class DrawError(ValueError):
    """A drawing that cannot be made as asked (the message names the input)."""


@dataclass(frozen=True)
class LinkLoad:
    """What a results picture shows of one link: utilisation (0..1, the busier direction) and
    whether it failed during the run."""

    utilisation: float | None = None
    failed: bool = False


def link_key(a: str, b: str) -> tuple[str, str]:
    """The key of the link between ``a`` and ``b``, whatever the order."""
    return (a, b) if a <= b else (b, a)


def _positions(fabric: Fabric, plane: int) -> dict[str, tuple[float, float]]:
    """x, y of every node of ``plane``'s panel: hosts under their rack's leaf, spines centred."""
    topo = fabric.topology
    width = max(1, topo.racks * topo.hosts_per_rack)
    pos: dict[str, tuple[float, float]] = {}
    for host in fabric.hosts:
        pos[host.name] = (host.index + 0.5, LEVELS["host"])
    for rack in range(topo.racks):
        left = rack * topo.hosts_per_rack
        pos[Fabric.t0_name(plane, rack)] = (left + topo.hosts_per_rack / 2, LEVELS["t0"])
    step = width / topo.spines_per_plane
    for spine in range(topo.spines_per_plane):
        pos[Fabric.t1_name(plane, spine)] = ((spine + 0.5) * step, LEVELS["t1"])
    return pos


def _kind(fabric: Fabric, name: str) -> str:
    if fabric.node_kind(name) == "host":
        return "host"
    return "t1" if fabric.switch(name).tier is Tier.T1 else "t0"


def _label_port(ax: Axes, start: tuple[float, float], end: tuple[float, float], port: int) -> None:
    """The port number near ``start`` on the way to ``end``."""
    x = start[0] + (end[0] - start[0]) * 0.18
    y = start[1] + (end[1] - start[1]) * 0.18
    ax.text(
        x, y, str(port), fontsize=7, ha="center", va="center", zorder=4,
        bbox={"boxstyle": "round,pad=0.12", "fc": "white", "ec": "none", "alpha": 0.9},
    )  # fmt: skip


def _draw_plane(
    ax: Axes,
    fabric: Fabric,
    plane: int,
    loads: Mapping[tuple[str, str], LinkLoad] | None,
    notes: Mapping[str, str] | None,
    norm: Normalize,
) -> None:
    pos = _positions(fabric, plane)
    cmap = colormaps[CMAP]
    links: list[Link] = [link for link in fabric.links if link.plane == plane]
    for link in links:
        (xa, ya), (xb, yb) = pos[link.a], pos[link.b]
        style, width = "-", 1.4
        colour: str | tuple[float, float, float, float] = "#555555"
        if loads is not None:
            load = loads.get(link_key(link.a, link.b), LinkLoad())
            colour = UNUSED if load.utilisation is None else cmap(norm(load.utilisation))
            width = 2.6
            if load.failed:
                style, colour = "--", "tab:red"
        ax.plot([xa, xb], [ya, yb], linestyle=style, color=colour, linewidth=width, zorder=1)
        for node, port, here, there in (
            (link.a, link.a_port, (xa, ya), (xb, yb)),
            (link.b, link.b_port, (xb, yb), (xa, ya)),
        ):
            if fabric.node_kind(node) != "host":
                _label_port(ax, here, there, port)
    for name, (x, y) in pos.items():
        kind = _kind(fabric, name)
        label = name
        if kind == "host":
            label = f"{name}\n{fabric.host(name).nic(plane).intf}"
        ax.text(
            x, y, label, ha="center", va="center", fontsize=8, zorder=5,
            bbox={"boxstyle": "round,pad=0.35", "fc": COLOURS[kind], "ec": "#444444"},
        )  # fmt: skip
        if notes is not None and name in notes:
            # spines: above the box; leaves: to the right, clear of the port numbers
            if kind == "t1":
                ax.text(x, y + 0.16, notes[name], ha="center", va="bottom", fontsize=6.5, zorder=5)
            else:
                ax.text(
                    x + 0.38, y, notes[name].replace("  ", "\n"), ha="left", va="center",
                    fontsize=6.5, zorder=5,
                )  # fmt: skip
    width = max(1, fabric.topology.racks * fabric.topology.hosts_per_rack)
    ax.set_xlim(-0.1, width + 0.1)
    ax.set_ylim(-0.45, 2.45)
    ax.set_title(f"plane {plane}", fontsize=10)
    ax.axis("off")


def draw_fabric(
    fabric: Fabric,
    out: Path,
    *,
    loads: Sequence[Mapping[tuple[str, str], LinkLoad]] = (),
    notes: Sequence[Mapping[str, str]] = (),
    row_titles: Sequence[str] = (),
    title: str | None = None,
    caption: str | None = None,
) -> Path:
    """Draw ``fabric`` into ``out`` (.png or .svg): one panel per plane.

    With ``loads`` (one mapping per row, e.g. per transport), one row of panels per mapping,
    links coloured by utilisation; ``notes`` and ``row_titles`` go with the rows.
    """
    if out.suffix not in FORMATS:
        raise DrawError(f"{out}: expected a file name ending in {' or '.join(FORMATS)}")
    planes = fabric.topology.planes
    width = max(1, fabric.topology.racks * fabric.topology.hosts_per_rack)
    groups = max(1, len(loads))
    # one group of panels per row of loads; a lone drawing wraps its planes two to a row
    per_row = planes if loads else min(planes, 2)
    rows_per_group = -(-planes // per_row)
    fig, axes = plt.subplots(
        groups * rows_per_group,
        per_row,
        figsize=(max(4.0, 1.35 * width) * per_row, 3.6 * groups * rows_per_group),
        squeeze=False,
    )
    norm = Normalize(vmin=0.0, vmax=1.0)
    for group in range(groups):
        group_loads = loads[group] if loads else None
        group_notes = notes[group] if group < len(notes) else None
        for plane in range(planes):
            ax = axes[group * rows_per_group + plane // per_row][plane % per_row]
            _draw_plane(ax, fabric, plane, group_loads, group_notes, norm)
            if group < len(row_titles) and plane == 0:
                ax.text(
                    -0.05, 1.1, row_titles[group], transform=ax.transAxes, fontsize=11,
                    fontweight="bold", ha="left",
                )  # fmt: skip
        for spare in range(planes, rows_per_group * per_row):
            axes[group * rows_per_group + spare // per_row][spare % per_row].axis("off")
    if loads:
        bar = fig.colorbar(
            plt.cm.ScalarMappable(norm=norm, cmap=CMAP),
            ax=[ax for row_axes in axes for ax in row_axes],
            fraction=0.015,
            pad=0.01,
        )
        bar.set_label("link utilisation over the run (busier direction)")
    fig.suptitle(title or fabric.summary(), fontsize=11)
    if caption:
        fig.text(0.01, 0.005, caption, fontsize=8, ha="left", va="bottom")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=110)
    except OSError as exc:
        raise DrawError(f"{out}: cannot write the picture ({exc.strerror})") from None
    finally:
        plt.close(fig)
    return out


def link_loads(
    fabric: Fabric,
    ports: Mapping[str, Mapping[str, int]],
    failed: set[tuple[str, str]],
    duration: float,
) -> dict[tuple[str, str], LinkLoad]:
    """Utilisation of every link over a run of ``duration`` seconds.

    ``ports`` holds the switches' byte counters over the run: switch -> ``"tx/PORT"`` and
    ``"rx/PORT"`` -> bytes. A link's direction leaving a switch is that port's tx bytes; the
    direction from a host into its leaf is the leaf port's rx bytes. A link with no counter
    (a switch that did not answer) has no utilisation.
    """
    rate = fabric.topology.link_rate_mbps * 1e6
    found: dict[tuple[str, str], LinkLoad] = {}
    for link in fabric.links:
        directions: list[int] = []
        ends = (
            (link.a, link.a_port, link.b, link.b_port),
            (link.b, link.b_port, link.a, link.a_port),
        )
        for node, port, other, other_port in ends:
            if fabric.node_kind(node) == "host":
                # a host has no counters: what it sent is what its leaf's port received
                value = ports.get(other, {}).get(f"rx/{other_port}")
            else:
                value = ports.get(node, {}).get(f"tx/{port}")
            if value is not None:
                directions.append(value)
        utilisation = (
            max(directions) * 8 / (rate * duration) if directions and duration > 0 else None
        )
        key = link_key(link.a, link.b)
        found[key] = LinkLoad(utilisation, key in failed)
    return found


def failed_links(targets: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
    """The link keys of fault marks ``(action, "a <-> b")`` that took a link down."""
    out = set()
    for action, target in targets:
        if action == "down" and " <-> " in target:
            a, b = target.split(" <-> ", 1)
            out.add(link_key(a.strip(), b.strip()))
    return out


__all__ = [
    "DrawError",
    "LinkLoad",
    "draw_fabric",
    "failed_links",
    "link_key",
    "link_loads",
]
