"""CC profiles of the OCP MRC controller API (``mrc_ctl_cc_profile_attr``), per host.

They follow the life cycle of :mod:`.profiles`: an ONLINE one gives a QP that names it at INIT
its congestion control (for NSCC, the fields of ``mrc_ctl_cc_nscc_cfg``; a field left 0 takes
the fabric's default). Id 0 is the host's own congestion control (the agent's ``cc-profile``),
always ONLINE; a controller cannot change it.
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from host.agent.ocp.abi import U32_MAX, CcMask, OcpError, ProfileState, field_int
from host.agent.ocp.profiles import check_usable, existing_or_new
from host.transport.cc import CcProfile
from host.transport.cc.base import CcProfileError

#: nscc fields where 0 is a setting, not "unset" (the others take the fabric's default at 0)
NSCC_ZERO_MEANINGFUL = ("disable_qa", "qa_gate")


@dataclass
class CtlCcProfile:
    """A CC profile as the controller configured it."""

    state: int = ProfileState.INIT
    algorithm: str | None = None
    config: dict[str, float] | None = None


class CcProfileStore:
    """The CC profiles of one host; profile 0 is the agent's own congestion control."""

    def __init__(
        self,
        own: Callable[[], CcProfile],
        fit: Callable[[CcProfile], CcProfile],
        mtu: int,
        users: Callable[[int], int],
    ) -> None:
        self.own = own
        self.fit = fit
        self.mtu = mtu
        self.users = users  #: QPs (at INIT or later) naming a profile
        self.profiles: dict[int, CtlCcProfile] = {}

    def check_usable(self, profile_id: int) -> None:
        """Refuse a QP's CC profile id unless it is 0 or an ONLINE profile."""
        check_usable("CC", self.profiles, profile_id)

    def profile_for(self, profile_id: int) -> CcProfile:
        """The congestion control of a QP that names ``profile_id``."""
        if profile_id == 0:
            return self.own()
        profile = self.profiles[profile_id]
        return self.fit(CcProfile(profile.algorithm or "", dict(profile.config or {})))

    def request(self, request: Mapping[str, Any]) -> dict[str, Any]:
        pid = field_int(request, "id")
        mask = field_int(request, "mask", 0, U32_MAX)
        modify = request.get("op") == "modify"
        if pid == 0:
            if modify:
                raise OcpError(
                    errno.EBUSY,
                    "CC profile 0 is the host's own and in use (the agent's cc-profile command "
                    "changes it)",
                )
            own = self.own()
            return {"ok": True, "state": ProfileState.ONLINE, "algorithm": own.name,
                    "config": dict(own.params)}  # fmt: skip
        profile = existing_or_new("CC", self.profiles, pid, modify, CtlCcProfile)
        if modify:
            self._modify(pid, profile, request, mask)
            self.profiles[pid] = profile
            if profile.state == ProfileState.INIT and profile.algorithm is None:
                self.profiles.pop(pid, None)
        return {"ok": True, "state": profile.state, "algorithm": profile.algorithm or "",
                "config": dict(profile.config or {})}  # fmt: skip

    def _modify(
        self, pid: int, profile: CtlCcProfile, request: Mapping[str, Any], mask: int
    ) -> None:
        state = profile.state
        if mask & CcMask.CUR_STATE and field_int(request, "cur_state", 0, 2) != state:
            raise OcpError(errno.EINVAL, f"CC profile {pid} is {ProfileState(state).name}")
        if state == ProfileState.ONLINE and mask & (CcMask.ALGORITHM | CcMask.CONFIG):
            raise OcpError(
                errno.EBUSY if self.users(pid) else errno.EINVAL,
                f"CC profile {pid} is ONLINE: set it OFFLINE to change it",
            )
        if mask & CcMask.ALGORITHM:
            name = request.get("algorithm")
            if not isinstance(name, str) or not name:
                raise OcpError(
                    errno.EINVAL,
                    "CC algorithm NULL: the testbed's transport always runs a congestion "
                    "control (choose fixed for a fixed window)",
                )
            try:
                CcProfile.from_dict({"algorithm": name}, mtu=self.mtu)
            except CcProfileError as exc:
                raise OcpError(errno.EINVAL, str(exc)) from None
            if name != profile.algorithm:
                profile.config = None
            profile.algorithm = name
        if mask & CcMask.CONFIG:
            config = request.get("config")
            if not isinstance(config, dict):
                raise OcpError(errno.EINVAL, "CC config: expected the algorithm's fields")
            if profile.algorithm is None:
                raise OcpError(errno.EINVAL, f"CC profile {pid}: set the algorithm first")
            given = {k: v for k, v in config.items() if v or k in NSCC_ZERO_MEANINGFUL}
            try:
                fitted = self.fit(CcProfile(profile.algorithm, given))
                CcProfile.from_dict(fitted.as_dict(), mtu=self.mtu)
            except CcProfileError as exc:
                raise OcpError(errno.EINVAL, f"CC profile {pid}: {exc}") from None
            profile.config = given
        if mask & CcMask.STATE:
            new = field_int(request, "state", 0, 2)
            if new == state:
                return
            if state == ProfileState.INIT and new == ProfileState.OFFLINE:
                if profile.algorithm is None:
                    raise OcpError(
                        errno.EINVAL, f"CC profile {pid}: INIT -> OFFLINE needs the ALGORITHM"
                    )
            elif state == ProfileState.OFFLINE and new == ProfileState.ONLINE:
                if profile.config is None:
                    raise OcpError(
                        errno.EINVAL, f"CC profile {pid}: OFFLINE -> ONLINE needs the CONFIG"
                    )
            elif state == ProfileState.ONLINE and new == ProfileState.OFFLINE:
                if self.users(pid):
                    raise OcpError(errno.EBUSY, f"CC profile {pid}: {self.users(pid)} QP(s) use it")
            elif state == ProfileState.OFFLINE and new == ProfileState.INIT:
                profile.algorithm, profile.config = None, None
            else:
                raise OcpError(
                    errno.EINVAL,
                    f"CC profile {pid}: {ProfileState(state).name} -> {ProfileState(new).name} (INIT -> OFFLINE -> ONLINE -> OFFLINE -> INIT)",
                )
            profile.state = new
