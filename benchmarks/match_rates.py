"""How often a suffix-lookup continuation is right, by the length of its match (DraftScorer::match_grade's classes).

Reads the greedy outputs a `pylookahead bench` JSON stored (`token_ids` of the `greedy` method, e.g.
benchmarks/results/full/*-all.json) and the same prompts' ids, and replays suffix lookup on each text, with no
model: at every position t of the output, x = text[t], the longest earlier match of the text's suffix (the newest
among equals; backwards up to 32 tokens, as `suffix_drafter` extends them, but searched exhaustively where the
drafter scans at most 64 occurrences per key) proposes the tokens that followed it,
and the greedy text says which are right. Per match-length class and depth d (the d-th proposed token, counted when
tokens 1..d-1 were right): offers and the rate right. This is the evidence behind the scorer's grades and their
priors; it measures the drafts alone (no tree, no budget, no timing).

    python benchmarks/match_rates.py --results benchmarks/results/full/qwen2.5-coder-0.5b-instruct-bfloat16-humaneval-all.json \\
        --out benchmarks/results/draft_tree/match-rates-qwen2.5-coder-0.5b-humaneval.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

MAX_EXTEND = 32  # SuffixDrafter::kMaxExtend
LONGEST = [1, 2, 3, 5, 9, 17]  # DraftScorer::match_grade: the longest match of each grade but the last
GRADE_NAMES = ["1", "2", "3", "4-5", "6-9", "10-17", "18+"]


def match_grade(length: int) -> int:
    return sum(length > b for b in LONGEST)


def best_match(text: list[int], t: int) -> tuple[int, int]:
    """(length, end) of the longest match of text[..t] ending before t (the newest among equals); (0, -1) if none."""
    best, end = 0, -1
    for i in range(t - 1, -1, -1):
        n = 0
        while n < MAX_EXTEND and i - n >= 0 and t - n > i and text[i - n] == text[t - n]:
            n += 1
        if n > best:
            best, end = n, i
    return best, end


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--results", type=Path, required=True, help="a `pylookahead bench` JSON with greedy token_ids")
    p.add_argument("--depths", type=int, default=5)
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)

    from pylookahead import Session
    from pylookahead.tools import bench

    res = json.loads(args.results.read_text())
    settings = res["settings"]
    session = Session(settings["model"], dtype=settings["dtype"])
    prompts, _ = bench.build_prompts(res["dataset"]["name"], session.tokenizer, None, "first")
    ids = {pr.id: list(pr.ids) for pr in prompts}
    grades = len(LONGEST) + 1
    offered = [[0] * args.depths for _ in range(grades)]
    right = [[0] * args.depths for _ in range(grades)]
    texts = 0
    for entry in res["prompts"]:
        out = entry["results"]["greedy"].get("token_ids")
        if out is None or entry["id"] not in ids:
            continue
        texts += 1
        text = ids[entry["id"]] + out
        for t in range(len(ids[entry["id"]]), len(text) - 1):
            length, end = best_match(text, t)
            if length == 0:
                continue
            g = match_grade(length)
            for d in range(args.depths):
                if end + 1 + d > t or t + 1 + d >= len(text):  # the continuation reaches x / the text's end
                    break
                offered[g][d] += 1
                if text[end + 1 + d] != text[t + 1 + d]:
                    break
                right[g][d] += 1
    rows = []
    for g in range(grades):
        rates = [round(right[g][d] / offered[g][d], 3) if offered[g][d] else None for d in range(args.depths)]
        rows.append({"grade": g, "match_tokens": GRADE_NAMES[g], "offered": offered[g], "rate": rates})
        cells = " ".join(f"d{d + 1} {r if r is not None else '-':>5} ({offered[g][d]})" for d, r in enumerate(rates))
        print(f"grade {g} (match {GRADE_NAMES[g]:>5}): {cells}")
    if args.out:
        doc = {
            "benchmark": "match_rates",
            "command": "python "
            + " ".join([Path(sys.argv[0]).as_posix(), *(argv if argv is not None else sys.argv[1:])]),
            "results_file": args.results.as_posix(),
            "model": settings["model"],
            "dataset": res["dataset"]["name"],
            "texts": texts,
            "rows": rows,
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
