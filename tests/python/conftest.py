"""Shared fixtures: tiny random checkpoints (written once per session) and the real SmolLM2 checkpoint."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

TinyModelFactory = Callable[..., Path]


@pytest.fixture(scope="session")
def tiny_model_factory(tmp_path_factory: pytest.TempPathFactory) -> TinyModelFactory:
    """`factory(arch="llama", **write_tiny_model_kwargs) -> Path`, memoized per distinct arguments.

    Lets parametrized tests share checkpoints: the same arguments always return the same directory.
    """
    pytest.importorskip("transformers")
    from tiny_models import write_tiny_model

    cache: dict[str, Path] = {}

    def factory(arch: str = "llama", **kwargs: Any) -> Path:
        key = repr((arch, sorted(kwargs.items(), key=lambda item: item[0])))
        if key not in cache:
            cache[key] = write_tiny_model(tmp_path_factory.mktemp(f"tiny_{arch}"), arch, **kwargs)  # type: ignore[arg-type]
        return cache[key]

    return factory


@pytest.fixture(scope="session")
def tiny_llama(tiny_model_factory: TinyModelFactory) -> Path:
    """Tiny random Llama (float32, GQA 4/2 heads, untied, rope_parameters spelling) with a word tokenizer."""
    return tiny_model_factory("llama")


@pytest.fixture(scope="session")
def tiny_qwen2(tiny_model_factory: TinyModelFactory) -> Path:
    """Tiny random Qwen2 (float32, q/k/v biases, GQA 4/2 heads, untied) with a word tokenizer."""
    return tiny_model_factory("qwen2")


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """The converted SmolLM2-135M-Instruct checkpoint, pulled into PYLOOKAHEAD_CACHE on first use (~93 MB)."""
    pytest.importorskip("transformers")
    from pylookahead.catalog import DEFAULT_MODEL
    from pylookahead.tools.models import pull

    return pull(DEFAULT_MODEL, progress=False)


@pytest.fixture(scope="module")
def single_thread() -> Any:
    """Run the module's engine and transformers calls on one intra-op thread (restored afterwards).

    The CI machine has 2 cores shared with builds and other jobs; two OpenMP threads that lose their core spin
    in barriers and slow a forward pass down 20-40x, while one thread runs at a steady speed. Sessions created
    with num_threads=0 keep this setting.
    """
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
