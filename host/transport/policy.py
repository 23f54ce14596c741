"""Transport policies: MRC and the baselines it is compared with, all on the same engine.

``mrc`` sprays every packet on a different GOOD EV, retires EVs on loss and probes them back,
and uses trimming with NACKs. The baselines switch one of these features off each; see the
table in docs/host-stack.md.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Policy:
    """What a QP does with its EVs and with trimming."""

    name: str
    spray: bool  #: a different EV for every packet (else one EV for the whole QP)
    single_ev: str | None  #: "first" or "hash" when not spraying
    failover: bool  #: retire EVs on loss and probe them back
    trimmable: bool  #: data sent with DSCP 10 (else DSCP 0, never trimmed)
    trim_nack: bool  #: the receiver NACKs trimmed packets


POLICIES: dict[str, Policy] = {
    p.name: p
    for p in (
        Policy("mrc", spray=True, single_ev=None, failover=True, trimmable=True, trim_nack=True),
        Policy(
            "single-path",
            spray=False,
            single_ev="first",
            failover=False,
            trimmable=True,
            trim_nack=True,
        ),
        Policy(
            "ecmp", spray=False, single_ev="hash", failover=False, trimmable=True, trim_nack=True
        ),
        Policy(
            "spray-no-failover",
            spray=True,
            single_ev=None,
            failover=False,
            trimmable=True,
            trim_nack=True,
        ),
        Policy(
            "no-trim-nack",
            spray=True,
            single_ev=None,
            failover=True,
            trimmable=False,
            trim_nack=False,
        ),
    )
}


def get_policy(name: str) -> Policy:
    """The policy called ``name``."""
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(f"policy {name!r}: expected one of {', '.join(POLICIES)}") from None
