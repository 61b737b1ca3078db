"""Run `python -m pylookahead ...` in a subprocess against the same package the tests import.

The child runs outside the source tree (cwd = a temp dir) with PYTHONPATH pointing at the
directory that holds the imported `pylookahead`: from a source checkout with the extension built
in place that is the checkout, from an installed wheel it is site-packages. Running from the repo
root instead would shadow an installed wheel with the source package, which has no `_core`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pylookahead


def _child_env(extra_env: dict[str, str] | None) -> dict[str, str]:
    env = dict(os.environ, **(extra_env or {}))
    package_root = str(Path(pylookahead.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join([package_root, *filter(None, [env.get("PYTHONPATH")])])
    return env


def run_pylookahead(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pylookahead", *args],
        capture_output=True,
        text=True,
        env=_child_env(None),
        cwd=tempfile.gettempdir(),
        timeout=timeout,
    )


def run_python(
    code: str, *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """`python -c code args...` with `env` added to this process's environment."""
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=_child_env(env),
        cwd=tempfile.gettempdir(),
        timeout=timeout,
    )
