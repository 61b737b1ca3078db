"""pylookahead: exact, draft-free Lookahead Decoding on a libtorch C++ engine."""

from __future__ import annotations

import os as _os

# OpenMP threads that finish a parallel region spin before they sleep (libgomp: ~300k iterations), so
# on a machine where another process holds a core a multi-threaded step waits for descheduled
# spinners and runs several times slower (docs/design.md, "Threads"; benchmarks/contention.py).
# libgomp reads this once when it starts, i.e. when torch is first imported: it applies when
# pylookahead is imported before torch, and never overrides a user's own setting.
if _os.environ.get("PYLOOKAHEAD_OMP_DEFAULTS", "1") != "0" and not any(
    k in _os.environ for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
):
    _os.environ["OMP_WAIT_POLICY"] = "PASSIVE"

# libtorch's shared libraries must be loaded before the extension that links them.
import torch  # noqa: E402, F401

from ._core import (  # noqa: E402
    AutoLookahead,
    EngineConfig,
    GenerationConfig,
    LookaheadConfig,
    ModelLoadError,
    SessionBusyError,
    SessionConfig,
    __version__,
)
from .session import GenerationOutput, Model, Session, StreamChunk  # noqa: E402

__all__ = [
    "AutoLookahead",
    "EngineConfig",
    "GenerationConfig",
    "GenerationOutput",
    "LookaheadConfig",
    "Model",
    "ModelLoadError",
    "SessionBusyError",
    "Session",
    "SessionConfig",
    "StreamChunk",
    "__version__",
]
