"""``mrc-testbed exec HOST -- CMD``: run a program inside a testbed host, with the OCP MRC API.

The command runs in the host's network and mount namespaces (entered with ``nsenter`` at the
process of the host recorded in the state file of ``mrc-testbed up``: the host's shell, else
its agent), in the caller's working directory, with an environment that makes a program written
against the OCP MRC API (``mrc.h``, linked with ``-l_mrc -libverbs``) find the testbed:

- ``LD_LIBRARY_PATH`` starts with ``build/capi/verbs`` (the emulated verbs device, a
  ``libibverbs.so.1`` that takes the place of Debian's; docs/ocp-api.md says why) and
  ``build/capi`` (``lib_mrc.so``);
- ``MRC_TESTBED_HOST`` (the device name), ``MRC_TESTBED_OCP_SOCKET`` (the agent's OCP API
  socket), ``MRC_TESTBED_CONTROL`` (its control socket) and ``MRC_TESTBED_STATE``.

In the host's mount namespace ``/etc/hosts`` names every host on the management network
(:mod:`experiments.mgmtnet`), so a program that exchanges its QP details over TCP reaches its
peer by host name.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from host.agent.ocp import ocp_socket_path
from targets.state import StateError, TestbedState, default_path

ROOT = Path(__file__).resolve().parent.parent
CAPI_BUILD = ROOT / "build" / "capi"


class ExecError(RuntimeError):
    """The command cannot be run in the host (one line that says why and what to do)."""


def _running(pid: int) -> bool:
    return pid > 0 and Path(f"/proc/{pid}").exists()


def host_pid(state: TestbedState, host: str) -> int:
    """A live process in ``host``'s namespaces: the Mininet host's shell, else its agent."""
    if host not in state.hosts:
        names = ", ".join(sorted(state.hosts)) or "none"
        raise ExecError(f"no host '{host}' in the running testbed (hosts: {names})")
    for proc in state.processes:
        if proc.get("name") == f"node {host}" and _running(int(proc.get("pid", 0))):
            return int(proc["pid"])
    pid = state.hosts[host].pid
    if _running(pid):
        return pid
    raise ExecError(
        f"host '{host}' of the testbed is not running (no live process of it): "
        "restart the testbed with 'mrc-testbed up'"
    )


def exec_env(
    state: TestbedState, host: str, base: dict[str, str] | None = None, build: Path = CAPI_BUILD
) -> dict[str, str]:
    """The environment of a command run in ``host`` (see the module docstring)."""
    env = dict(os.environ if base is None else base)
    control = Path(state.hosts[host].control)
    paths = [str(build / "verbs"), str(build)]
    if env.get("LD_LIBRARY_PATH"):
        paths.append(env["LD_LIBRARY_PATH"])
    env["LD_LIBRARY_PATH"] = ":".join(paths)
    env["MRC_TESTBED_HOST"] = host
    env["MRC_TESTBED_CONTROL"] = str(control)
    env["MRC_TESTBED_OCP_SOCKET"] = str(ocp_socket_path(control))
    env["MRC_TESTBED_STATE"] = str(default_path())
    return env


def exec_argv(state: TestbedState, host: str, command: list[str]) -> list[str]:
    """``nsenter`` into ``host``'s namespaces, then ``command``."""
    if not command:
        raise ExecError("no command to run: mrc-testbed exec HOST -- CMD [ARGS...]")
    nsenter = shutil.which("nsenter")
    if nsenter is None:
        raise ExecError("nsenter not found: install util-linux")
    pid = host_pid(state, host)
    return [
        nsenter, f"--target={pid}", "--net", "--mount", "--root", f"--wd={os.getcwd()}",
        *command,
    ]  # fmt: skip


def cmd_exec(args: argparse.Namespace) -> int:
    """``mrc-testbed exec HOST -- CMD``: replace this process with CMD inside HOST."""
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    try:
        if os.geteuid() != 0:
            raise ExecError("exec enters a host's namespaces: run it as root (sudo)")
        state = TestbedState.load(default_path())
        if not (CAPI_BUILD / "verbs" / "libibverbs.so.1").exists():
            raise ExecError(
                f"{CAPI_BUILD}/verbs/libibverbs.so.1 is missing: build it with "
                "'./testbed install' (or 'make -C capi')"
            )
        argv = exec_argv(state, args.host, command)
        env = exec_env(state, args.host)
    except (ExecError, StateError) as exc:
        print(f"mrc-testbed exec: {exc}", file=sys.stderr)
        return 1
    sys.stdout.flush()
    try:
        os.execve(argv[0], argv, env)
    except OSError as exc:
        print(f"mrc-testbed exec: cannot run {argv[0]}: {exc.strerror}", file=sys.stderr)
        return 127
    return 0  # not reached


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``exec`` to the ``mrc-testbed`` command line."""
    parser = subparsers.add_parser(
        "exec",
        help="run a command inside a testbed host (OCP MRC API programs find its device)",
        description="Run CMD in HOST's namespaces with lib_mrc.so and the emulated verbs "
        "device on the library path (docs/ocp-api.md).",
    )
    parser.add_argument("host", metavar="HOST", help="a host of the running testbed (e.g. h0)")
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD", help="the command")
    parser.set_defaults(func=cmd_exec)


__all__ = ["ExecError", "cmd_exec", "exec_argv", "exec_env", "host_pid", "register"]
