"""`pylookahead bench`: the engine's greedy and lookahead decoding side by side with transformers, in one process.

For one model, dtype and prompt set, every selected method generates for every prompt, **interleaved per
prompt** (prompt 1: all methods, prompt 2: all methods, ...; the order of the methods rotates by one from prompt
to prompt), after one untimed warm-up generation per method. Interleaving spreads machine noise (other jobs,
frequency changes) over all methods instead of letting it hit one method's block of prompts.

Methods (``--methods``):

``greedy``            the engine's greedy decoding; the **reference** for output equality and speedups (always run)
``lookahead``         the engine's Lookahead Decoding, once per ``--config W,N,G`` (or ``--config auto`` where the
                      installed pylookahead accepts ``lookahead="auto"``; skipped with a warning otherwise)
``hf-greedy``         transformers ``generate(do_sample=False)`` on the same checkpoint, dtype and threads
``hf-prompt-lookup``  transformers prompt-lookup decoding (``prompt_lookup_num_tokens``)

Every method is timed the same way: ``time.perf_counter`` around the ``generate`` call, prompt token ids already
prepared (the engine's own ``prefill_s``/``decode_s`` are recorded too). Per method the summary has tok/s (median
over prompts, and total = sum of tokens / sum of seconds), the speedup over greedy three ways (ratio of the
medians, of the totals, and the median over prompts of the per-prompt ratio, "paired"), steps, the compression
ratio (tokens per forward pass after the first: ``(new_tokens - 1) / steps``), the merged accepted-length
histogram, the median time per step, and how many outputs equal the engine's greedy output token for token.
Lookahead must always equal it (a mismatch is an engine bug: it is printed at once and the run exits with status
1); for transformers the count is reported (bfloat16 kernels differ, so near-ties may flip).

For transformers methods, steps and per-step times come from a streamer that records when each group of tokens
is emitted (one group per forward pass, the prompt's first). Its cost is a host copy of a few ints per step.

Datasets (``--dataset``): ``mtbench`` (first turns, chat template), ``mtbench-turn2`` (second turns, after the
engine's greedy answer to the first turn, untimed), ``humaneval`` (raw completion prompts, no chat template: the
paper's setting), ``humaneval-chat`` (the same problems asked in a chat message, for instruct models), or a
``.jsonl`` file whose lines are ``{"prompt": TEXT}`` (encoded as is), ``{"chat": TEXT}`` (one user message in the
chat template), ``{"messages": [...]}`` or ``{"token_ids": [...]}``, each with an optional ``"id"``.

The JSON written to ``--out`` is described by `SCHEMA_VERSION` and the README's benchmark section; in short::

    {"schema_version", "kind": "bench"|"sweep", "created", "command", "argv", "machine": {...},
     "settings": {...}, "dataset": {...}, "methods": {name: summary}, "skipped_methods": {name: reason},
     "prompts": [{"index", "id", "prompt_tokens", "order", "results": {name: record}}], "interrupted"}
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import hashlib
import itertools
import json
import math
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "ALL_METHODS",
    "SCHEMA_VERSION",
    "add_arguments",
    "build_parser",
    "main",
    "parse_config",
    "run_benchmark",
    "run_from_args",
]

SCHEMA_VERSION = 1
ALL_METHODS = ("greedy", "lookahead", "hf-greedy", "hf-prompt-lookup")
BUILTIN_DATASETS = ("mtbench", "mtbench-turn2", "humaneval", "humaneval-chat")
_DTYPES = ("float32", "bfloat16", "float16", "float64")
# --pool: which pools every engine lookahead config runs with (False: fresh per prompt, True: kept).
_POOL_MODES = {"fresh": (False,), "kept": (True,), "both": (False, True)}


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------------------------------
# arguments


def parse_config(text: str) -> tuple[int, int, int] | str:
    """``"W,N,G"`` -> (W, N, G) (validated by `LookaheadConfig`), or ``"auto"``. Raises ValueError."""
    from .. import LookaheadConfig

    text = text.strip().lower()
    if text == "auto":
        return "auto"
    parts = [p.strip() for p in text.replace("x", ",").split(",")]
    if len(parts) != 3 or not all(p.lstrip("-").isdigit() for p in parts):
        raise ValueError(f"--config must be 'W,N,G' (three integers) or 'auto' (got {text!r})")
    w, n, g = (int(p) for p in parts)
    LookaheadConfig(window_size=w, ngram_size=n, verification_set_size=g)  # raises ValueError naming the rule
    return (w, n, g)


def _parse_methods(text: str) -> list[str]:
    methods = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in methods if m not in ALL_METHODS]
    if unknown or not methods:
        raise ValueError(f"--methods must be a comma-separated subset of {', '.join(ALL_METHODS)} (got {text!r})")
    if "greedy" not in methods:
        _log(
            "note: adding 'greedy' to --methods: the engine's greedy output is the reference for equality and speedups"
        )
        methods.insert(0, "greedy")
    return list(dict.fromkeys(methods))


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The benchmark's options, shared by `pylookahead bench`, benchmarks/bench_generate.py and sweep.py."""
    p.add_argument("--model", default="smollm2-135m-instruct", help="catalogue name or checkpoint directory")
    p.add_argument("--dtype", default="bfloat16", choices=_DTYPES)
    p.add_argument("--device", default="cpu")
    p.add_argument(
        "--quantize",
        default="auto",
        choices=["auto", "none", "int8", "int8-g32", "int4", "w8a8"],
        help="the engine's linear-layer formats (EngineConfig.quantize; transformers keeps --dtype)",
    )
    p.add_argument("--threads", type=int, default=0, help="CPU threads for every method (0: torch's default)")
    p.add_argument(
        "--dataset", default="mtbench",
        help=f"{' | '.join(BUILTIN_DATASETS)} | PATH.jsonl (lines: prompt / chat / messages / token_ids)",
    )  # fmt: skip
    p.add_argument("--limit", type=int, default=None, help="use this many prompts (default: all)")
    p.add_argument(
        "--select", default="spread", choices=["spread", "first"],
        help="which prompts --limit keeps: evenly spaced over the set (covers MT-Bench's categories) or the first",
    )  # fmt: skip
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument(
        "--config", action="append", default=None, metavar="W,N,G|auto",
        help="lookahead config (repeatable); default: LookaheadConfig()'s defaults",
    )  # fmt: skip
    p.add_argument(
        "--pool", default="fresh", choices=list(_POOL_MODES),
        help="engine lookahead's n-gram pool: fresh per prompt (default), kept across the run's prompts in "
        "dataset order, as a service's Session would keep it (keep_pool=True; method names get '+pool'), or both "
        "side by side",
    )  # fmt: skip
    p.add_argument(
        "--methods", default=",".join(ALL_METHODS),
        help=f"comma-separated subset of {','.join(ALL_METHODS)} (greedy is always run: it is the reference)",
    )  # fmt: skip
    p.add_argument("--prompt-lookup-num-tokens", type=int, default=10, help="hf-prompt-lookup draft length")
    p.add_argument(
        "--max-matching-ngram-size", type=int, default=None, help="hf-prompt-lookup n-gram size (transformers: 2)"
    )
    p.add_argument("--warmup-tokens", type=int, default=16, help="tokens of the untimed warm-up per method")
    p.add_argument(
        "--turn1-max-new-tokens", type=int, default=None,
        help="mtbench-turn2: length of the greedy first answer (default: --max-new-tokens)",
    )  # fmt: skip
    p.add_argument("--kv-capacity", type=int, default=0, help="engine KV cache rows (0: the engine's default)")
    p.add_argument(
        "--out", default=None,
        help="JSON output (default: benchmarks/results/<model>-<dtype>-<dataset>-<date>.json)",
    )  # fmt: skip
    p.add_argument("--save-token-ids", action="store_true", help="store every method's token ids, not only greedy's")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def build_parser(prog: str = "pylookahead bench") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    add_arguments(p)
    return p


