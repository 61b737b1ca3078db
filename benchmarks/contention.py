"""Threading under CPU contention (issue 16): the engine's greedy tok/s with each OpenMP wait policy, on a quiet
machine and beside a competing busy process, with 1 and 2 threads.

libgomp reads its wait policy once, when it starts, so each (policy, load, threads) cell runs in its own child
process with the policy's environment; the cells of one policy run back to back, and the policies are
interleaved in rounds (machine noise moves all of them). The competing load is one process spinning on a core
(`while True: pass`), as a web server, a tokenizer or another session would take one.

Policies: `spin` (libgomp's default when nothing is set: spin ~300k iterations before sleeping), `passive`
(OMP_WAIT_POLICY=PASSIVE: sleep at once), `spinN` (GOMP_SPINCOUNT=N), each with the engine's thread governor
off (PYLOOKAHEAD_GOVERN_THREADS=0), and `engine`: libgomp's default with the governor on (the default:
lookahead/thread_governor.h).

    python benchmarks/contention.py --model smollm2-135m-instruct --dtype float32 \\
        --out benchmarks/results/contention/smollm2-135m-instruct-float32.json
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

POLICIES = {
    "spin": {"OMP_WAIT_POLICY": None, "GOMP_SPINCOUNT": None, "PYLOOKAHEAD_GOVERN_THREADS": "0"},
    "passive": {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": None, "PYLOOKAHEAD_GOVERN_THREADS": "0"},
    "spin10k": {"OMP_WAIT_POLICY": None, "GOMP_SPINCOUNT": "10000", "PYLOOKAHEAD_GOVERN_THREADS": "0"},
    "engine": {"OMP_WAIT_POLICY": None, "GOMP_SPINCOUNT": None, "PYLOOKAHEAD_GOVERN_THREADS": None},
}

_CHILD = r"""
import json, statistics, sys, time
import pylookahead
from pylookahead import Model, Session
model, dtype, threads, tokens, prompts = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
m = Model(model, dtype=dtype, num_threads=threads)
s = Session(m)
ids = m.tokenizer.encode("def fibonacci(n):\n    ")
s.generate(ids, 8)
speeds = []
for p in range(prompts):
    out = s.generate(ids + [ids[p % len(ids)]], tokens)
    speeds.append(out.stats.new_tokens / out.stats.decode_s)
import os
print(json.dumps({"tok_s": statistics.median(speeds), "policy_env": {k: os.environ.get(k) for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}}))
"""


def run_cell(model: str, dtype: str, threads: int, tokens: int, prompts: int, policy: dict[str, str | None]) -> dict:
    env = dict(os.environ)
    for k, v in policy.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-c", _CHILD, model, dtype, str(threads), str(tokens), str(prompts)],
                          capture_output=True, text=True, env=env, cwd=root, timeout=900)  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--prompts", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--policies", default=",".join(POLICIES), help="comma list of policy names, or spinN / spinNk")
    parser.add_argument("--threads", default="1,2", help="thread counts to run")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    from pylookahead.tools.bench import machine_info

    policies = args.policies.split(",")
    for p in policies:  # "spinN": GOMP_SPINCOUNT=N
        if p not in POLICIES and p.startswith("spin") and p[4:].rstrip("k").isdigit():
            POLICIES[p] = {
                "OMP_WAIT_POLICY": None,
                "PYLOOKAHEAD_GOVERN_THREADS": "0",
                "GOMP_SPINCOUNT": str(int(p[4:].rstrip("k")) * (1000 if p.endswith("k") else 1)),
            }
    cells = [(load, int(threads)) for load in ("quiet", "busy") for threads in args.threads.split(",")]
    results: dict[str, dict[str, list[float]]] = {p: {f"{l}-{t}": [] for l, t in cells} for p in policies}
    for rnd in range(args.rounds):
        order = policies if rnd % 2 == 0 else policies[::-1]
        for load, threads in cells:
            hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if load == "busy" else None
            try:
                for p in order:
                    r = run_cell(args.model, args.dtype, threads, args.tokens, args.prompts, POLICIES[p])
                    results[p][f"{load}-{threads}"].append(r["tok_s"])
                    print(f"round {rnd + 1} {load:5s} {threads} threads {p:8s} {r['tok_s']:7.2f} tok/s", flush=True)
            finally:
                if hog is not None:
                    hog.kill()
                    hog.wait()
    table = {p: {c: statistics.median(v) for c, v in cs.items()} for p, cs in results.items()}
    print(f"{args.model} {args.dtype} greedy tok/s (median of {args.rounds} rounds x {args.prompts} prompts)")
    print(f"{'policy':10s} " + " ".join(f"{c:>10s}" for c in results[policies[0]]))
    for p, cs in table.items():
        print(f"{p:10s} " + " ".join(f"{v:10.2f}" for v in cs.values()))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({
            "kind": "contention",
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "command": "python " + " ".join(shlex.quote(a) for a in ["benchmarks/contention.py", *(argv if argv is not None else sys.argv[1:])]),
            "machine": machine_info(),
            "settings": vars(args) | {"out": str(args.out)},
            "policies": {p: {k: v for k, v in POLICIES[p].items()} for p in policies},
            "tok_s_median": table,
            "tok_s_all": results,
        }, indent=1) + "\n")  # fmt: skip
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
