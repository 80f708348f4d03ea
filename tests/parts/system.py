"""Debian packages the real parts need, installed when missing (root and apt-get), as the
container test installs podman; skipped where they cannot be had, and never in CI."""

from __future__ import annotations

import os
import shutil

import pytest

from tests.docker.apt import LockHeld, apt_get


def need(**commands: str) -> None:
    """Make each command (name=package) available, or skip the test (fail it in CI)."""
    missing = sorted({package for command, package in commands.items()
                      if not shutil.which(command)})
    if not missing:
        return
    why = None
    if os.geteuid() != 0:
        why = f"needs {', '.join(missing)} (not root: cannot install them)"
    elif not shutil.which("apt-get"):
        why = f"needs {', '.join(missing)} and has no apt-get to install them"
    if why is None:
        try:
            apt_get("update", "-qq")
            apt_get("install", "-y", "-qq", *missing)
        except LockHeld as error:
            pytest.fail(f"installing {', '.join(missing)}: {error}")
        return
    if os.environ.get("CI"):
        pytest.fail(f"this test {why}")
    pytest.skip(f"this test {why}")