# ----------------------------------------------------------------------------------------------------------------
# machine / provenance


# The /proc/cpuinfo flags that decide which kernels run (x86-64: SIMD levels; aarch64: its "Features").
_ISA_FLAGS = {"sse4_2", "fma", "f16c", "bmi2", "asimd", "asimdhp", "sve", "sve2", "bf16", "i8mm"}
# Environment variables that cap the ISA of the engine, oneDNN and ATen (docs/design.md).
_ISA_ENV = ("PYLOOKAHEAD_CPU_ISA", "ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY")


def _cpu_info() -> dict[str, Any]:
    info: dict[str, Any] = {"cpu_model": platform.processor() or platform.machine()}
    physical: set[tuple[str, str]] = set()
    try:
        current: dict[str, str] = {}
        for line in Path("/proc/cpuinfo").read_text().splitlines() + [""]:
            if not line.strip():
                if "core id" in current:
                    physical.add((current.get("physical id", "0"), current["core id"]))
                current = {}
                continue
            key, _, value = line.partition(":")
            current[key.strip()] = value.strip()
            if key.strip() == "model name":
                info["cpu_model"] = value.strip()
            if key.strip() in ("flags", "Features") and "cpu_flags" not in info:
                info["cpu_flags"] = sorted(f for f in value.split() if f in _ISA_FLAGS or f.startswith(("avx", "amx")))
    except OSError:
        pass
    info["logical_cpus"] = os.cpu_count()
    info["physical_cores"] = len(physical) or None
    try:
        info["cpus_available"] = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        info["cpus_available"] = os.cpu_count()
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                info["memory_gib"] = round(int(line.split()[1]) / 2**20, 1)
    except (OSError, ValueError, IndexError):
        pass
    return info


