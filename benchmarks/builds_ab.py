"""Two builds of the engine side by side: greedy tokens/s and the 1-token step cost, same prompts, same machine.

A change to the engine's inner loop (a fused kernel, less operator glue) is claimed from this: the build under
test is the `pylookahead` importable here (the working tree's install), the base is a copy of an earlier install
(`--base DIR`, a directory holding a `pylookahead/` package, e.g. `cp -r .venv/lib/python3*/site-packages/pylookahead
/tmp/base/` before rebuilding). Each (build, dtype) runs in its own subprocess, rounds alternate the builds, and
every greedy output of the two builds must be identical token for token (a change that moves bits has to say so
elsewhere: this compares speed at equal output).

    python benchmarks/builds_ab.py --base /tmp/base --base-label 7190754 --dtypes bfloat16,float32 \\
        --out benchmarks/results/builds/norm-fusion.json

`--base-options KEY=VALUE,...` runs the base with those Model options (alone: the same build, e.g.
`--base-options lm_head_screen=false` compares the lm_head screen against the whole lm_head in one binary).

`--auto` also decodes each prompt with `lookahead="auto"`, `--config W,N,G` (repeatable) with that fixed config;
every output must equal greedy too.

`--calibrations N` also calibrates N more fresh sessions per run and reports, per T, the median and range of the
step-cost ratio (T-token step over 1-token step) across all of a build's calibrations: how steady the table `auto`
plans with is on this machine.

`--context N` makes every prompt N tokens long (other HumanEval prompts in front of it), for costs that grow with
the context, such as attention's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from statistics import median


def worker(args: argparse.Namespace) -> int:
    """One build, one dtype: load, calibrate, generate greedy on the prompts; JSON on stdout."""
    import torch

    import pylookahead
    from pylookahead import LookaheadConfig, Model, Session
    from pylookahead.tools import bench

    torch.set_num_threads(args.threads)
    dtype, _, quantize = args.dtype.partition(":")
    options = json.loads(args.model_options or "{}")
    model = Model(args.model, dtype=dtype, num_threads=args.threads, quantize=quantize or None, **options)
    session = Session(model)
    prompts, _ = bench.build_prompts("humaneval", model.tokenizer, args.prompts, "spread")
    inputs = [list(p.ids) for p in prompts]
    if args.context:
        # Long prompts: other HumanEval prompts' ids in front of each prompt, cut to --context tokens.
        pool = [list(p.ids) for p in bench.build_prompts("humaneval", model.tokenizer, None, "first")[0]]
        for j, ids in enumerate(inputs):
            prefix: list[int] = []
            k = j
            while len(prefix) + len(ids) < args.context:
                prefix += pool[k % len(pool)]
                k += 7
            inputs[j] = (prefix + ids)[-args.context :]
    table = dict(session.calibrate())
    # More fresh sessions' tables (each calibrates on its own): how much the table moves between
    # calibrations on this machine, as ratios to each table's own 1-token step.
    tables = [{t: s / table[1] for t, s in table.items()}]
    for _ in range(args.calibrations):
        extra = dict(Session(model).calibrate())
        tables.append({t: s / extra[1] for t, s in extra.items()})
    runs = []
    for p, ids in zip(prompts, inputs):
        out = session.generate(ids, max_new_tokens=args.max_new_tokens)
        run = {"prompt": p.id, "tok_s": out.stats.new_tokens / out.stats.decode_s, "ids": out.token_ids}
        run["lookahead"] = {}
        for label in lookahead_labels(args):
            if label == "auto":
                cfg = "auto"
            else:
                w, n, g = map(int, label.split(","))
                cfg = LookaheadConfig(window_size=w, ngram_size=n, verification_set_size=g)
            la = session.generate(ids, max_new_tokens=args.max_new_tokens, lookahead=cfg)
            run["lookahead"][label] = {
                "tok_s": la.stats.new_tokens / la.stats.decode_s,
                "equals_greedy": la.token_ids == out.token_ids,
                "tokens_per_step": la.stats.compression,
                # (an older base build has no such counter: 0)
                "skipped_head_rows_per_step": getattr(la.stats, "skipped_head_rows", 0) / max(la.stats.steps, 1),
            }
        runs.append(run)
    print(json.dumps({
        "module": pylookahead.__file__,
        "linear_kernel": model.info.linear_kernel,
        "quantize": model.info.quantize,
        "cpu_isa": model.info.cpu_isa,
        "lm_head_screen": model.info.lm_head_screen,
        "step_1_token_s": table[1],
        "step_cost_ratios": tables,
        "runs": runs,
    }))  # fmt: skip
    return 0


def lookahead_labels(args: argparse.Namespace) -> list[str]:
    """The lookahead methods each prompt runs besides greedy: "auto" and the --config W,N,G labels."""
    return (["auto"] if args.auto else []) + list(args.config)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=Path, help="directory holding the base build's pylookahead/")
    parser.add_argument(
        "--base-options",
        default="",
        help="comma list of KEY=VALUE Model options for the base (e.g. lm_head_screen=false); "
        "without --base the base is the installed build run with these options",
    )
    parser.add_argument("--base-label", default="base", help="what the base build is (e.g. its commit)")
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument(
        "--dtypes", default="bfloat16,float32", help="comma list of DTYPE or DTYPE:QUANTIZE (e.g. bfloat16:int8)"
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=3, help="HumanEval prompts per round")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument(
        "--context",
        type=int,
        default=0,
        help="prompt length in tokens (0: the prompts as they are; N: other "
        "HumanEval prompts put in front of each one, cut to its last N tokens)",
    )
    parser.add_argument(
        "--auto", action="store_true", help="also run lookahead='auto' on each prompt (output must equal greedy)"
    )
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="W,N,G",
        help="also run this fixed lookahead config on each prompt (repeatable; output must equal greedy)",
    )
    parser.add_argument(
        "--calibrations",
        type=int,
        default=0,
        help="also calibrate this many fresh sessions per run and report the spread of each step-cost "
        "ratio (T-token step over 1-token step) across all of a build's calibrations",
    )
    parser.add_argument("--out", type=Path)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--dtype", help=argparse.SUPPRESS)
    parser.add_argument("--model-options", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args)
    base_options = {}
    for item in filter(None, args.base_options.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--base-options: {item!r} is not KEY=VALUE")
        low = value.lower()
        base_options[key] = low == "true" if low in ("true", "false") else int(value) if value.isdigit() else value
    if args.base is None and not base_options:
        parser.error("give --base, --base-options or both")
    if args.base is not None and not (args.base / "pylookahead" / "__init__.py").is_file():
        parser.error(f"--base {args.base}: no pylookahead/__init__.py there")

    from pylookahead.tools import bench

    builds = {"test": None, "base": str(args.base.resolve()) if args.base else None}
    model_options = {"test": {}, "base": base_options}
    dtypes = args.dtypes.split(",")
    results: dict[str, dict[str, list[dict]]] = {b: {d: [] for d in dtypes} for b in builds}
    for rnd in range(args.rounds):
        for dtype in dtypes:
            for b in list(builds) if rnd % 2 == 0 else list(builds)[::-1]:
                env = dict(os.environ)
                if builds[b] is not None:
                    env["PYTHONPATH"] = builds[b] + os.pathsep + env.get("PYTHONPATH", "")
                cmd = [sys.executable, __file__, "--worker", "--model", args.model, "--dtype", dtype,
                       "--threads", str(args.threads), "--prompts", str(args.prompts),
                       "--max-new-tokens", str(args.max_new_tokens), "--context", str(args.context),
                       "--calibrations", str(args.calibrations),
                       *(["--auto"] if args.auto else []),
                       *[a for c in args.config for a in ("--config", c)],
                       "--model-options", json.dumps(model_options[b])]  # fmt: skip
                proc = subprocess.run(cmd, check=False, env=env, capture_output=True, text=True, cwd="/")
                if proc.returncode != 0:
                    sys.stderr.write(proc.stderr)
                    return 2
                r = json.loads(proc.stdout.strip().splitlines()[-1])
                results[b][dtype].append(r)
                print(
                    f"round {rnd + 1}/{args.rounds} {dtype} {b}: greedy median "
                    f"{median(x['tok_s'] for x in r['runs']):.1f} tok/s, 1-token step "
                    f"{r['step_1_token_s'] * 1e3:.1f} ms",
                    flush=True,
                )

    summary = {}
    same = True
    for dtype in dtypes:
        row = {}
        for b in builds:
            rs = results[b][dtype]
            row[b] = {
                "module": rs[0]["module"],
                "options": model_options[b],
                "lm_head_screen": rs[0]["lm_head_screen"],
                "linear_kernel": rs[0]["linear_kernel"],
                "quantize": rs[0]["quantize"],
                "cpu_isa": rs[0]["cpu_isa"],
                "greedy_tok_s_median": median(x["tok_s"] for r in rs for x in r["runs"]),
                "step_1_token_ms_median": median(r["step_1_token_s"] for r in rs) * 1e3,
            }
            # JSON keys are strings: T as text.
            tables = [t for r in rs for t in r.get("step_cost_ratios", [])]
            row[b]["step_cost_ratios"] = {
                t: {
                    "median": median(tb[t] for tb in tables if t in tb),
                    "min": min(tb[t] for tb in tables if t in tb),
                    "max": max(tb[t] for tb in tables if t in tb),
                    "calibrations": sum(t in tb for tb in tables),
                }
                for t in sorted({t for tb in tables for t in tb}, key=int)
            }
            row[b]["lookahead"] = {}
            for label in lookahead_labels(args):
                xs = [x["lookahead"][label] for r in rs for x in r["runs"]]
                row[b]["lookahead"][label] = {
                    "tok_s_median": median(x["tok_s"] for x in xs),
                    "tokens_per_step_median": median(x["tokens_per_step"] for x in xs),
                    "skipped_head_rows_per_step_median": median(x["skipped_head_rows_per_step"] for x in xs),
                    "equals_greedy": all(x["equals_greedy"] for x in xs),
                }
                same = same and row[b]["lookahead"][label]["equals_greedy"]
        ids = {b: [x["ids"] for r in results[b][dtype] for x in r["runs"]] for b in builds}
        row["greedy_identical"] = ids["test"] == ids["base"]
        same = same and row["greedy_identical"]
        row["test_vs_base_tok_s"] = row["test"]["greedy_tok_s_median"] / row["base"]["greedy_tok_s_median"]
        row["base_vs_test_step"] = row["base"]["step_1_token_ms_median"] / row["test"]["step_1_token_ms_median"]
        summary[dtype] = row
        row["test_vs_base_lookahead_tok_s"] = {}
        for label in lookahead_labels(args):
            t, c = row["test"]["lookahead"][label], row["base"]["lookahead"][label]
            row["test_vs_base_lookahead_tok_s"][label] = t["tok_s_median"] / c["tok_s_median"]
            print(
                f"{dtype}: lookahead {label}: {t['tok_s_median']:.1f} vs {c['tok_s_median']:.1f} tok/s "
                f"({row['test_vs_base_lookahead_tok_s'][label]:.2f}x), over greedy "
                f"{t['tok_s_median'] / row['test']['greedy_tok_s_median']:.2f}x vs "
                f"{c['tok_s_median'] / row['base']['greedy_tok_s_median']:.2f}x; tokens/step "
                f"{t['tokens_per_step_median']:.2f} vs {c['tokens_per_step_median']:.2f}; == greedy: "
                f"{t['equals_greedy'] and c['equals_greedy']}"
            )
        for t in list(row["test"]["step_cost_ratios"])[1:6]:
            a, c = row["test"]["step_cost_ratios"][t], row["base"]["step_cost_ratios"].get(t)
            print(
                f"{dtype}: step of {t} tokens / 1-token step: median {a['median']:.2f} range "
                f"{a['min']:.2f}-{a['max']:.2f} vs "
                + (f"{c['median']:.2f} range {c['min']:.2f}-{c['max']:.2f}" if c else "-")
                + f" ({a['calibrations']} calibrations each)"
            )
        print(
            f"{dtype}: greedy {row['test']['greedy_tok_s_median']:.1f} vs {row['base']['greedy_tok_s_median']:.1f} "
            f"tok/s ({row['test_vs_base_tok_s']:.2f}x); 1-token step {row['test']['step_1_token_ms_median']:.1f} vs "
            f"{row['base']['step_1_token_ms_median']:.1f} ms; identical output: {row['greedy_identical']}"
        )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        out = {
            **bench.script_result_header("builds-ab", "benchmarks/builds_ab.py", argv),
            "settings": {
                "model": args.model,
                "threads": args.threads,
                "rounds": args.rounds,
                "prompts": args.prompts,
                "max_new_tokens": args.max_new_tokens,
                "context": args.context,
                "auto": args.auto,
                "configs": args.config,
                "calibrations": args.calibrations,
                "base": args.base_label,
                "base_options": base_options,
            },
            "dtypes": summary,
        }
        args.out.write_text(json.dumps(out, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
