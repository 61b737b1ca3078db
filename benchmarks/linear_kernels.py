"""The linear-layer kernels side by side: step costs, and greedy / lookahead tokens per second.

Loads one checkpoint (bf16 unless --dtype) once per kernel (`Model(..., linear_kernel=K)`, docs/design.md "Exactness") and, in
rounds that alternate the kernels, measures (a) the step-cost table of a fresh session (`Session.calibrate()`:
seconds of one decode step of T tokens) and (b) greedy and lookahead generation on a few HumanEval prompts.
Reports medians over rounds, each kernel's costs relative to its own 1-token step (what lookahead's speedup
over greedy depends on) and the kernels' tokens/s against each other. Every generation's ids are compared
with the first kernel's greedy ids (the kernels round differently, so they may differ; each kernel's
lookahead must equal its own greedy).

    python benchmarks/linear_kernels.py --model qwen2.5-coder-0.5b-instruct --rounds 3 \\
        --out benchmarks/results/kernels/qwen2.5-coder-0.5b-instruct-bfloat16.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from statistics import median


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    parser.add_argument(
        "--kernels",
        default="bf16-avx512,avx2,onednn",
        help="comma list of EngineConfig.linear_kernel values, each optionally as DTYPE:KERNEL "
        "(e.g. bfloat16:avx2,float32:avx2 compares dtypes side by side)",
    )
    parser.add_argument("--dtype", default="bfloat16", help="dtype of the kernels given without one")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=3, help="HumanEval prompts generated per round")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--config", default="0,4,2", help="lookahead W,N,G generated beside greedy")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    import torch

    from pylookahead import LookaheadConfig, Model, Session
    from pylookahead.tools import bench

    torch.set_num_threads(args.threads)
    # Each entry "DTYPE:KERNEL" (or "KERNEL" in --dtype) is one loaded model, named by that string.
    kernels = args.kernels.split(",")
    specs = {k: (k.split(":", 1) if ":" in k else (args.dtype, k)) for k in kernels}
    w, n, g = (int(v) for v in args.config.split(","))
    lookahead = LookaheadConfig(window_size=w, ngram_size=n, verification_set_size=g)
    models = {k: Model(args.model, dtype=d, num_threads=args.threads, linear_kernel=kk) for k, (d, kk) in specs.items()}
    prompts, _ = bench.build_prompts("humaneval", models[kernels[0]].tokenizer, args.prompts, "spread")

    tables: dict[str, list[list[tuple[int, float]]]] = {k: [] for k in kernels}
    speeds: dict[str, dict[str, list[float]]] = {k: {"greedy": [], "lookahead": []} for k in kernels}
    exact = {k: True for k in kernels}
    same_as_first: dict[str, bool] = {k: True for k in kernels}
    reference: dict[str, list[int]] = {}
    for rnd in range(args.rounds):
        order = kernels if rnd % 2 == 0 else kernels[::-1]
        for k in order:
            session = Session(models[k])
            tables[k].append(session.calibrate())
            for p in prompts:
                greedy = session.generate(list(p.ids), max_new_tokens=args.max_new_tokens)
                la = session.generate(list(p.ids), max_new_tokens=args.max_new_tokens, lookahead=lookahead)
                speeds[k]["greedy"].append(greedy.stats.new_tokens / greedy.stats.decode_s)
                speeds[k]["lookahead"].append(la.stats.new_tokens / la.stats.decode_s)
                exact[k] = exact[k] and la.token_ids == greedy.token_ids
                reference.setdefault(p.id, greedy.token_ids)
                same_as_first[k] = same_as_first[k] and greedy.token_ids == reference[p.id]
            print(
                f"round {rnd + 1}/{args.rounds} {k}: greedy {median(speeds[k]['greedy'][-len(prompts) :]):.1f} tok/s,"
                f" lookahead {median(speeds[k]['lookahead'][-len(prompts) :]):.1f} tok/s",
                flush=True,
            )

    result_kernels = {}
    for k in kernels:
        tokens = [t for t, _ in tables[k][0]]
        costs = {t: median(tab[i][1] for tab in tables[k]) for i, t in enumerate(tokens)}
        g_med, l_med = median(speeds[k]["greedy"]), median(speeds[k]["lookahead"])
        result_kernels[k] = {
            "dtype": specs[k][0],
            "linear_kernel": models[k].info.linear_kernel,
            "cpu_isa": models[k].info.cpu_isa,
            "step_seconds": {str(t): s for t, s in costs.items()},
            "step_cost_vs_1_token": {str(t): s / costs[tokens[0]] for t, s in costs.items()},
            "greedy_tok_s_median": g_med,
            "lookahead_tok_s_median": l_med,
            "lookahead_vs_greedy": l_med / g_med,
            "lookahead_equals_greedy": exact[k],
            "greedy_equals_first_kernel": same_as_first[k],
        }
    first = kernels[0]
    for k in kernels:
        r = result_kernels[k]
        r["greedy_vs_first_kernel"] = r["greedy_tok_s_median"] / result_kernels[first]["greedy_tok_s_median"]
        r["lookahead_vs_first_kernel"] = r["lookahead_tok_s_median"] / result_kernels[first]["lookahead_tok_s_median"]

    print(
        f"{args.model} {args.dtype} | {args.threads} threads | {args.rounds} rounds x {len(prompts)} prompts | lookahead {args.config}"
    )
    ts = list(result_kernels[first]["step_seconds"])
    print(
        f"{'kernel':20s} " + " ".join(f"T={t:>3s}" for t in ts) + "   greedy tok/s  lookahead tok/s  la/greedy  exact"
    )
    for k, r in result_kernels.items():
        costs = " ".join(f"{r['step_cost_vs_1_token'][t]:5.2f}" for t in ts)
        print(
            f"{k:20s} {costs}   {r['greedy_tok_s_median']:12.1f}  {r['lookahead_tok_s_median']:15.1f}  "
            f"{r['lookahead_vs_greedy']:9.2f}  {r['lookahead_equals_greedy']}"
        )
    print(
        "(T columns: step cost relative to the kernel's own 1-token step; "
        "1-token step: "
        + ", ".join(f"{k} {r['step_seconds'][ts[0]] * 1e3:.1f} ms" for k, r in result_kernels.items())
        + ")"
    )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        out = {
            **bench.script_result_header("linear-kernels", "benchmarks/linear_kernels.py", argv),
            "settings": {
                "model": args.model,
                "dtype": args.dtype,
                "threads": args.threads,
                "rounds": args.rounds,
                "prompts": [p.id for p in prompts],
                "max_new_tokens": args.max_new_tokens,
                "lookahead": args.config,
            },
            "kernels": result_kernels,
        }
        args.out.write_text(json.dumps(out, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0 if all(exact.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