def _git_info() -> dict[str, Any]:
    # The checkout this package was built from (a source tree) or, for an installed package, the one the
    # benchmark runs in (benchmarks/ scripts run from the repository root).
    starts = [Path(__file__).resolve().parent, Path.cwd().resolve()]
    roots = [d for start in starts for d in (start, *start.parents) if (d / ".git").exists()]
    if not roots:
        return {"commit": None, "dirty": None}
    root = roots[0]

    def git(*cmd: str) -> str | None:
        try:
            r = subprocess.run(["git", "-C", str(root), *cmd], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return r.stdout.strip() if r.returncode == 0 else None

    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": git("rev-parse", "HEAD"), "dirty": None if status is None else bool(status)}


def _load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def machine_info() -> dict[str, Any]:
    import torch

    from .. import __version__

    info = _cpu_info()
    info.update({
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch_version": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "pylookahead_version": __version__,
        "git": _git_info(),
        "load_average_start": _load_average(),
        "isa_env": {k: os.environ[k] for k in _ISA_ENV if k in os.environ},
        "aten_cpu_capability": torch.backends.cpu.get_cpu_capability(),
    })  # fmt: skip
    try:
        import transformers

        info["transformers_version"] = transformers.__version__
    except ImportError:
        info["transformers_version"] = None
    return info


def script_result_header(kind: str, script: str, argv: Sequence[str] | None) -> dict[str, Any]:
    """The fields every benchmarks/*.py result file starts with: its kind, when, the command that made it (`script`
    as run from the repository root, then `argv`, default this process's arguments), the machine and the versions."""
    import torch

    from .. import __version__

    args = list(sys.argv[1:] if argv is None else argv)
    return {
        "kind": kind,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join(["python", script, *args]),
        "machine": machine_info(),
        "versions": {"pylookahead": __version__, "torch": torch.__version__},
    }


# ----------------------------------------------------------------------------------------------------------------
# prompts


@dataclass
class BenchPrompt:
    id: str
    ids: list[int]
    meta: dict[str, Any] = field(default_factory=dict)


def _select(items: list[Any], limit: int | None, how: str) -> list[Any]:
    if limit is None or limit >= len(items):
        return list(items)
    if limit < 1:
        raise ValueError(f"--limit must be >= 1 (got {limit})")
    if how == "first":
        return items[:limit]
    # Evenly spaced, deterministic: index floor(i * n / limit) (MT-Bench is sorted by category, 10 each).
    return [items[(i * len(items)) // limit] for i in range(limit)]


def _need_tokenizer(tokenizer: Any, dataset: str) -> Any:
    if tokenizer is None:
        raise ValueError(f"dataset {dataset!r} needs the checkpoint's tokenizer.json (none found)")
    return tokenizer


def _jsonl_prompts(path: Path, tokenizer: Any) -> list[BenchPrompt]:
    if not path.is_file():
        raise FileNotFoundError(
            f"--dataset {str(path)!r} is neither a built-in dataset ({', '.join(BUILTIN_DATASETS)}) nor a file"
        )
    prompts = []
    for line_no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{line_no}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{where}: not JSON: {error}") from error
        if isinstance(row, str):
            row = {"prompt": row}
        if not isinstance(row, dict):
            raise ValueError(f"{where}: expected an object or a string")
        pid = str(row.get("id", len(prompts)))
        if "token_ids" in row:
            ids = row["token_ids"]
            if not isinstance(ids, list) or not ids or not all(isinstance(t, int) and t >= 0 for t in ids):
                raise ValueError(f"{where}: token_ids must be a non-empty list of non-negative ints")
            prompts.append(BenchPrompt(pid, list(ids), {"style": "token_ids"}))
        elif "prompt" in row:
            ids = _need_tokenizer(tokenizer, str(path)).encode(str(row["prompt"]))
            prompts.append(BenchPrompt(pid, ids, {"style": "raw"}))
        elif "chat" in row or "messages" in row:
            messages = row.get("messages") or [{"role": "user", "content": str(row["chat"])}]
            ids = _need_tokenizer(tokenizer, str(path)).encode_chat(messages)
            prompts.append(BenchPrompt(pid, ids, {"style": "chat"}))
        else:
            raise ValueError(f"{where}: needs one of the keys prompt, chat, messages, token_ids")
        if not prompts[-1].ids:
            raise ValueError(f"{where}: the prompt encodes to no tokens")
    if not prompts:
        raise ValueError(f"{path}: no prompts")
    return prompts


def build_prompts(
    dataset: str,
    tokenizer: Any,
    limit: int | None,
    select: str,
    first_answer: Callable[[list[int]], list[int]] | None = None,
    progress: bool = False,
) -> tuple[list[BenchPrompt], dict[str, Any]]:
    """Prompts (token ids) and a description of the dataset for the JSON.

    `first_answer(ids) -> new token ids` generates the greedy answer to an MT-Bench first turn (mtbench-turn2).
    """
    from . import datasets as ds

    if dataset in ("mtbench", "mtbench-turn2"):
        tok = _need_tokenizer(tokenizer, dataset)
        questions = _select(ds.load_mtbench(), limit, select)
        info = {"source": ds.MTBENCH.requirement, "file": ds.MTBENCH.member, "sha256": ds.MTBENCH.sha256,
                "total": ds.MTBENCH.count, "prompt_style": "chat template, first user turn"}  # fmt: skip
        prompts = []
        if dataset == "mtbench":
            for q in questions:
                ids = tok.encode_chat(ds.mtbench_turn1_messages(q))
                prompts.append(BenchPrompt(str(q["question_id"]), ids, {"category": q["category"]}))
            return prompts, info
        if first_answer is None:
            raise ValueError("mtbench-turn2 needs a first_answer function")
        info["prompt_style"] = "chat template: user turn 1, the engine's greedy answer to it (untimed), user turn 2"
        from tqdm.auto import tqdm

        for q in tqdm(questions, desc="turn-1 answers (greedy)", disable=not progress, leave=False):
            answer_ids = first_answer(tok.encode_chat(ds.mtbench_turn1_messages(q)))
            answer = tok.decode(answer_ids, skip_special_tokens=True).strip()
            ids = tok.encode_chat(ds.mtbench_turn2_messages(q, answer))
            meta = {"category": q["category"], "turn1_answer_tokens": len(answer_ids), "turn1_answer": answer}
            prompts.append(BenchPrompt(str(q["question_id"]), ids, meta))
        return prompts, info
    if dataset in ("humaneval", "humaneval-chat"):
        tok = _need_tokenizer(tokenizer, dataset)
        problems = _select(ds.load_humaneval(), limit, select)
        info = {"source": ds.HUMANEVAL.requirement, "file": ds.HUMANEVAL.member, "sha256": ds.HUMANEVAL.sha256,
                "total": ds.HUMANEVAL.count}  # fmt: skip
        if dataset == "humaneval":
            info["prompt_style"] = "raw completion prompt (no chat template)"
            prompts = [BenchPrompt(p["task_id"], tok.encode(ds.humaneval_completion_prompt(p))) for p in problems]
        else:
            info["prompt_style"] = "chat template: 'Complete the following Python function ...' + the prompt"
            prompts = [BenchPrompt(p["task_id"], tok.encode_chat(ds.humaneval_chat_messages(p))) for p in problems]
        return prompts, info
    path = Path(dataset).expanduser()
    all_prompts = _jsonl_prompts(path, tokenizer)
    data = path.read_bytes()
    info = {"source": str(path.resolve()), "sha256": hashlib.sha256(data).hexdigest(), "total": len(all_prompts),
            "prompt_style": "jsonl (per line: prompt=raw text, chat/messages=chat template, token_ids)"}  # fmt: skip
    return _select(all_prompts, limit, select), info


def dataset_label(dataset: str) -> str:
    return dataset if dataset in BUILTIN_DATASETS else Path(dataset).stem


# ----------------------------------------------------------------------------------------------------------------
# methods


@dataclass
class RunRecord:
    """One timed generation."""

    token_ids: list[int]
    seconds: float
    steps: int  # forward passes after the first one
    first_pass_tokens: int  # tokens emitted by the first forward pass (prefill); 1 for the engine
    accept_histogram: list[int]  # [k] = steps that emitted k tokens
    step_times_s: list[float]
    stop_reason: str
    engine: dict[str, Any] = field(default_factory=dict)  # engine-only stats (prefill_s, decode_s, pool, ...)


class Method:
    name: str
    kind: str  # "engine" or "hf"
    info: dict[str, Any]

    def run(self, ids: list[int], max_new_tokens: int) -> RunRecord:
        raise NotImplementedError


_ENGINE_STAT_SKIP = {"accept_histogram", "step_times_s", "new_tokens", "steps"}


def _engine_stats(stats: Any) -> dict[str, Any]:
    """Every plain field of the engine's GenerationStats (future fields included), minus the bulky ones."""
    out: dict[str, Any] = {}
    for name in dir(stats):
        if name.startswith("_") or name in _ENGINE_STAT_SKIP:
            continue
        try:
            value = getattr(stats, name)
        except Exception:  # noqa: BLE001 - a property that cannot be read is just left out
            continue
        if callable(value):
            continue
        if name == "auto_decisions":
            out[name] = [_decision_json(d) for d in value]
        elif isinstance(value, (bool, int, float, str)) or value is None:
            out[name] = value
        elif isinstance(value, (list, tuple)) and all(isinstance(v, (int, float)) for v in value):
            out[name] = list(value)
        else:
            out[name] = repr(value)
    return out


def _decision_json(d: Any) -> dict[str, Any]:
    """One AutoDecision: from `step` on, `config` ("greedy" or "W,N,G"), why, and what was predicted or judged."""
    return {
        "step": d.step,
        "config": d.label,
        "reason": d.reason,
        "expected_tokens": d.expected_tokens,
        "predicted_speedup": d.predicted_speedup,
        "judged_speedup": d.judged_speedup,
    }


class EngineMethod(Method):
    kind = "engine"

    def __init__(self, name: str, session: Any, lookahead: Any, info: dict[str, Any], keep_pool: bool = False) -> None:
        self.name = name
        self.session = session
        self.lookahead = lookahead
        self.info = info
        self.keep_pool = keep_pool

    def run(self, ids: list[int], max_new_tokens: int) -> RunRecord:
        start = time.perf_counter()
        out = self.session.generate(
            ids, max_new_tokens=max_new_tokens, lookahead=self.lookahead, keep_pool=self.keep_pool
        )
        seconds = time.perf_counter() - start
        s = out.stats
        return RunRecord(
            token_ids=list(out.token_ids), seconds=seconds, steps=int(s.steps), first_pass_tokens=1,
            accept_histogram=[int(x) for x in s.accept_histogram], step_times_s=[float(t) for t in s.step_times_s],
            stop_reason=str(out.stop_reason), engine=_engine_stats(s),
        )  # fmt: skip


class _StepRecorder:
    """A transformers streamer that records how many tokens each forward pass emitted, and when."""

    def __init__(self) -> None:
        self.prompt_seen = False
        self.lengths: list[int] = []
        self.times: list[float] = []

    def put(self, value: Any) -> None:
        if not self.prompt_seen:  # generate() first puts the prompt
            self.prompt_seen = True
            return
        self.times.append(time.perf_counter())
        self.lengths.append(int(value.numel()))

    def end(self) -> None:
        pass


class HFMethod(Method):
    kind = "hf"

    def __init__(self, name: str, model: Any, eos_token_ids: Sequence[int], info: dict[str, Any], **extra: Any):
        self.name = name
        self.model = model
        self.eos = list(eos_token_ids)
        self.extra = extra
        self.info = info
        try:
            from transformers.generation.streamers import BaseStreamer

            self._recorder_cls = type("StepRecorder", (_StepRecorder, BaseStreamer), {})
        except ImportError:  # pragma: no cover - transformers without the streamer module
            self._recorder_cls = _StepRecorder

    def _config(self, max_new_tokens: int) -> Any:
        # As benchmarks/hf_baseline.py: greedy, KV cache on, the engine's end ids, pad = first end id.
        from transformers import GenerationConfig

        pad = self.model.generation_config.pad_token_id
        if pad is None:
            pad = self.eos[0] if self.eos else 0
        return GenerationConfig(
            do_sample=False, num_beams=1, use_cache=True, max_new_tokens=max_new_tokens,
            eos_token_id=self.eos or None, pad_token_id=pad, **self.extra,
        )  # fmt: skip

    def run(self, ids: list[int], max_new_tokens: int) -> RunRecord:
        import torch

        device = next(self.model.parameters()).device
        config = self._config(max_new_tokens)
        input_ids = torch.tensor([ids], dtype=torch.long, device=device)
        attention_mask = torch.ones_like(input_ids)
        recorder = self._recorder_cls()
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.inference_mode():
            output = self.model.generate(
                input_ids, attention_mask=attention_mask, generation_config=config, streamer=recorder
            )
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        token_ids = output[0, input_ids.shape[1] :].tolist()
        lengths = recorder.lengths or [len(token_ids)]
        histogram = [0] * (max(lengths[1:], default=1) + 1)
        for k in lengths[1:]:
            histogram[k] += 1
        step_times = [b - a for a, b in zip(recorder.times, recorder.times[1:])]
        stop = "end_token" if token_ids and token_ids[-1] in self.eos else "max_new_tokens"
        return RunRecord(
            token_ids=token_ids, seconds=seconds, steps=len(lengths) - 1, first_pass_tokens=lengths[0],
            accept_histogram=histogram, step_times_s=step_times, stop_reason=stop,
        )  # fmt: skip


def _load_hf_model(model_dir: Path, dtype: str, device: str) -> Any:
    try:
        import torch
        from transformers import AutoModelForCausalLM
        from transformers.utils import logging as hf_logging
    except ImportError as error:
        raise ValueError(
            f"the hf-* methods need transformers ({error}); install it with `pip install 'pylookahead[bench]'`"
        ) from error
    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype))
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()
    return model.to(device).eval()


def _auto_support_error(session: Any, ids: list[int]) -> str | None:
    """None if `session.generate(..., lookahead="auto")` works here, else why not."""
    try:
        session.generate(ids, max_new_tokens=2, lookahead="auto")
    except (ValueError, TypeError) as error:
        return f"this pylookahead does not accept lookahead='auto' ({error})"
    return None


# ----------------------------------------------------------------------------------------------------------------
# statistics


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b not in (None, 0) else None


def _first_mismatch(ref: Sequence[int], got: Sequence[int]) -> int | None:
    for i, (a, b) in enumerate(zip(ref, got)):
        if a != b:
            return i
    return None if len(ref) == len(got) else min(len(ref), len(got))


def _merge_histograms(histograms: Sequence[Sequence[int]]) -> list[int]:
    merged = [0] * max((len(h) for h in histograms), default=0)
    for h in histograms:
        for k, count in enumerate(h):
            merged[k] += count
    return merged


def _record_json(rec: RunRecord, equal: bool, first_mismatch: int | None, keep_ids: bool) -> dict[str, Any]:
    n = len(rec.token_ids)
    out: dict[str, Any] = {
        "new_tokens": n,
        "seconds": rec.seconds,
        "tok_s": n / rec.seconds if rec.seconds > 0 else None,
        "steps": rec.steps,
        "first_pass_tokens": rec.first_pass_tokens,
        "compression": (n - rec.first_pass_tokens) / rec.steps if rec.steps > 0 else None,
        "accept_histogram": rec.accept_histogram,
        "step_ms_median": _median([t * 1000 for t in rec.step_times_s]),
        "stop_reason": rec.stop_reason,
        "equals_greedy": equal,
        "first_mismatch": first_mismatch,
    }
    if rec.engine:
        out["engine"] = rec.engine
    if keep_ids or not equal:
        out["token_ids"] = rec.token_ids
    return out


def paired_speedups(records: Sequence[tuple[RunRecord, bool]], greedy: Sequence[tuple[RunRecord, bool]]) -> list[float]:
    """Per prompt, a method's tok/s over greedy's on the same prompt (the two ran next to each other, so a
    machine that speeds up or slows down over the run moves both). Their median compares each prompt with
    itself, where the ratio of the two medians compares the median prompt of one method with that of the other."""
    out = []
    for (rec, _), (ref, _) in zip(records, greedy, strict=True):
        if rec.seconds > 0 and ref.seconds > 0 and ref.token_ids:
            out.append((len(rec.token_ids) / rec.seconds) / (len(ref.token_ids) / ref.seconds))
    return out


def summarize(name: str, method_info: dict[str, Any], records: list[tuple[RunRecord, bool]]) -> dict[str, Any]:
    """Summary of one method over the prompts it ran (`records`: (record, equals engine greedy))."""
    tok_s = [len(r.token_ids) / r.seconds for r, _ in records if r.seconds > 0]
    tokens = sum(len(r.token_ids) for r, _ in records)
    seconds = sum(r.seconds for r, _ in records)
    steps = sum(r.steps for r, _ in records)
    after_first = sum(len(r.token_ids) - r.first_pass_tokens for r, _ in records)
    compressions = [(len(r.token_ids) - r.first_pass_tokens) / r.steps for r, _ in records if r.steps > 0]
    step_ms = [t * 1000 for r, _ in records for t in r.step_times_s]
    summary: dict[str, Any] = {
        **method_info,
        "prompts": len(records),
        "new_tokens": tokens,
        "seconds": seconds,
        "tok_s_median": _median(tok_s),
        "tok_s_total": tokens / seconds if seconds > 0 else None,
        "tok_s_mean": statistics.fmean(tok_s) if tok_s else None,
        "steps": steps,
        "compression": after_first / steps if steps > 0 else None,
        "compression_median": _median(compressions),
        "accept_histogram": _merge_histograms([r.accept_histogram for r, _ in records]),
        "step_ms_median": _median(step_ms),
        "step_ms_mean": statistics.fmean(step_ms) if step_ms else None,
        "equal_to_greedy": sum(1 for _, eq in records if eq),
        "mismatches": sum(1 for _, eq in records if not eq),
    }
    engine = [r.engine for r, _ in records if r.engine]
    decisions = [e["auto_decisions"] for e in engine if e.get("auto_decisions")]
    if decisions:  # auto: in how many generations it fell back to greedy, and ran a Jacobi window
        summary["auto_fallbacks"] = sum(1 for ds in decisions if any(d["reason"] == "fallback" for d in ds))
        summary["auto_windowed"] = sum(
            1 for ds in decisions if any(d["config"] != "greedy" and not d["config"].startswith("0,") for d in ds)
        )
    if engine:
        for key in ("prefill_s", "decode_s", "accepted_from_prompt", "accepted_from_window", "skipped_head_rows"):
            if all(isinstance(e.get(key), (int, float)) for e in engine):
                summary[key] = sum(e[key] for e in engine)
    return summary


# ----------------------------------------------------------------------------------------------------------------
# the run


def _default_out(model_label: str, dtype: str, dataset: str) -> Path:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("benchmarks") / "results" / f"{model_label}-{dtype}-{dataset_label(dataset)}-{stamp}.json"


def _model_label(model: str, path: Path) -> str:
    from ..catalog import get_entry

    try:
        return get_entry(model).name
    except ValueError:
        return path.name


def _lookahead_name(spec: tuple[int, int, int] | str) -> str:
    return "lookahead[auto]" if spec == "auto" else "lookahead[{},{},{}]".format(*spec)


def run_benchmark(
    args: argparse.Namespace, *, command: str | None = None, kind: str = "bench"
) -> tuple[dict[str, Any], int]:
    """Run the benchmark that `args` (see `add_arguments`) describes. Returns (result JSON, exit status).

    The status is 1 when any engine lookahead output differed from the engine's greedy output, else 0.
    """
    import torch

    from .. import LookaheadConfig
    from ..session import Model, Session

    if args.max_new_tokens < 1:
        raise ValueError(f"--max-new-tokens must be >= 1 (got {args.max_new_tokens})")
    if args.threads < 0:
        raise ValueError(f"--threads must be >= 0 (got {args.threads})")
    if args.dataset not in BUILTIN_DATASETS and not Path(args.dataset).expanduser().is_file():
        raise FileNotFoundError(
            f"--dataset {args.dataset!r} is neither a built-in dataset ({', '.join(BUILTIN_DATASETS)}) nor a file"
        )
    methods = _parse_methods(args.methods)
    specs = [parse_config(c) for c in (args.config or [])]
    if not specs:
        d = LookaheadConfig()
        specs = [(d.window_size, d.ngram_size, d.verification_set_size)]
    specs = list(dict.fromkeys(specs))
    progress = not args.no_progress
    created = _dt.datetime.now(_dt.timezone.utc).astimezone().isoformat(timespec="seconds")
    if command is None:
        command = shlex.join(sys.argv)

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    model = Model(args.model, device=args.device, dtype=args.dtype, num_threads=args.threads,
                  quantize=args.quantize)  # fmt: skip
    load_s = time.perf_counter() - t0
    model_label = _model_label(args.model, model.path)

    def new_session() -> Any:
        return Session(model, kv_capacity=args.kv_capacity)

    ref_session = new_session()

    def first_answer(ids: list[int]) -> list[int]:
        n = args.turn1_max_new_tokens or args.max_new_tokens
        return ref_session.generate(ids, max_new_tokens=n).token_ids

    prompts, dataset_info = build_prompts(
        args.dataset, model.tokenizer, args.limit, args.select, first_answer, progress
    )
    if not prompts:
        raise ValueError(f"dataset {args.dataset!r} gave no prompts")
    warmup_ids = list(reversed(prompts[0].ids))  # not a timed prompt: no cache or pool effect can carry over

    # Methods, in run order (rotated per prompt).
    runners: list[Method] = []
    skipped: dict[str, str] = {}
    runners.append(EngineMethod("greedy", ref_session, None, {"kind": "engine", "lookahead": None,
                                                             "tokens_per_step": 1}))  # fmt: skip
    if "lookahead" in methods:
        for spec, keep_pool in itertools.product(specs, _POOL_MODES[args.pool]):
            name = _lookahead_name(spec) + ("+pool" if keep_pool else "")
            session = new_session()
            if spec == "auto":
                reason = _auto_support_error(session, warmup_ids)
                if reason is not None:
                    _log(f"warning: skipping {name}: {reason}")
                    skipped[name] = reason
                    continue
                info = {"kind": "engine", "lookahead": "auto", "tokens_per_step": None, "keep_pool": keep_pool}
                runners.append(EngineMethod(name, session, "auto", info, keep_pool))
                continue
            w, n, g = spec
            cfg = LookaheadConfig(window_size=w, ngram_size=n, verification_set_size=g)
            info = {"kind": "engine", "lookahead": {"window_size": w, "ngram_size": n, "verification_set_size": g},
                    "tokens_per_step": cfg.tokens_per_step, "keep_pool": keep_pool}  # fmt: skip
            runners.append(EngineMethod(name, session, cfg, info, keep_pool))
    hf_load_s = None
    if "hf-greedy" in methods or "hf-prompt-lookup" in methods:
        t0 = time.perf_counter()
        hf_model = _load_hf_model(model.path, args.dtype, args.device)
        hf_load_s = time.perf_counter() - t0
        eos = list(model.info.eos_token_ids)
        if "hf-greedy" in methods:
            runners.append(
                HFMethod("hf-greedy", hf_model, eos, {"kind": "hf", "lookahead": None, "tokens_per_step": 1})
            )
        if "hf-prompt-lookup" in methods:
            extra: dict[str, Any] = {"prompt_lookup_num_tokens": args.prompt_lookup_num_tokens}
            if args.max_matching_ngram_size is not None:
                extra["max_matching_ngram_size"] = args.max_matching_ngram_size
            info = {"kind": "hf", "lookahead": None, "tokens_per_step": None, **extra}
            runners.append(HFMethod("hf-prompt-lookup", hf_model, eos, info, **extra))
    if args.threads > 0:
        torch.set_num_threads(args.threads)  # loading transformers must not change it

    # One untimed warm-up per method.
    warm_tokens = max(1, min(args.warmup_tokens, args.max_new_tokens))
    for m in runners:
        m.run(warmup_ids, warm_tokens)
        if isinstance(m, EngineMethod) and m.keep_pool:
            m.session.reset()  # a kept pool starts with the first timed prompt, not the warm-up

    machine = machine_info()
    load = machine.get("load_average_start")
    cpus = machine.get("cpus_available") or 1
    if load and load[0] > 0.5:
        _log(f"warning: the machine is busy (1-min load average {load[0]} on {cpus} CPUs): timings will be noisy; "
             "run benchmarks on an idle machine")  # fmt: skip
    records: dict[str, list[tuple[RunRecord, bool]]] = {m.name: [] for m in runners}
    prompt_json: list[dict[str, Any]] = []
    lookahead_mismatches: list[str] = []
    interrupted = False
    from tqdm.auto import tqdm

    bar = tqdm(total=len(prompts) * len(runners), desc=f"bench {model_label} {args.dtype}", unit="gen",
               disable=not progress, dynamic_ncols=True)  # fmt: skip
    try:
        for index, prompt in enumerate(prompts):
            shift = index % len(runners)
            order = runners[shift:] + runners[:shift]
            results: dict[str, RunRecord] = {}
            for m in order:
                bar.set_postfix_str(f"prompt {index + 1}/{len(prompts)} {m.name}")
                gc.collect()
                results[m.name] = m.run(prompt.ids, args.max_new_tokens)
                bar.update(1)
            ref = results["greedy"].token_ids
            per_method: dict[str, Any] = {}
            for m in runners:
                rec = results[m.name]
                mismatch = _first_mismatch(ref, rec.token_ids)
                equal = mismatch is None
                if not equal and m.kind == "engine":
                    got = rec.token_ids[mismatch] if mismatch < len(rec.token_ids) else "end"
                    want = ref[mismatch] if mismatch < len(ref) else "end"
                    msg = (f"MISMATCH: {m.name} differs from the engine's greedy output on prompt {prompt.id} "
                           f"at new token {mismatch} (greedy: {want}, {m.name}: {got})")  # fmt: skip
                    lookahead_mismatches.append(msg)
                    bar.write(msg, file=sys.stderr)
                records[m.name].append((rec, equal))
                keep = m.name == "greedy" or args.save_token_ids
                per_method[m.name] = _record_json(rec, equal, mismatch, keep)
            entry: dict[str, Any] = {"index": index, "id": prompt.id, "prompt_tokens": len(prompt.ids),
                                     "order": [m.name for m in order], "results": per_method}  # fmt: skip
            if prompt.meta:
                entry["meta"] = prompt.meta
            if model.tokenizer is not None:
                entry["greedy_text"] = model.tokenizer.decode(ref)
            prompt_json.append(entry)
    except KeyboardInterrupt:
        interrupted = True
        _log(f"interrupted after {len(prompt_json)} of {len(prompts)} prompts; writing what was measured")
    finally:
        bar.close()
    done = len(prompt_json)
    for name in records:
        records[name] = records[name][:done]

    summaries = {m.name: summarize(m.name, m.info, records[m.name]) for m in runners}
    greedy = summaries["greedy"]
    for name, s in summaries.items():
        s["speedup_vs_greedy"] = {
            "median": _ratio(s["tok_s_median"], greedy["tok_s_median"]),
            "total": _ratio(s["tok_s_total"], greedy["tok_s_total"]),
            "paired_median": _median(paired_speedups(records[name], records["greedy"])),
        }
    machine["load_average_end"] = _load_average()
    machine["torch_threads"] = torch.get_num_threads()

    result = {
        "schema_version": SCHEMA_VERSION,
        "kind": kind,
        "created": created,
        "command": command,
        "argv": list(sys.argv),
        "cwd": os.getcwd(),
        "machine": machine,
        "settings": {
            "model": model_label,
            "model_dir": str(model.path),
            "architecture": model.info.architecture,
            "linear_kernel": model.info.linear_kernel,
            "linear_kernel_skipped": list(model.info.linear_kernel_skipped),
            "cpu_isa": model.info.cpu_isa,
            "quantize": model.info.quantize,
            "weight_bytes": model.info.weight_bytes,
            "dtype": args.dtype,
            "device": args.device,
            "threads": args.threads,
            "max_new_tokens": args.max_new_tokens,
            "warmup_tokens": warm_tokens,
            "limit": args.limit,
            "select": args.select,
            "configs": ["auto" if s == "auto" else list(s) for s in specs],
            "pool": args.pool,
            "methods": [m.name for m in runners],
            "eos_token_ids": list(model.info.eos_token_ids),
            "model_load_s": load_s,
            "hf_model_load_s": hf_load_s,
            "timing": "time.perf_counter around each generate call; one untimed warm-up per method; "
            "methods interleaved per prompt, order rotated by one per prompt",
        },
        "dataset": {"name": dataset_label(args.dataset), "prompts": done, **dataset_info},
        "methods": summaries,
        "skipped_methods": skipped,
        "lookahead_mismatches": lookahead_mismatches,
        "prompts": prompt_json,
        "interrupted": interrupted,
    }
    status = 1 if lookahead_mismatches else 0
    return result, status


# ----------------------------------------------------------------------------------------------------------------
# output


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def format_table(result: dict[str, Any]) -> str:
    """A short human-readable table of the per-method summaries."""
    s = result["settings"]
    d = result["dataset"]
    lines = [
        f"{s['model']} {s['dtype']} | {d['name']} x {d['prompts']} prompts | {s['max_new_tokens']} new tokens max | "
        f"threads {result['machine']['torch_threads']} | {result['machine'].get('cpu_model')} | "
        f"kernel {s.get('linear_kernel', '?')}, ISA {s.get('cpu_isa', '?')}",
        f"{'method':<22} {'tok/s med':>9} {'tok/s tot':>9} {'x med':>6} {'x tot':>6} {'x pair':>6} {'steps':>7} "
        f"{'tok/step':>8} {'ms/step':>8} {'==greedy':>9}",
    ]
    for name, m in result["methods"].items():
        sp = m["speedup_vs_greedy"]
        lines.append(
            f"{name:<22} {_fmt(m['tok_s_median'], '9.2f')} {_fmt(m['tok_s_total'], '9.2f')} "
            f"{_fmt(sp['median'], '6.2f')} {_fmt(sp['total'], '6.2f')} {_fmt(sp.get('paired_median'), '6.2f')} "
            f"{m['steps']:>7d} "
            f"{_fmt(m['compression'], '8.2f')} {_fmt(m['step_ms_median'], '8.1f')} "
            f"{m['equal_to_greedy']:>4d}/{m['prompts']:<4d}"
        )
    for name, m in result["methods"].items():
        if m.get("lookahead") is not None:
            hist = m["accept_histogram"]
            lines.append(f"  {name} accepted-length histogram (k: steps): "
                         + ", ".join(f"{k}: {c}" for k, c in enumerate(hist) if k > 0 and c))  # fmt: skip
        if "auto_fallbacks" in m:
            lines.append(f"  {name}: fell back to greedy for a while in {m['auto_fallbacks']} of {m['prompts']} "
                         f"generations, ran a Jacobi window in {m['auto_windowed']}")  # fmt: skip
    for name, reason in result["skipped_methods"].items():
        lines.append(f"  skipped {name}: {reason}")
    if result["lookahead_mismatches"]:
        lines.append(f"!! {len(result['lookahead_mismatches'])} LOOKAHEAD OUTPUT(S) DIFFER FROM GREEDY !!")
        lines.extend("   " + msg for msg in result["lookahead_mismatches"])
    return "\n".join(lines)


def write_json(result: dict[str, Any], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def run_from_args(args: argparse.Namespace, *, command: str | None = None, kind: str = "bench") -> int:
    """Run, write the JSON, print the table; return the exit status (1 on a lookahead/greedy mismatch)."""
    result, status = run_benchmark(args, command=command, kind=kind)
    out = Path(args.out) if args.out else _default_out(result["settings"]["model"], args.dtype, args.dataset)
    write_json(result, out)
    print(format_table(result))
    print(f"wrote {out}")
    return status


def main(argv: Sequence[str] | None = None, *, prog: str = "pylookahead bench") -> int:
    args = build_parser(prog).parse_args(argv)
    command = None if argv is None else shlex.join([*prog.split(), *argv])
    return run_from_args(args, command=command)
