"""pylookahead: exact, draft-free Lookahead Decoding on a libtorch C++ engine."""

from __future__ import annotations

# libtorch's shared libraries must be loaded before the extension that links them.
import torch  # noqa: F401

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
