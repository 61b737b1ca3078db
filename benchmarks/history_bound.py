"""How far can verification from the history (prompt + emitted text) go? An upper bound.

Reads a `pylookahead bench` JSON (its engine-greedy outputs and settings), rebuilds the same
prompts, and replays each greedy answer with an *oracle* candidate choice: at every step, among
all earlier occurrences of the current token in the text so far, the one whose continuation
matches the answer longest (at most `depth` tokens), as if a pool held every n-gram of the history
and the step knew which one to verify. Its rows are x plus the matched tokens only, the cheapest
step that could accept them. No real candidate choice does better on this text without a Jacobi
window (or another source of n-grams), so the figures bound verification-only lookahead (W = 0)
and prompt-lookup decoding alike.

Tokens per step do not depend on the machine. The speedup bound prices each step with the
session's step-cost table (`Session.calibrate()`, measured here with the bench's thread count),
relative to greedy steps of one token.

    python benchmarks/history_bound.py benchmarks/results/qwen2.5-coder-0.5b-instruct-bfloat16-humaneval.json \\
        --out benchmarks/results/bounds/qwen2.5-coder-0.5b-instruct-bfloat16-humaneval.json
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
from datetime import datetime, timezone
from pathlib import Path
from statistics import median

import numpy as np


def oracle_steps(seq: list[int], prompt_len: int, depth: int) -> list[int]:
    """Accepted candidate tokens (0..depth) of each step when x is at seq[prompt_len] first."""
    arr = np.asarray(seq)
    out = []
    i = prompt_len
    while i < len(seq) - 1:
        best = 0
        for j in np.flatnonzero(arr[:i] == arr[i]):
            k = 0
            while k < depth and j + 1 + k <= i and i + 1 + k < len(seq) and seq[j + 1 + k] == seq[i + 1 + k]:
                k += 1
            best = max(best, k)
        best = min(best, len(seq) - 2 - i)
        out.append(best)
        i += best + 1
    return out


def interpolate(table: list[tuple[int, float]], tokens: int) -> float:
    ts = [t for t, _ in table]
    ss = [s for _, s in table]
    return float(np.interp(tokens, ts, ss))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("bench_json", type=Path)
    parser.add_argument("--depths", default="3,5,15", help="candidate lengths N - 1 to bound (comma list)")
    parser.add_argument("--out", type=Path, help="write the bounds as JSON here")
    args = parser.parse_args(argv)
    depths = [int(d) for d in args.depths.split(",")]

    import pylookahead
    from pylookahead.tools import bench

    data = json.loads(args.bench_json.read_text())
    settings = data["settings"]
    session = pylookahead.Session(settings["model"], dtype=settings["dtype"], num_threads=settings["threads"])
    prompts, _ = bench.build_prompts(data["dataset"]["name"], session.tokenizer, settings["limit"], settings["select"])
    table = session.calibrate()
    greedy_s = interpolate(table, 1)

    by_id = {p.id: p for p in prompts}
    rows = []
    for record in data["prompts"]:
        prompt = by_id[record["id"]]
        answer = record["results"]["greedy"]["token_ids"]
        seq = list(prompt.ids) + list(answer)
        row = {"id": record["id"], "new_tokens": len(answer)}
        for depth in depths:
            accepted = oracle_steps(seq, len(prompt.ids), depth)
            tokens = len(answer) - 1  # the first comes from prefill
            seconds = sum(interpolate(table, 1 + a) for a in accepted)
            row[f"depth{depth}"] = {
                "steps": len(accepted),
                "tokens_per_step": tokens / max(len(accepted), 1),
                "speedup": tokens * greedy_s / seconds if seconds else 1.0,
            }
        measured = {}
        for name, result in record["results"].items():
            if name.startswith("lookahead") and result.get("steps"):
                measured[name] = {
                    "steps": result["steps"],
                    "tokens_per_step": (result["new_tokens"] - 1) / result["steps"],
                }
        row["measured"] = measured
        rows.append(row)

    summary = {}
    for depth in depths:
        key = f"depth{depth}"
        steps = sum(r[key]["steps"] for r in rows)
        tokens = sum(r["new_tokens"] - 1 for r in rows)
        summary[key] = {"tokens_per_step": tokens / steps, "speedup_median": median(r[key]["speedup"] for r in rows)}
    measured_summary = {}
    for name in rows[0]["measured"]:
        steps = sum(r["measured"][name]["steps"] for r in rows if name in r["measured"])
        tokens = sum(r["new_tokens"] - 1 for r in rows if name in r["measured"])
        measured_summary[name] = {
            "tokens_per_step": tokens / steps,
            "speedup_median": data["methods"][name]["speedup_vs_greedy"]["median"],
        }

    print(f"{settings['model']} {settings['dtype']} | {len(rows)} prompts | step costs (s): {table}")
    print(f"{'':32s} tokens/step  speedup (median)")
    for key, s in summary.items():
        print(f"oracle history, {key:16s} {s['tokens_per_step']:10.2f}  {s['speedup_median']:6.2f}x (bound)")
    for name, s in measured_summary.items():
        print(f"measured {name:23s} {s['tokens_per_step']:10.2f}  {s['speedup_median']:6.2f}x")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        result = {
            "kind": "history-bound",
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "command": "python " + " ".join(shlex.quote(a) for a in [sys.argv[0], *(argv or sys.argv[1:])]),
            "machine": {"platform": platform.platform(), "python": platform.python_version()},
            "source": str(args.bench_json),
            "step_costs": table,
            "oracle": summary,
            "measured": measured_summary,
            "prompts": rows,
        }
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
