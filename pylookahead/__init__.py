"""pylookahead: exact, draft-free Lookahead Decoding on a libtorch C++ engine.

The names here are what the Python API takes and raises: `Model` and `Session` (options as keyword
arguments), the lookahead options a call accepts (`LookaheadConfig`, `AutoLookahead`), what a call
returns (`GenerationOutput`, `StreamChunk`) and the errors beyond ValueError (`ModelLoadError`,
`SessionBusyError`, `ModelNotPulledError`). The engine's own option structs stay in `pylookahead._core`.
Tools built on the library (benchmarks, datasets, pulling demo models) are in `pylookahead.tools`.
"""

from __future__ import annotations

# libtorch's shared libraries must be loaded before the extension that links them.
import torch  # noqa: F401

from ._core import (  # noqa: E402
    AutoLookahead,
    LookaheadConfig,
    ModelLoadError,
    SessionBusyError,
    __version__,
)
from .catalog import ModelNotPulledError  # noqa: E402
from .session import GenerationOutput, Model, Session, StreamChunk  # noqa: E402

__all__ = [
    "AutoLookahead",
    "GenerationOutput",
    "LookaheadConfig",
    "Model",
    "ModelLoadError",
    "ModelNotPulledError",
    "Session",
    "SessionBusyError",
    "StreamChunk",
    "__version__",
]
