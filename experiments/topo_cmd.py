"""``mrc-testbed topo``: show a fabric, its paths, and the scale arithmetic of two-tier planes.

- ``topo show FILE``            nodes, ports, links, uSIDs and addresses as tables
- ``topo paths FILE SRC DST``   every path between two hosts with its carrier in IPv6 notation
- ``topo scale --radix K --planes P``  hosts, switches, links and optics, beside one plane
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

from topologies import Fabric, TopologyError, load_topology
from topologies import usid as usidlib
from topologies.config import shipped_topologies, shipped_topology
from topologies.scale import ClosBuild, scale


def make_console() -> Console:
    """A console that does not squeeze tables to 80 columns when output goes to a file or pipe."""
    console = Console()
    return console if console.is_terminal else Console(width=200)


def _usid_text(usid: int) -> str:
    fields = usidlib.decode(usid)
    return f"{usid:#06x} (p{fields.plane} {fields.tier.name} {fields.index})"


def show(fabric: Fabric, console: Console) -> None:
    """Print the fabric's switches, ports, hosts and links."""
    console.print(fabric.summary())
    console.print(
        f"uSID block {fabric.block}, payload MTU {fabric.topology.mtu}, "
        f"interface MTU {fabric.topology.link_mtu}, "
        f"queue depth {fabric.topology.queue_depth} packets"
    )
    switch_rows = [
        [sw.name, sw.tier.value, str(sw.plane), str(sw.device_id), _usid_text(sw.usid),
         str(sw.usid_prefix), str(sw.end_sid)]
        for sw in fabric.switches
    ]  # fmt: skip
    port_rows = [
        [sw.name, str(port.number), port.intf, port.mac, port.peer,
         str(port.peer_port) if port.peer_port else "-", port.peer_mac]
        for sw in fabric.switches
        for port in sw.ports
    ]  # fmt: skip
    nic_rows = [
        [host.name, str(host.rack), str(nic.plane), nic.intf, _usid_text(nic.usid),
         str(nic.address), nic.mac, f"{nic.switch}:{nic.switch_port}"]
        for host in fabric.hosts
        for nic in host.nics
    ]  # fmt: skip
    link_rows = [
        [str(link.plane), link.a if not link.a_port else f"{link.a}:{link.a_port}", link.a_intf,
         f"{link.b}:{link.b_port}", link.b_intf]
        for link in fabric.links
    ]  # fmt: skip
    for title, columns, rows in (
        ("switches", ("switch", "tier", "plane", "device id", "uSID", "uN SID", "End SID"),
         switch_rows),
        ("switch ports", ("switch", "port", "interface", "MAC", "peer", "peer port", "peer MAC"),
         port_rows),
        ("host NICs", ("host", "rack", "plane", "interface", "uSID", "address", "MAC", "T0 port"),
         nic_rows),
        ("links", ("plane", "a", "a interface", "b", "b interface"), link_rows),
    ):  # fmt: skip
        console.print(_table(title, columns, rows))


def _table(title: str, columns: Sequence[str], rows: Iterable[Sequence[str]] = ()) -> Table:
    """A rich table with these columns and rows."""
    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*row)
    return table


def paths(fabric: Fabric, src: str, dst: str, console: Console) -> None:
    """Print every path between two hosts."""
    found = fabric.paths(src, dst)
    rows = [
        [path.label, str(path.plane), "-" if path.spine is None else str(path.spine),
         str(path.carrier), ", ".join(map(str, path.segments)),
         " ".join(f"{h.switch}[{h.in_port}>{h.out_port}]" for h in path.hops)]
        for path in found
    ]  # fmt: skip
    columns = ("path", "plane", "spine", "uSID carrier", "classic segments", "hops")
    console.print(_table(f"{len(found)} paths {src} -> {dst}", columns, rows))


