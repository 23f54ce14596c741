"""The congestion-control interface every algorithm implements, and the registry of algorithms.

The QP calls the keyword-only hooks; the algorithm keeps ``cwnd`` (bytes in flight allowed).
Trims are congestion signals (a switch queue was full enough to cut the payload); SACK-inferred
losses are treated by MRC as path failures, so algorithms may ignore them, while a timeout is
both.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from host.transport.config import StackConfig

_REGISTRY: dict[str, type[CongestionControl]] = {}
#: the algorithm QPs use unless told otherwise: UET NSCC, MRC's default ("uet-1.0-nscc")
DEFAULT_CC = "nscc"
#: the keys of a CC profile as a mapping (YAML in scenarios, JSON on the agent's control
#: interface), after mrc_ctl.h's CC profile attributes CC_ALGORITHM and CC_CONFIG
PROFILE_KEYS = ("algorithm", "config")


class CcProfileError(ValueError):
    """A CC profile mapping that does not describe a usable congestion control; ``field``
    names the key at fault (``config.base_rtt``)."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class CcProfile:
    """A congestion control choice: an algorithm name and its parameters (for NSCC, the
    fields of ``struct mrc_ctl_cc_nscc_cfg`` with their names and units)."""

    name: str = DEFAULT_CC
    params: Mapping[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        """``{"algorithm": name, "config": {field: value}}`` (what :meth:`from_dict` reads)."""
        return {"algorithm": self.name, "config": dict(self.params)}

    @classmethod
    def from_dict(cls, data: object, *, mtu: int = 4096) -> CcProfile:
        """A profile from ``{"algorithm": NAME, "config": {FIELD: NUMBER}}``, checked by
        building the algorithm once: an unknown key, algorithm or field, or a value out of
        range, raises :class:`CcProfileError` naming it."""
        if not isinstance(data, Mapping):
            raise CcProfileError(
                f"CC profile {data!r}: expected a mapping with keys {PROFILE_KEYS}", "cc"
            )
        for key in data:
            if key not in PROFILE_KEYS:
                raise CcProfileError(f"CC profile key {key!r}: expected one of {PROFILE_KEYS}", key)
        name = data.get("algorithm", DEFAULT_CC)
        if not isinstance(name, str) or name not in _REGISTRY:
            raise CcProfileError(
                f"CC algorithm {name!r}: expected one of {', '.join(available())}", "algorithm"
            )
        config = data.get("config") or {}
        if not isinstance(config, Mapping):
            raise CcProfileError(f"CC config {config!r}: expected a mapping of fields", "config")
        allowed = _REGISTRY[name].defaults
        params: dict[str, float] = {}
        for key, value in config.items():
            if key not in allowed:
                raise CcProfileError(
                    f"{name} field {key!r}: expected one of {sorted(allowed)}", f"config.{key}"
                )
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise CcProfileError(f"{name} field {key!r} = {value!r}: expected a number",
                                     f"config.{key}")  # fmt: skip
            params[key] = value
        profile = cls(name, params)
        try:
            create(profile, mtu=mtu)
        except ValueError as exc:
            bad = next((k for k in params if f" {k} " in f" {exc} "), None)
            raise CcProfileError(str(exc), f"config.{bad}" if bad else "config") from None
        return profile


class CongestionControl(abc.ABC):
    """Window-based congestion control of one QP."""

    #: parameters the algorithm accepts, with their defaults (subclasses override)
    defaults: Mapping[str, float] = {}

    def __init__(
        self, *, mtu: int, params: Mapping[str, float] | None = None,
        config: StackConfig | None = None,
    ) -> None:  # fmt: skip
        given = dict(params or {})
        unknown = sorted(set(given) - set(self.defaults))
        if unknown:
            raise ValueError(
                f"congestion control {type(self).__name__}: unknown parameter(s) {unknown}; "
                f"expected some of {sorted(self.defaults)}"
            )
        self.mtu = mtu
        self.params = {**self.defaults, **given}
        self.cwnd = float(mtu)
        #: the stack's rules for feeding the algorithm (``cc_learn_base_rtt``,
        #: ``timeout_quick_adapt``): its QP's config
        self.config = config or StackConfig()
        self.setup()

    def setup(self) -> None:  # noqa: B027  (optional hook)
        """Check the parameters and set the algorithm's state up (after ``params``, ``mtu``
        and ``config`` are set; raise ValueError naming a parameter out of range)."""

    @abc.abstractmethod
    def on_packet_sent(self, *, nbytes: int, now: float) -> None:
        """New data packets with ``nbytes`` of payload left (called once per burst sent)."""

    @abc.abstractmethod
    def on_ack(
        self, *, acked_bytes: int, rtt: float | None, ce_count: int, pkt_count: int, now: float
    ) -> None:
        """An ACK acknowledged ``acked_bytes``; ``ce_count`` of ``pkt_count`` packets were CE."""

    @abc.abstractmethod
    def on_trim(self, *, nbytes: int, now: float, last_hop: bool = False) -> None:
        """A packet of ``nbytes`` was trimmed by a switch (NACK received); ``last_hop``: by the
        receiver's own leaf (its downlink was the congested port)."""

    @abc.abstractmethod
    def on_loss(self, *, nbytes: int, timeout: bool, now: float) -> None:
        """Packets totalling ``nbytes`` were declared lost (by timeout or SACK)."""

    def on_rtt(self, *, rtt: float, now: float) -> None:  # noqa: B027  (optional hook)
        """An RTT sample (seconds)."""

    def describe(self) -> dict[str, float]:
        """The state worth reporting (cwnd and parameters)."""
        return {"cwnd": self.cwnd, **self.params}


def register(name: str) -> Callable[[type[CongestionControl]], type[CongestionControl]]:
    """Class decorator: make an algorithm available as ``name``."""

    def decorate(cls: type[CongestionControl]) -> type[CongestionControl]:
        _REGISTRY[name] = cls
        return cls

    return decorate


def available() -> list[str]:
    """Names of the registered algorithms."""
    return sorted(_REGISTRY)


def create(
    profile: str | CcProfile,
    *,
    mtu: int,
    params: Mapping[str, float] | None = None,
    config: StackConfig | None = None,
) -> CongestionControl:
    """Build the algorithm named by ``profile`` (a name or a :class:`CcProfile`) for a QP of
    ``config`` (default: the default config)."""
    if isinstance(profile, CcProfile):
        name, merged = profile.name, {**profile.params, **(params or {})}
    else:
        name, merged = profile, dict(params or {})
    try:
        cls = _REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"congestion control {name!r}: expected one of {', '.join(available())}"
        ) from None
    return cls(mtu=mtu, params=merged, config=config)
