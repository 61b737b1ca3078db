"""How close batch-1 decoding runs to the memory bandwidth: the engine's and transformers' greedy against the
floor set by streaming the weights once per token.

A one-token decode step reads every linear weight (and the lm_head) once, so its time is at least
(bytes streamed) / (read bandwidth). This script measures the read bandwidth of this machine with the same
thread count (a multithreaded sum over a buffer far larger than the caches, the fastest streaming read torch
has), then, for each model and dtype, the engine's greedy tok/s and 1-token step (`Session.calibrate()`) and,
with --hf, transformers' greedy decode tok/s on the same prompts (`generate`, less the time of a 1-token
`generate`, i.e. the prefill), and reports each one's bytes per second as a fraction of the
ceiling: the probe's rate, or the fastest method's own where it streamed faster than the probe (a sum is not
the fastest read on every CPU). A method at 0.9 of the ceiling can gain at most 1/0.9 from a faster kernel, and
a ratio between two methods above (ceiling / slower method's rate) cannot be reached at that dtype here.

Bytes streamed per token: `ModelInfo.weight_bytes` less the embedding table (one row of it is read per
token), i.e. the packed linear weights, the lm_head and the norms. With the lm_head screen
(`ModelInfo.lm_head_screen`) the engine streams the screen's int8 copy and only a few exact lm_head columns, so
its count leaves the lm_head out; transformers' count keeps the lm_head and leaves the screen's copy out.

    python benchmarks/roofline.py --models smollm2-135m-instruct,qwen2.5-coder-0.5b-instruct \\
        --dtypes bfloat16,float32 --threads 2 --hf --out benchmarks/results/isa/roofline.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from statistics import median

_ELEM_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def read_bandwidth(threads: int, mib: int = 1024, repeats: int = 9) -> dict[str, float]:
    """Median and best GB/s of `buf.sum()` over `mib` MiB of float32 with `threads` threads."""
    import torch

    torch.set_num_threads(threads)
    buf = torch.ones(mib * 2**20 // 4, dtype=torch.float32)
    buf.sum()  # touch every page once
    rates = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        buf.sum()
        rates.append(buf.numel() * 4 / (time.perf_counter() - t0) / 1e9)
    return {"median_gb_s": median(rates), "best_gb_s": max(rates), "buffer_mib": mib}


def engine_entry(model_name: str, dtype: str, quantize: str | None, threads: int, prompts: list, max_new: int) -> dict:
    from pylookahead import Model, Session

    model = Model(model_name, dtype=dtype, num_threads=threads, quantize=quantize)
    info = model.info
    # The embedding table stays in `dtype`, quantized loads included (docs/design.md "Quantized weights").
    embed_bytes = info.vocab_size * info.hidden_size * _ELEM_BYTES[dtype]
    # The lm_head screen's copy (kQ8 records of 544 bytes per 16 columns and 32 inputs, an fp32 factor per
    # column) and the lm_head in dtype (untied: its packed copy; tied: the copy packed beside the embedding).
    v, h = info.vocab_size, info.hidden_size
    screen_bytes = -(-v // 16) * (h // 32) * 544 + 4 * v if info.lm_head_screen else 0
    lm_head_bytes = -(-v // 8) * 8 * h * _ELEM_BYTES[dtype]
    full_bytes = info.weight_bytes - embed_bytes - screen_bytes  # the whole lm_head, no screen
    session = Session(model)
    step_1 = dict(session.calibrate())[1]
    tok_s = []
    for p in prompts:
        out = session.generate(list(p.ids), max_new_tokens=max_new)
        tok_s.append(out.stats.new_tokens / out.stats.decode_s)
    return {
        "linear_kernel": info.linear_kernel,
        "cpu_isa": info.cpu_isa,
        "weight_bytes": info.weight_bytes,
        "lm_head_screen": info.lm_head_screen,
        "streamed_bytes": full_bytes - lm_head_bytes + screen_bytes if info.lm_head_screen else full_bytes,
        "full_lm_head_bytes": full_bytes,
        "step_1_token_s": step_1,
        "greedy_tok_s": tok_s,
        "greedy_tok_s_median": median(tok_s),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="smollm2-135m-instruct,qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--dtypes", default="bfloat16,float32", help="comma list of DTYPE or DTYPE:QUANTIZE")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=3, help="HumanEval prompts per entry")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--hf", action="store_true", help="also transformers' greedy (plain dtypes only)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    import torch

    from pylookahead.catalog import resolve_model
    from pylookahead.tokenizer import TextTokenizer
    from pylookahead.tools import bench

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import hf_baseline

    torch.set_num_threads(args.threads)
    result = bench.script_result_header("roofline", "benchmarks/roofline.py", argv)
    result["settings"] = vars(args) | {"out": str(args.out) if args.out else None}
    bw = read_bandwidth(args.threads)
    result["read_bandwidth"] = bw
    print(f"read bandwidth, {args.threads} threads: median {bw['median_gb_s']:.1f} GB/s, best {bw['best_gb_s']:.1f}")
    entries = []
    for model_name in args.models.split(","):
        tokenizer = TextTokenizer.from_pretrained(resolve_model(model_name))
        prompts, _ = bench.build_prompts("humaneval", tokenizer, args.prompts, "spread")
        for spec in args.dtypes.split(","):
            dtype, _, quantize = spec.partition(":")
            e = {"model": model_name, "dtype": dtype, "quantize": quantize or None}
            e |= engine_entry(model_name, dtype, quantize or None, args.threads, prompts, args.max_new_tokens)
            e["engine_gb_s"] = e["streamed_bytes"] * e["greedy_tok_s_median"] / 1e9
            line = (f"{model_name} {spec}: {e['streamed_bytes'] / 2**20:.0f} MiB/token; engine ({e['linear_kernel']}) "
                    f"{e['greedy_tok_s_median']:.1f} tok/s = {e['engine_gb_s']:.1f} GB/s")  # fmt: skip
            if args.hf and not quantize:
                # Decode only, as for the engine: the time of a 1-token generate (prefill) is taken off.
                ids = [list(p.ids) for p in prompts]
                path = resolve_model(model_name)
                full = hf_baseline.hf_greedy(path, ids, args.max_new_tokens, dtype, args.threads)
                first = hf_baseline.hf_greedy(path, ids, 1, dtype, args.threads)
                e["hf_greedy_tok_s"] = [
                    (f["num_new_tokens"] - 1) / (f["seconds"] - p["seconds"]) for f, p in zip(full, first)
                ]
                e["hf_greedy_tok_s_median"] = median(e["hf_greedy_tok_s"])
                e["hf_gb_s"] = e["full_lm_head_bytes"] * e["hf_greedy_tok_s_median"] / 1e9
                e["engine_over_hf"] = e["greedy_tok_s_median"] / e["hf_greedy_tok_s_median"]
                line += (f"; transformers {e['hf_greedy_tok_s_median']:.1f} tok/s = {e['hf_gb_s']:.1f} GB/s "
                         f"(engine / transformers {e['engine_over_hf']:.2f}x)")  # fmt: skip
            print(line, flush=True)
            entries.append(e)
    # The ceiling: the probe's rate or, where a method streamed faster than the probe read, that method's.
    ceiling = max([bw["median_gb_s"]] + [e["engine_gb_s"] for e in entries])
    result["ceiling_gb_s"] = ceiling
    print(f"ceiling {ceiling:.1f} GB/s (probe {bw['median_gb_s']:.1f})")
    for e in entries:
        e["engine_of_ceiling"] = e["engine_gb_s"] / ceiling
        line = f"{e['model']} {e['dtype']}{':' + e['quantize'] if e['quantize'] else ''}: engine {e['engine_of_ceiling']:.2f}"
        if "hf_gb_s" in e:
            e["hf_of_ceiling"] = e["hf_gb_s"] / ceiling
            # The engine's fastest possible tok/s (its bytes at the ceiling) over transformers' measured tok/s.
            e["engine_over_hf_bound"] = ceiling * 1e9 / e["streamed_bytes"] / e["hf_greedy_tok_s_median"]
            line += (
                f", transformers {e['hf_of_ceiling']:.2f} of the ceiling: engine / transformers "
                f"{e['engine_over_hf']:.2f}x of at most {e['engine_over_hf_bound']:.2f}x"
            )
        print(line)
    result["entries"] = entries
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
