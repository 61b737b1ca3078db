"""End to end on a GPU with real weights: greedy vs lookahead tok/s and tokens per step (docs/benchmarks.md).

The GPU machine has no network and takes at most 64 MiB of files per call, so the inputs are made here:
  1. `python benchmarks/gpu_e2e.py prompts --model smollm2-135m-instruct --out build/gpu-e2e/prompts.json`
     tokenizes HumanEval (raw completion prompts) and MT-Bench first turns (chat template), as
     `pylookahead bench` does, and records the model's end ids;
  2. the GGUF file travels in pieces of at most 60 MiB (`split -b 60M`), joined there;
  3. there: `python benchmarks/gpu_e2e.py run --gguf FILE --prompts prompts.json --out result.json` loads the
     GGUF through the engine (its Q4_1 / Q8_0 blocks dequantized to bfloat16 on the GPU: quantized kernels are
     CPU-only) and runs, per prompt, greedy and each lookahead configuration on one Session (cuda_step_rows 64;
     a fresh n-gram pool per prompt), checking every output against greedy. It also runs greedy on a Session
     with cuda_step_rows 1 (the fastest greedy step; its bfloat16 output may differ from the exact 64-row
     greedy, and how often is recorded).
Speed: median of per-prompt tok/s (new tokens / wall time of the call, prefill included) and the ratio of totals.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

CONFIGS = [(0, 4, 2), (2, 3, 2), (4, 4, 4), (8, 4, 8), (6, 5, 6), (10, 4, 10)]


def make_prompts(args: argparse.Namespace) -> int:
    from pylookahead import Session
    from pylookahead.tools.bench import build_prompts

    session = Session(args.model)
    out = {"model": args.model, "eos_token_ids": list(session.model.info.eos_token_ids), "datasets": {}}
    for dataset in ("humaneval", "mtbench"):
        prompts, info = build_prompts(dataset, session.tokenizer, args.limit, "first")
        out["datasets"][dataset] = {"info": info, "prompts": [{"id": p.id, "ids": p.ids} for p in prompts]}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out) + "\n")
    print("wrote", args.out, {k: len(v["prompts"]) for k, v in out["datasets"].items()})
    return 0


def run(args: argparse.Namespace) -> int:
    import torch

    from pylookahead import _core
    from pylookahead.tools.bench import script_result_header

    data = json.loads(Path(args.prompts).read_text())
    engine = _core.EngineConfig()
    engine.device, engine.dtype = args.device, "bfloat16"
    t0 = time.perf_counter()
    model = _core.Model(args.gguf, engine)
    load_s = time.perf_counter() - t0

    def session(rows: int):
        config = _core.SessionConfig()
        config.cuda_step_rows = rows
        config.kv_capacity = 2048
        return _core.Session(model, config)

    def gen(s, ids, lookahead):
        g = _core.GenerationConfig()
        g.max_new_tokens = args.max_new_tokens
        t = time.perf_counter()
        r = s.generate(ids, g, lookahead, None)
        return r, time.perf_counter() - t

    methods = ["greedy", "greedy[rows=1]"] + [f"lookahead[{w},{n},{g}]" for w, n, g in CONFIGS] + ["lookahead[auto]"]
    looks = {f"lookahead[{w},{n},{g}]": _core.LookaheadConfig(window_size=w, ngram_size=n, verification_set_size=g)
             for w, n, g in CONFIGS}  # fmt: skip
    looks["lookahead[auto]"] = "auto"
    main_s, fast_s = session(64), session(1)
    # Warm-up: graph capture of both sessions and auto's step-cost calibration.
    first = data["datasets"]["humaneval"]["prompts"][0]["ids"]
    gen(main_s, first, None)
    gen(fast_s, first, None)
    gen(main_s, first, "auto")
    result = script_result_header("gpu_e2e", "benchmarks/gpu_e2e.py", None)
    if args.device.startswith("cuda"):
        result["gpu"] = {"name": torch.cuda.get_device_name(), "torch_cuda": torch.version.cuda}
    result["model"] = {"gguf": Path(args.gguf).name, "load_s": load_s, "info_device": model.info.device,
                       "dtype": "bfloat16", "weight_notes": list(model.info.weight_notes)}  # fmt: skip
    result["settings"] = {"max_new_tokens": args.max_new_tokens, "cuda_step_rows": 64, "fresh_pool_per_prompt": True}
    result["datasets"] = {}
    for name, ds in data["datasets"].items():
        rows = {m: [] for m in methods}
        for p in ds["prompts"][: args.limit]:
            base, base_s = gen(main_s, p["ids"], None)
            rows["greedy"].append((base, base_s, True))
            fast, fast_t = gen(fast_s, p["ids"], None)
            rows["greedy[rows=1]"].append((fast, fast_t, list(fast.token_ids) == list(base.token_ids)))
            for m, la in looks.items():
                r, t = gen(main_s, p["ids"], la)
                rows[m].append((r, t, list(r.token_ids) == list(base.token_ids)))
        summary = {}
        greedy_tok_s = [len(r.token_ids) / t for r, t, _ in rows["greedy"]]
        for m, runs in rows.items():
            tok_s = [len(r.token_ids) / t for r, t, _ in runs]
            new = sum(len(r.token_ids) for r, _, _ in runs)
            steps = sum(r.stats.steps for r, _, _ in runs)
            summary[m] = {
                "prompts": len(runs),
                "new_tokens": new,
                "seconds": sum(t for _, t, _ in runs),
                "tok_s_median": statistics.median(tok_s),
                "tok_s_total": new / sum(t for _, t, _ in runs),
                "steps": steps,
                "tokens_per_step": (new - len(runs)) / steps if steps else None,
                "equal_to_greedy": sum(1 for _, _, eq in runs if eq),
                "speedup_vs_greedy_paired_median": statistics.median(a / b for a, b in zip(tok_s, greedy_tok_s)),
            }
        tot = summary["greedy"]["tok_s_total"]
        for m in summary:
            summary[m]["speedup_vs_greedy_total"] = summary[m]["tok_s_total"] / tot
        result["datasets"][name] = {"info": ds["info"], "summary": summary}
        print(name, json.dumps({m: {k: round(v, 3) if isinstance(v, float) else v for k, v in s.items()}
                                for m, s in summary.items()}, indent=1), flush=True)  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print("wrote", args.out)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prompts", help="tokenize the datasets (on any machine)")
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--limit", type=int, default=40)
    p.add_argument("--out", required=True)
    r = sub.add_parser("run", help="run on the GPU")
    r.add_argument("--gguf", required=True)
    r.add_argument("--prompts", required=True)
    r.add_argument("--max-new-tokens", type=int, default=128)
    r.add_argument("--limit", type=int, default=None, help="first N prompts of each dataset")
    r.add_argument("--device", default="cuda", help="cuda (the benchmark) or cpu (a check of the script)")
    r.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    return make_prompts(args) if args.cmd == "prompts" else run(args)


if __name__ == "__main__":
    sys.exit(main())
