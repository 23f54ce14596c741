"""What ``mrc-host`` is told on its command line (:class:`AgentOptions`) and where its control
socket lives by default."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from host.transport.cc import DEFAULT_CC
from host.transport.config import UET_PROFILE

DEFAULT_CONTROL_DIR = Path("/run/mrc-testbed")
DEFAULT_WINDOW = 64  # messages of one transfer posted to its QP at a time


def default_control_path(host: str) -> Path:
    """``/run/mrc-testbed/HOST.sock``."""
    return DEFAULT_CONTROL_DIR / f"{host}.sock"


@dataclass(frozen=True)
class AgentOptions:
    """Everything ``mrc-host`` is told on its command line."""

    host: str
    control: Path | None = None  # default: default_control_path(host)
    cc: str = DEFAULT_CC
    cc_params: tuple[tuple[str, float], ...] = ()  # overrides of the algorithm's defaults
    stack_profile: str = UET_PROFILE  # the transport's rules (host.transport.config.STACK_PROFILES)
    ev_count: int = 128
    ev_format: str = "srv6"  # EV format of every QP: srv6, stev or udp (host.transport.evs)
    direct: bool = False  # accept frames whose carrier still holds uSIDs (back-to-back hosts)
    setup: bool = True  # prepare the NICs (MTU, MAC, kernel IPv6 off, offloads off)
    pcap: Path | None = None  # capture every MRC frame sent and received
    stats_file: Path | None = None  # rewrite the statistics JSON here every second and at exit
    window: int = DEFAULT_WINDOW
    rx_ring: bool = True  # receive through a PACKET_RX_RING (else one recv per frame)
    pace: bool = True  # data frames leave each NIC at the link rate (host.agent.pacing)
    #: one link's latency (us), added to every frame sent once for each link of its path (two
    #: within a rack, four between racks), where nothing in the fabric applies the links'
    #: latency (BMv2 on a kernel without netem); 0: none
    link_latency_us: float = 0.0
    seed: int | None = None  # the core's random seed (default: derived from the host index)
