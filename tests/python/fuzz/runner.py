"""Runs fuzz cases in a worker process (worker.py) that is restarted whenever a case kills or hangs it."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from pathlib import Path

_WORKER = Path(__file__).with_name("worker.py")


class Worker:
    """One worker process at a time; `run` answers (outcome, detail), outcome "crash" or "hang" when the
    worker died on the case or did not answer within `timeout` seconds."""

    def __init__(self, env: dict[str, str], timeout: float = 30.0) -> None:
        self._env = env
        self._timeout = timeout
        self._proc: subprocess.Popen[str] | None = None

    def _start(self) -> subprocess.Popen[str]:
        if self._proc is None or self._proc.poll() is not None:
            self._proc = subprocess.Popen(
                [sys.executable, "-u", str(_WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL, text=True, env=self._env, cwd=os.path.dirname(_WORKER),
            )  # fmt: skip
        return self._proc

    def run(self, target: str, case_dir: Path) -> tuple[str, str]:
        proc = self._start()
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(json.dumps({"target": target, "dir": str(case_dir)}) + "\n")
            proc.stdin.flush()
        except BrokenPipeError:
            pass
        # Generous for the first case (the worker imports torch); then the per-case limit.
        ready, _, _ = select.select([proc.stdout], [], [], self._timeout + 60)
        if not ready:
            proc.kill()
            proc.wait()
            return "hang", f"no answer within {self._timeout + 60:.0f} s"
        line = proc.stdout.readline()
        if not line:
            code = proc.wait()
            return "crash", f"worker exited with {code} (negative: killed by signal {-code})"
        answer = json.loads(line)
        return answer["outcome"], answer["detail"]

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.stdin.close()  # type: ignore[union-attr]
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
