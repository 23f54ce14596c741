"""The repository's entry points: ./testbed, scripts/install.sh, the Vagrantfile, console scripts."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@pytest.mark.parametrize("script", ["testbed", "scripts/install.sh"])
def test_shell_scripts_parse_as_posix_sh(script: str) -> None:
    result = subprocess.run(["sh", "-n", str(ROOT / script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_testbed_help_names_the_two_commands() -> None:
    result = subprocess.run([str(ROOT / "testbed"), "--help"], capture_output=True, text=True)
    assert result.returncode == 0
    assert "sudo ./testbed demo" in result.stdout and "sudo ./testbed test" in result.stdout


def test_install_rejects_unknown_options() -> None:
    result = subprocess.run(
        ["sh", str(ROOT / "scripts/install.sh"), "--with-bmv3"], capture_output=True, text=True
    )
    assert result.returncode == 2
    assert "unknown option '--with-bmv3'" in result.stderr


def test_ci_runs_the_readme_test_command() -> None:
    ci = (ROOT / ".ci/run").read_text()
    readme = (ROOT / "README.md").read_text()
    assert "./testbed test" in ci
    assert "sudo ./testbed test" in readme and "sudo ./testbed demo" in readme


@pytest.mark.parametrize("tool", ["mrc-testbed", "mrc-ctl", "mrc-host", "mrc-switch"])
def test_console_scripts_answer_help(tool: str) -> None:
    result = subprocess.run([str(BIN / tool), "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "usage:" in result.stdout


def test_mininet_is_importable_from_the_venv() -> None:
    result = subprocess.run(
        [sys.executable, "-c", "import mininet.net, mininet.node"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.skipif(shutil.which("vagrant") is None, reason="vagrant is not installed")
@pytest.mark.parametrize("env", [{}, {"MRC_VM_CPUS": "2", "MRC_VM_MEMORY": "4096"}])
def test_vagrant_validate(tmp_path: Path, env: dict[str, str]) -> None:
    shutil.copy(ROOT / "Vagrantfile", tmp_path / "Vagrantfile")
    result = subprocess.run(
        ["vagrant", "validate"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "VAGRANT_HOME": str(tmp_path / ".vagrant.d"), **env},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "validated successfully" in result.stdout
