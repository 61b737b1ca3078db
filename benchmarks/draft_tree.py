"""Draft tree against the paper's layout, per source and mixed, side by side in one process.

For each prompt of MT-Bench (first turns) and HumanEval (spread over each set), every method decodes the same token
ids for `--max-new-tokens` tokens or an end token, greedy, with a fresh n-gram pool per prompt:

- `greedy`, `auto` (the engine's automatic choice: its verification-only choices run as draft trees of 32
  rows, AutoLookahead.tree_rows), `auto-classic` (the same with tree_rows=0: the paper's slots), and the
  paper's layout: `paper-W0` (W=0, N=4, G=4:
  verification-only, 13 rows) and `paper-W4` (W=4, N=3, G=4: 16 rows);
- the draft tree (LookaheadConfig.tree_rows = R) for each source alone (`pool`: G=8 n-grams of N=5, `suffix`:
  4 branches, `recycle`: top-8 successors) and all of them (`mix`), at each R of `--rows`, with every step
  running its full R rows (the session's step costs set flat, as on a device where rows are free): their tokens
  per step are the draft quality at that budget;
- `mix-sized-R`: the mix at R with the engine's calibrated step costs, so each step keeps only the nodes whose
  expected tokens pay for their rows (LookaheadAlgorithm::set_step_costs): the CPU speed.

Reported per set and method: mean tokens per step (new tokens after the first over steps), median tok/s (new
tokens over decode time), its ratio to greedy's median, accepted drafts by source, and whether every output
equals greedy's (it must). Timing rows interleave per prompt, so all methods see the same machine state.

    python benchmarks/draft_tree.py --model smollm2-135m-instruct --threads 1 --prompts 8 --rows 8,16,32 \\
        --out benchmarks/results/draft_tree/smollm2-135m-instruct-bf16-1t.json
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from statistics import mean, median
from typing import Any

SOURCES = {
    "pool": dict(ngram_size=5, verification_set_size=8),
    "suffix": dict(ngram_size=4, verification_set_size=0, suffix_branches=4),
    "recycle": dict(ngram_size=4, verification_set_size=0, recycle_top_k=8),
    "mix": dict(ngram_size=5, verification_set_size=8, suffix_branches=4, recycle_top_k=8),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--prompts", type=int, default=8, help="prompts per set (spread over the set)")
    parser.add_argument("--sets", default="mtbench,humaneval")
    parser.add_argument("--rows", default="8,16,32", help="R values of the full-R trees")
    parser.add_argument("--sources", default=",".join(SOURCES), help="sources run alone at every R (mix always)")
    parser.add_argument("--sized", default="32", help="R values of the cost-sized mix")
    parser.add_argument(
        "--baselines", default="auto,auto-classic,paper-W0,paper-W4", help="methods run beside greedy and the trees"
    )
    parser.add_argument(
        "--keep-pool",
        action="store_true",
        help="each method keeps its pool (n-grams, texts, recycled successors) across a set's prompts (keep_pool)",
    )
    parser.add_argument(
        "--mix",
        default="",
        help="the mix's LookaheadConfig fields changed, e.g. 'recycle_top_k=16,suffix_branches=8' (ints)",
    )
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    import torch

    from pylookahead import AutoLookahead, LookaheadConfig, Model, Session
    from pylookahead.tools import bench
    from pylookahead.tools.models import pull

    for item in filter(None, args.mix.split(",")):
        key, _, value = item.partition("=")
        if key not in SOURCES["mix"] or not value.lstrip("-").isdigit():
            parser.error(f"--mix: {item!r} is not one of {', '.join(SOURCES['mix'])} = an int")
        SOURCES["mix"][key] = int(value)
    torch.set_num_threads(args.threads)
    model = Model(pull(args.model, progress=False), dtype=args.dtype, num_threads=args.threads)
    calibrated, flat = Session(model), Session(model)
    table = calibrated.calibrate()
    flat.calibrate([(1, 1.0), (1024, 1.0)])
    rows = [int(r) for r in args.rows.split(",") if r]
    sized = [int(r) for r in args.sized.split(",") if r]
    sources = [s for s in args.sources.split(",") if s]
    methods: dict[str, tuple[Session, Any]] = {
        "greedy": (calibrated, None),
        "auto": (calibrated, "auto"),
        "auto-classic": (calibrated, AutoLookahead(tree_rows=0)),
        "paper-W0": (calibrated, LookaheadConfig(window_size=0, ngram_size=4, verification_set_size=4)),
        "paper-W4": (calibrated, LookaheadConfig(window_size=4, ngram_size=3, verification_set_size=4)),
    }
    baselines = [b for b in args.baselines.split(",") if b]
    for b in baselines:
        if b not in methods:
            parser.error(f"--baselines: unknown method {b!r} (one of {', '.join(list(methods)[1:])})")
    methods = {k: v for k, v in methods.items() if k == "greedy" or k in baselines}
    for r in rows:
        for name in sorted(set(sources) | {"mix"}, key=list(SOURCES).index):
            methods[f"{name}-R{r}"] = (flat, LookaheadConfig(window_size=0, tree_rows=r, **SOURCES[name]))
    for r in sized:
        methods[f"mix-sized-R{r}"] = (calibrated, LookaheadConfig(window_size=0, tree_rows=r, **SOURCES["mix"]))

    if args.keep_pool:
        # A kept pool is a session's: every lookahead method gets its own, with the same step costs.
        def own(session: Session) -> Session:
            s = Session(model)
            s.calibrate(table if session is calibrated else [(1, 1.0), (1024, 1.0)])
            return s

        methods = {k: (own(s) if la is not None else s, la) for k, (s, la) in methods.items()}

    results: dict[str, Any] = {}
    started = time.time()
    for dataset in args.sets.split(","):
        prompts, description = bench.build_prompts(dataset, model.tokenizer, args.prompts, "spread")
        for session, la in methods.values():
            if la is not None and args.keep_pool:
                session.reset()  # each set starts from an empty pool
        per: dict[str, dict[str, list]] = {m: {"tps": [], "steps": [], "tokens": [], "src": []} for m in methods}
        exact = {m: True for m in methods}
        for i, p in enumerate(prompts):
            ref = None
            for name, (session, lookahead) in methods.items():
                out = session.generate(
                    list(p.ids), max_new_tokens=args.max_new_tokens, lookahead=lookahead, keep_pool=args.keep_pool
                )
                st = out.stats
                if ref is None:
                    ref = out.token_ids
                exact[name] = exact[name] and out.token_ids == ref
                per[name]["tps"].append(st.new_tokens / st.decode_s)
                per[name]["steps"].append(st.steps)
                per[name]["tokens"].append(st.new_tokens - 1)
                per[name]["src"].append(dict(st.accepted_tokens_by_source))
            print(f"{dataset} {i + 1}/{len(prompts)} ({time.time() - started:.0f} s)", flush=True)
        g = median(per["greedy"]["tps"])
        rows_out = {}
        for name, d in per.items():
            by_source = {k: sum(s[k] for s in d["src"]) for k in d["src"][0]}
            rows_out[name] = {
                "tokens_per_step": sum(d["tokens"]) / max(1, sum(d["steps"])),
                "tokens_per_step_prompt_mean": mean(t / max(1, s) for t, s in zip(d["tokens"], d["steps"])),
                "tok_s_median": median(d["tps"]),
                "vs_greedy": median(d["tps"]) / g,
                "accepted_by_source": by_source,
                "equals_greedy": exact[name],
            }
        results[dataset] = {"prompts": len(prompts), "dataset": description, "methods": rows_out}
        print(f"\n{args.model} {args.dtype} | {args.threads} threads | {dataset}: {len(prompts)} prompts")
        print(f"{'method':18s} {'tok/step':>8s} {'tok/s':>7s} {'vs greedy':>9s} exact  accepted drafts")
        for name, r in rows_out.items():
            src = ", ".join(f"{k} {v}" for k, v in r["accepted_by_source"].items() if v)
            print(f"{name:18s} {r['tokens_per_step']:8.2f} {r['tok_s_median']:7.1f} {r['vs_greedy']:9.2f} "
                  f"{str(r['equals_greedy']):5s}  {src}")  # fmt: skip
        print(flush=True)

    record = {
        "benchmark": "draft_tree",
        "command": "python " + " ".join(shlex.quote(a) for a in [sys.argv[0], *(argv if argv is not None else sys.argv[1:])]),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": bench.machine_info(),
        "model": args.model, "dtype": args.dtype, "threads": args.threads, "max_new_tokens": args.max_new_tokens,
        "keep_pool": args.keep_pool,
        "linear_kernel": model.info.linear_kernel, "cpu_isa": model.info.cpu_isa,
        "step_costs": [list(c) for c in table],
        "methods": {name: (str(la) if la is not None else None) for name, (_, la) in methods.items()},
        "results": results,
    }  # fmt: skip
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=2) + "\n")
        print(f"wrote {args.out}")
    return 0 if all(r["equals_greedy"] for d in results.values() for r in d["methods"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
