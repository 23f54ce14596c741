"""Congestion control for MRC QPs: an abstract base, a registry of algorithms by name, profiles.

``create("nscc", mtu=4096, params={...})`` builds an algorithm; ``available()`` lists the names;
``register("name")`` is the class decorator an algorithm uses to add itself.
"""

from host.transport.cc import ecn_delay, fixed, nscc  # noqa: F401  (register the shipped algorithms)
from host.transport.cc.base import (
    DEFAULT_CC,
    CcProfile,
    CcProfileError,
    CongestionControl,
    available,
    create,
    register,
)

__all__ = [
    "DEFAULT_CC",
    "CcProfile",
    "CcProfileError",
    "CongestionControl",
    "available",
    "create",
    "register",
]
