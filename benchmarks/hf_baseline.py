"""Hugging Face `transformers` baselines for the benchmarks: plain greedy and prompt-lookup decoding.

Both run batch 1 on CPU (or wherever the model is placed), from the same prompt token ids the engine gets,
and time only `generate` (model loading and one warm-up call are excluded). Each returns one dict per
prompt::

    {"token_ids": [...new tokens...], "seconds": float, "num_new_tokens": int, "tokens_per_second": float,
     "prompt_length": int}

`eos_token_ids=None` uses the checkpoint's generation_config (so generation can stop early, as the engine
does with the same stop ids); pass `()` to always generate exactly `max_new_tokens`.

Usage as a smoke test::

    python benchmarks/hf_baseline.py --model DIR --prompt "def fib(n):" --max-new-tokens 32 --threads 2
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

__all__ = ["hf_greedy", "hf_prompt_lookup", "load_hf_model"]

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "float64": torch.float64}


def _torch_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {sorted(_DTYPES)} (got {dtype!r})")
    return _DTYPES[dtype]


@functools.lru_cache(maxsize=1)
def _load_cached(model_dir: str, dtype: torch.dtype) -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).eval()


def load_hf_model(model_dir: str | Path, dtype: str | torch.dtype = "float32") -> Any:
    """Load (or reuse the last loaded) transformers model; greedy and prompt-lookup runs share one copy."""
    return _load_cached(str(Path(model_dir).resolve()), _torch_dtype(dtype))


def _generation_config(model: Any, max_new_tokens: int, eos_token_ids: Sequence[int] | None, **extra: Any) -> Any:
    from transformers import GenerationConfig

    if eos_token_ids is None:
        eos = model.generation_config.eos_token_id
    else:
        eos = list(eos_token_ids) or None
    pad = model.generation_config.pad_token_id
    if pad is None:
        pad = eos[0] if isinstance(eos, list) and eos else eos if eos is not None else 0
    return GenerationConfig(
        do_sample=False, num_beams=1, use_cache=True, max_new_tokens=max_new_tokens,
        eos_token_id=eos, pad_token_id=pad, **extra,
    )  # fmt: skip


def _run(
    model_dir: str | Path,
    prompts_ids: Sequence[Sequence[int]],
    max_new_tokens: int,
    dtype: str | torch.dtype,
    threads: int | None,
    eos_token_ids: Sequence[int] | None,
    warmup: bool,
    **extra: Any,
) -> list[dict[str, Any]]:
    if threads is not None:
        torch.set_num_threads(threads)
    model = load_hf_model(model_dir, dtype)
    device = next(model.parameters()).device
    config = _generation_config(model, max_new_tokens, eos_token_ids, **extra)

    def generate(ids: Sequence[int], config: Any) -> tuple[list[int], float]:
        input_ids = torch.tensor([list(ids)], dtype=torch.long, device=device)  # [1, L]
        attention_mask = torch.ones_like(input_ids)
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.inference_mode():
            output = model.generate(input_ids, attention_mask=attention_mask, generation_config=config)
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        return output[0, input_ids.shape[1] :].tolist(), seconds

    if warmup and prompts_ids:
        generate(prompts_ids[0], _generation_config(model, min(8, max_new_tokens), eos_token_ids, **extra))

    results = []
    for ids in prompts_ids:
        if not ids:
            raise ValueError("every prompt needs at least one token")
        token_ids, seconds = generate(ids, config)
        results.append({
            "token_ids": token_ids,
            "seconds": seconds,
            "num_new_tokens": len(token_ids),
            "tokens_per_second": len(token_ids) / seconds if seconds > 0 else float("inf"),
            "prompt_length": len(ids),
        })  # fmt: skip
    return results


def hf_greedy(
    model_dir: str | Path,
    prompts_ids: Sequence[Sequence[int]],
    max_new_tokens: int,
    dtype: str | torch.dtype = "float32",
    threads: int | None = None,
    *,
    eos_token_ids: Sequence[int] | None = None,
    warmup: bool = True,
) -> list[dict[str, Any]]:
    """Time transformers greedy decoding (do_sample=False, KV cache on) for each prompt; see module doc."""
    return _run(model_dir, prompts_ids, max_new_tokens, dtype, threads, eos_token_ids, warmup)


def hf_prompt_lookup(
    model_dir: str | Path,
    prompts_ids: Sequence[Sequence[int]],
    max_new_tokens: int,
    dtype: str | torch.dtype = "float32",
    threads: int | None = None,
    *,
    prompt_lookup_num_tokens: int = 10,
    max_matching_ngram_size: int | None = None,
    eos_token_ids: Sequence[int] | None = None,
    warmup: bool = True,
) -> list[dict[str, Any]]:
    """Time transformers prompt-lookup decoding (greedy, drafts copied from the prompt); see module doc.

    `prompt_lookup_num_tokens` is the draft length; `max_matching_ngram_size` the longest n-gram matched
    (transformers' default, 2, when None).
    """
    extra: dict[str, Any] = {"prompt_lookup_num_tokens": prompt_lookup_num_tokens}
    if max_matching_ngram_size is not None:
        extra["max_matching_ngram_size"] = max_matching_ngram_size
    return _run(model_dir, prompts_ids, max_new_tokens, dtype, threads, eos_token_ids, warmup, **extra)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="checkpoint directory (config.json + safetensors)")
    parser.add_argument("--prompt", action="append", required=True, help="prompt text (repeatable)")
    parser.add_argument("--chat", action="store_true", help="wrap each prompt in the chat template")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--dtype", default="float32", choices=sorted(_DTYPES))
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--prompt-lookup", type=int, default=0, help="also run prompt lookup with this draft length")
    args = parser.parse_args(argv)

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    if args.chat:
        prompts = [
            list(tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                               tokenize=True, return_dict=False))
            for p in args.prompt
        ]  # fmt: skip
    else:
        prompts = [tokenizer(p)["input_ids"] for p in args.prompt]

    runs = {"greedy": hf_greedy(args.model, prompts, args.max_new_tokens, args.dtype, args.threads)}
    if args.prompt_lookup:
        runs["prompt_lookup"] = hf_prompt_lookup(
            args.model, prompts, args.max_new_tokens, args.dtype, args.threads,
            prompt_lookup_num_tokens=args.prompt_lookup,
        )  # fmt: skip
    for method, results in runs.items():
        for prompt_index, result in enumerate(results):
            summary = {k: v for k, v in result.items() if k != "token_ids"}
            summary["text"] = tokenizer.decode(result["token_ids"])
            print(json.dumps({"method": method, "prompt": prompt_index, **summary}, ensure_ascii=False))


if __name__ == "__main__":
    main()