def _build_row(table: Table, label: str, build: ClosBuild, planes: int) -> None:
    per_tier = " + ".join(f"{n:,}" for n in build.switches_per_tier)
    table.add_row(
        label,
        str(build.radix),
        str(build.tiers),
        f"{build.hosts:,}",
        f"{build.switches * planes:,} ({per_tier}{' per plane' if planes > 1 else ''})",
        f"{build.links * planes:,}",
        f"{build.optics * planes:,}",
    )


def scale_report(radix: int, planes: int, console: Console) -> None:
    """Print the multi-plane two-tier build beside the single-plane build of the same bandwidth."""
    report = scale(radix, planes)
    table = _table(
        f"radix {radix}, {planes} planes: {report.hosts:,} hosts in two tiers",
        ("build", "radix", "tiers", "hosts", "switches", "links", "optics"),
    )
    _build_row(table, "per plane", report.per_plane, 1)
    _build_row(table, f"{planes} planes", report.per_plane, planes)
    _build_row(table, "single plane", report.single_plane, 1)
    console.print(table)
    console.print(
        f"hosts: {report.hosts:,} (two tiers, {planes} planes); a single plane of radix "
        f"{report.single_plane.radix} needs {report.single_plane.tiers} tiers for the same hosts"
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``topo show|paths|scale`` to the ``mrc-testbed`` command line."""
    topo = subparsers.add_parser("topo", help="show a fabric, its paths and scale arithmetic")
    sub = topo.add_subparsers(dest="topo_cmd", required=True, metavar="{show,paths,scale,draw}")
    p_show = sub.add_parser("show", help="nodes, ports, links, uSIDs and addresses")
    p_show.add_argument("file", help="topology YAML file")
    p_show.set_defaults(func=_cmd_show)
    p_paths = sub.add_parser("paths", help="every path between two hosts with its carrier")
    p_paths.add_argument("file", help="topology YAML file")
    p_paths.add_argument("src", help="source host (e.g. h0)")
    p_paths.add_argument("dst", help="destination host (e.g. h3)")
    p_paths.set_defaults(func=_cmd_paths)
    p_scale = sub.add_parser("scale", help="two-tier multi-plane scale against a single plane")
    p_scale.add_argument("--radix", type=int, required=True, help="switch ports at the plane speed")
    p_scale.add_argument("--planes", type=int, required=True, help="planes (NICs per host)")
    p_scale.set_defaults(func=_cmd_scale)
    p_draw = sub.add_parser("draw", help="draw the fabric plane by plane (PNG or SVG)")
    p_draw.add_argument(
        "file",
        nargs="?",
        default="small",
        help="topology YAML file or shipped name (default small)",
    )
    p_draw.add_argument(
        "--out", type=Path, help="picture file, .png or .svg (default fabric-NAME.png)"
    )
    p_draw.set_defaults(func=_cmd_draw)


def _cmd_show(args: argparse.Namespace) -> int:
    show(Fabric(load_topology(args.file)), make_console())
    return 0


def _cmd_paths(args: argparse.Namespace) -> int:
    paths(Fabric(load_topology(args.file)), args.src, args.dst, make_console())
    return 0


def _topology_file(name: str) -> Path:
    """A topology file, or the shipped topology of that name."""
    path = Path(name)
    if path.exists() or path.suffix in (".yaml", ".yml"):
        return path
    shipped = shipped_topology(name)
    if not shipped.exists():
        raise TopologyError(
            name,
            "<file>",
            "no such file",
            "a topology YAML file or a shipped name "
            f"({', '.join(p.stem for p in shipped_topologies())})",
        )
    return shipped


def _cmd_draw(args: argparse.Namespace) -> int:
    from experiments.fabric_plot import DrawError, draw_fabric

    fabric = Fabric(load_topology(_topology_file(args.file)))
    out = args.out or Path(f"fabric-{fabric.topology.name}.png")
    try:
        written = draw_fabric(fabric, out)
    except DrawError as exc:
        print(f"mrc-testbed topo draw: {exc}", file=sys.stderr)
        return 2
    print(f"{fabric.summary()}: drawn in {written}")
    return 0


def _cmd_scale(args: argparse.Namespace) -> int:
    scale_report(args.radix, args.planes, make_console())
    return 0
