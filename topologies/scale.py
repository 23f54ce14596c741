"""Scale arithmetic of folded-Clos fabrics: multi-plane two-tier against a single plane.

Switches of radix ``k`` (ports at the plane speed) build a two-tier plane of ``k^2/2`` hosts:
``k`` leaves with ``k/2`` ports down and ``k/2`` up, and ``k/2`` spines with all ``k`` ports down.
A host with ``P`` NICs, one per plane, gets ``P`` such planes. The same switch chip run as
``k/P`` ports of ``P`` times the speed gives a single plane of the same host bandwidth, which
needs ``t`` tiers where ``2 (r/2)^t >= hosts`` for radix ``r = k/P``.

Counting convention (non-blocking folded Clos): every tier below the top uses half its ports
down and half up, the top tier uses all ports down; every tier boundary, the host edge included,
carries one link per host; every link has an optic (transceiver) at each end.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class ClosBuild:
    """One folded-Clos build: switches and links for a number of hosts."""

    radix: int
    tiers: int
    hosts: int
    switches_per_tier: tuple[int, ...]  # leaf tier first

    @property
    def switches(self) -> int:
        """Switches in all tiers."""
        return sum(self.switches_per_tier)

    @property
    def links(self) -> int:
        """Cables, host links included: one per host at every tier boundary."""
        return self.hosts * self.tiers

    @property
    def optics(self) -> int:
        """Transceivers: two per link."""
        return 2 * self.links


@dataclass(frozen=True)
class ScaleReport:
    """``mrc-testbed topo scale``: a multi-plane two-tier fabric beside a single plane."""

    radix: int
    planes: int
    per_plane: ClosBuild
    single_plane: ClosBuild

    @property
    def hosts(self) -> int:
        """Hosts of the multi-plane fabric (every host has one NIC per plane)."""
        return self.per_plane.hosts

    @property
    def switches(self) -> int:
        """Switches in all planes."""
        return self.per_plane.switches * self.planes

    @property
    def links(self) -> int:
        """Links in all planes."""
        return self.per_plane.links * self.planes

    @property
    def optics(self) -> int:
        """Optics in all planes."""
        return self.per_plane.optics * self.planes


def _check_radix(radix: int, what: str) -> None:
    if radix < 2 or radix % 2:
        raise ValueError(f"{what} {radix}: expected an even number of ports, at least 2")


def clos_capacity(radix: int, tiers: int) -> int:
    """Hosts a full non-blocking folded Clos of ``tiers`` tiers of radix-``radix`` switches holds."""
    _check_radix(radix, "radix")
    if tiers < 1:
        raise ValueError(f"tiers {tiers}: expected at least 1")
    if tiers == 1:
        return radix
    return 2 * (radix // 2) ** tiers


def clos_build(radix: int, hosts: int) -> ClosBuild:
    """The fewest tiers of radix-``radix`` switches that connect ``hosts`` hosts, and their counts."""
    _check_radix(radix, "radix")
    if hosts < 1:
        raise ValueError(f"hosts {hosts}: expected at least 1")
    tiers = 1
    while clos_capacity(radix, tiers) < hosts:
        if radix == 2:
            raise ValueError("radix 2 switches cannot build a fabric of more than 2 hosts")
        tiers += 1
    if tiers == 1:
        return ClosBuild(radix, 1, hosts, (1,))
    lower = math.ceil(hosts / (radix // 2))
    top = math.ceil(hosts / radix)
    return ClosBuild(radix, tiers, hosts, (lower,) * (tiers - 1) + (top,))


def scale(radix: int, planes: int) -> ScaleReport:
    """Two tiers of radix-``radix`` switches per plane, ``planes`` planes, against one plane."""
    _check_radix(radix, "radix")
    if planes < 1:
        raise ValueError(f"planes {planes}: expected at least 1")
    if radix % planes:
        raise ValueError(
            f"radix {radix} with {planes} planes: expected the radix to be a multiple of the "
            "number of planes (the single-plane build runs the same switch at radix/planes)"
        )
    hosts = clos_capacity(radix, 2)
    per_plane = ClosBuild(radix, 2, hosts, (radix, radix // 2))
    single_radix = radix // planes
    if single_radix < 2:
        raise ValueError(f"radix {radix} / {planes} planes leaves fewer than 2 ports per switch")
    return ScaleReport(radix, planes, per_plane, clos_build(single_radix, hosts))
