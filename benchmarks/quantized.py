"""Quantized weights side by side: the engine in bf16, int8, int8-g32, int4, w8a8 and the GGUF's own formats, greedy and `auto`,
against llama.cpp (llama-cpp-python) plain and prompt-lookup decoding of the same GGUF, in one process.

Each engine variant is one `Model` (EngineConfig.quantize, docs/design.md "Quantized weights"); llama.cpp loads
the catalogue's GGUF (`pylookahead.tools.models.pull_gguf`). Rounds alternate the order of the variants. Every method
decodes the same HumanEval prompts (token ids from the checkpoint's tokenizer; llama.cpp gets the same ids) for
`--max-new-tokens` tokens or an end token, greedy (llama.cpp: temp 0). Decode speed is new tokens over decode time: the engine's `stats.decode_s`; llama.cpp's time from
its first to its last token, over the tokens after the first (its first token carries the prompt's prefill).

Reported per variant (medians over prompts and rounds): greedy and auto tok/s; `auto` over the variant's own
greedy; whether each auto output equals its greedy (it must: exact); the quality of the format against the bf16
engine (top-1 agreement of next-token predictions along the bf16 greedy text, teacher-forced; how many greedy
outputs equal bf16's, and the median index of the first divergence of the others); and for llama.cpp, how many
prompt-lookup outputs differ from its plain output. Needs llama-cpp-python for the llama.cpp rows
(`bash scripts/setup.sh "bench,convert,llama"` installs it; skipped with a note otherwise).

    python benchmarks/quantized.py --model smollm2-135m-instruct --threads 1 --prompts 6 --rounds 2 \\
        --out benchmarks/results/quantized/smollm2-135m-instruct-1t.json
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from statistics import median
from typing import Any

VARIANTS = {  # name -> (dtype, quantize, source): "checkpoint" = the converted safetensors, "gguf" = the file
    "bf16": ("bfloat16", "none", "checkpoint"),
    "int8": ("float32", "int8", "checkpoint"),  # one scale per output column
    "int8-g32": ("float32", "int8-g32", "checkpoint"),  # groups of 32 (GGUF Q8_0's layout)
    "int4": ("float32", "int4", "checkpoint"),
    "w8a8": ("float32", "w8a8", "checkpoint"),
    "gguf": ("float32", "auto", "gguf"),
}


def _llama_decode(llm: Any, ids: list[int], n: int, eos: set[int]) -> tuple[list[int], float]:
    """Greedy new tokens (up to n, or an end id, kept) and the decode seconds after the first token."""
    llm.reset()
    out: list[int] = []
    t_first = t_last = 0.0
    for token in llm.generate(ids, temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0, reset=True):
        now = time.perf_counter()
        if not out:
            t_first = now
        t_last = now
        out.append(int(token))
        if len(out) == n or token in eos:
            break
    return out, t_last - t_first


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct", help="catalogue name (its GGUF and checkpoint)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"comma list of {', '.join(VARIANTS)}")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=6, help="HumanEval prompts (spread over the set)")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--no-llama", action="store_true", help="skip llama-cpp-python")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    import numpy as np
    import torch

    import pylookahead
    from pylookahead import Model, Session
    from pylookahead.tools import bench
    from pylookahead.tools.models import pull, pull_gguf

    torch.set_num_threads(args.threads)
    checkpoint, gguf_path = pull(args.model, progress=False), pull_gguf(args.model, progress=False)
    names = args.variants.split(",")
    models = {}
    for name in names:
        dtype, quantize, source = VARIANTS[name]
        models[name] = Model(checkpoint if source == "checkpoint" else gguf_path, dtype=dtype, quantize=quantize,
                             num_threads=args.threads)  # fmt: skip
        info = models[name].info
        print(f"{name}: kernel {info.linear_kernel}, weights {info.quantize}, {info.weight_bytes / 2**20:.0f} MiB, "
              f"load {info.load_seconds:.2f} s, {list(info.weight_notes)}", flush=True)  # fmt: skip
    tokenizer = models[names[0]].tokenizer
    prompts, _ = bench.build_prompts("humaneval", tokenizer, args.prompts, "spread")
    n = args.max_new_tokens
    eos = set(models[names[0]].info.eos_token_ids)

    llama = None
    llama_note = None
    if not args.no_llama:
        try:
            import llama_cpp
            from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

            def load_llama(draft: Any = None) -> Any:
                return llama_cpp.Llama(str(gguf_path), n_ctx=2048, n_threads=args.threads, n_threads_batch=args.threads,
                                       n_batch=512, verbose=False, draft_model=draft)  # fmt: skip

            llama = {
                "llama.cpp": load_llama(),
                "llama.cpp-pld": load_llama(LlamaPromptLookupDecoding(num_pred_tokens=10)),
            }
            llama_note = f"llama-cpp-python {llama_cpp.__version__}"
        except ImportError as error:
            llama_note = f"llama-cpp-python not installed ({error})"
    print(llama_note or "llama.cpp skipped", flush=True)

    speeds: dict[str, dict[str, list[float]]] = {k: {"greedy": [], "auto": []} for k in names}
    exact = {k: True for k in names}
    greedy_ids: dict[str, dict[str, list[int]]] = {k: {} for k in names}
    llama_speeds: dict[str, list[float]] = {k: [] for k in (llama or {})}
    llama_ids: dict[str, dict[str, list[int]]] = {k: {} for k in (llama or {})}
    sessions = {k: Session(models[k]) for k in names}
    for rnd in range(args.rounds):
        order = names if rnd % 2 == 0 else names[::-1]
        for p in prompts:
            for k in order:
                s = sessions[k]
                g = s.generate(list(p.ids), max_new_tokens=n)
                a = s.generate(list(p.ids), max_new_tokens=n, lookahead="auto")
                speeds[k]["greedy"].append(g.stats.new_tokens / g.stats.decode_s)
                speeds[k]["auto"].append(a.stats.new_tokens / a.stats.decode_s)
                exact[k] = exact[k] and a.token_ids == g.token_ids
                greedy_ids[k][p.id] = g.token_ids
            for k, llm in (llama or {}).items():
                ids, seconds = _llama_decode(llm, list(p.ids), n, eos)
                llama_speeds[k].append((len(ids) - 1) / seconds)
                llama_ids[k][p.id] = ids
        line = ", ".join(f"{k} {median(speeds[k]['greedy']):.1f}/{median(speeds[k]['auto']):.1f}" for k in names)
        line += "".join(f", {k} {median(v):.1f}" for k, v in llama_speeds.items())
        print(f"round {rnd + 1}/{args.rounds} (greedy/auto tok/s): {line}", flush=True)

    # Quality against the bf16 engine: teacher-forced top-1 agreement along bf16's greedy text, and where the
    # greedy outputs first diverge.
    base = "bf16" if "bf16" in names else names[0]
    quality: dict[str, dict[str, Any]] = {}
    for k in names:
        agree = total = 0
        first_div = []
        for p in prompts:
            ref = greedy_ids[base][p.id]
            text = list(p.ids) + ref
            # (A prefill computes these rows with other kernels than decode steps: bf16 against its own
            # greedy text is the floor of this measure.)
            logits = sessions[k].prompt_logits(text)[len(p.ids) - 1 : -1]
            agree += int((np.argmax(logits, axis=1) == np.array(ref)).sum())
            total += len(ref)
            got = greedy_ids[k][p.id]
            div = next((i for i, (x, y) in enumerate(zip(ref, got)) if x != y), None)
            if div is None and len(got) != len(ref):
                div = min(len(got), len(ref))
            if div is not None:
                first_div.append(div)
        quality[k] = {
            "top1_agreement_with_bf16": agree / total,
            "greedy_identical_to_bf16": len(prompts) - len(first_div),
            "first_divergence_median": median(first_div) if first_div else None,
        }

    results: dict[str, Any] = {}
    for k in names:
        info = models[k].info
        g_med, a_med = median(speeds[k]["greedy"]), median(speeds[k]["auto"])
        results[k] = {
            "dtype": VARIANTS[k][0], "quantize": info.quantize, "source": VARIANTS[k][2],
            "linear_kernel": info.linear_kernel, "weight_notes": list(info.weight_notes),
            "weight_bytes": info.weight_bytes, "load_seconds": info.load_seconds,
            "greedy_tok_s_median": g_med, "auto_tok_s_median": a_med, "auto_vs_greedy": a_med / g_med,
            "auto_equals_greedy": exact[k], **quality[k],
        }  # fmt: skip
    for k, v in llama_speeds.items():
        results[k] = {"greedy_tok_s_median": median(v)}
    if llama:
        plain = llama_ids["llama.cpp"]
        results["llama.cpp-pld"]["outputs_differing_from_plain"] = sum(
            llama_ids["llama.cpp-pld"][p.id] != plain[p.id] for p in prompts
        )
        results["llama.cpp-pld"]["prompts"] = len(prompts)
    ratios: dict[str, float] = {}
    if "bf16" in results:
        for k in ("int8", "int8-g32", "int4", "w8a8", "gguf"):
            if k in results:
                ratios[f"{k}_greedy_vs_bf16_greedy"] = (
                    results[k]["greedy_tok_s_median"] / results["bf16"]["greedy_tok_s_median"]
                )
    if llama:
        lp = results["llama.cpp"]["greedy_tok_s_median"]
        for k in names:
            ratios[f"{k}_greedy_vs_llama_plain"] = results[k]["greedy_tok_s_median"] / lp
            ratios[f"{k}_auto_vs_llama_plain"] = results[k]["auto_tok_s_median"] / lp
        ratios["llama_pld_vs_llama_plain"] = results["llama.cpp-pld"]["greedy_tok_s_median"] / lp

    print(
        f"\n{args.model} | {args.threads} threads | {args.rounds} rounds x {len(prompts)} HumanEval prompts | {n} new tokens"
    )
    print(f"{'method':14s} {'MiB':>6s} {'greedy':>8s} {'auto':>8s} {'auto/g':>7s} exact  top1-vs-bf16  "
          f"same-as-bf16  first-div")  # fmt: skip
    for k in names:
        r = results[k]
        div = r["first_divergence_median"]
        print(f"{k:14s} {r['weight_bytes'] / 2**20:6.0f} {r['greedy_tok_s_median']:8.1f} {r['auto_tok_s_median']:8.1f} "
              f"{r['auto_vs_greedy']:7.2f} {str(r['auto_equals_greedy']):5s}  {r['top1_agreement_with_bf16']:12.3f}  "
              f"{r['greedy_identical_to_bf16']:5d}/{len(prompts):<6d}  {'-' if div is None else f'{div:9.1f}'}")  # fmt: skip
    for k in llama_speeds:
        extra = ""
        if k == "llama.cpp-pld":
            extra = f"   outputs differing from llama.cpp plain: {results[k]['outputs_differing_from_plain']}/{len(prompts)}"
        print(f"{k:14s} {'':6s} {results[k]['greedy_tok_s_median']:8.1f}{extra}")
    for k, v in ratios.items():
        print(f"  {k}: {v:.2f}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        out = {
            "kind": "quantized",
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "command": "python benchmarks/quantized.py " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])),
            "machine": bench.machine_info(),
            "versions": {"pylookahead": pylookahead.__version__, "torch": torch.__version__, "llama": llama_note},
            "settings": {"model": args.model, "threads": args.threads, "rounds": args.rounds,
                         "prompts": [p.id for p in prompts], "max_new_tokens": n, "gguf": gguf_path.name},
            "results": results,
            "ratios": ratios,
        }  # fmt: skip
        args.out.write_text(json.dumps(out, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0 if all(exact.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
