"""What EV format, EV and CC profiles of the OCP MRC controller API (``mrc_ctl.h``) share: ids
a controller picks (at most ``MAX_PROFILES`` of each kind per host; id 0 is the host's own) and
the life cycle INIT -> OFFLINE -> ONLINE -> OFFLINE -> INIT, a QP naming only an ONLINE one."""

from __future__ import annotations

import errno
from collections.abc import Callable, Mapping
from typing import Protocol, TypeVar

from host.agent.ocp.abi import MAX_PROFILES, OcpError, ProfileState


class _Profile(Protocol):
    state: int


P = TypeVar("P", bound=_Profile)


def check_usable(kind: str, profiles: Mapping[int, _Profile], profile_id: int) -> None:
    """Refuse a QP's ``kind`` profile id unless it is 0 or an ONLINE profile."""
    if profile_id == 0:
        return
    profile = profiles.get(profile_id)
    if profile is None or profile.state != ProfileState.ONLINE:
        state = "does not exist" if profile is None else f"is {ProfileState(profile.state).name}"
        raise OcpError(
            errno.EINVAL, f"{kind} profile {profile_id} {state}: a QP needs an ONLINE one (or 0)"
        )


def existing_or_new(
    kind: str, profiles: Mapping[int, P], pid: int, modify: bool, new: Callable[[], P]
) -> P:
    """Profile ``pid``, or for a modification of a free id a new one (not stored yet)."""
    profile = profiles.get(pid)
    if profile is None:
        if not modify:
            raise OcpError(errno.EINVAL, f"{kind} profile {pid} does not exist")
        if len(profiles) >= MAX_PROFILES:
            raise OcpError(errno.EINVAL, f"at most {MAX_PROFILES} {kind} profiles")
        profile = new()
    return profile
