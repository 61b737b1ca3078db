"""Soak: a long mixed workload on one Model, reporting resident memory over time (issue 16).

Runs N generations (default 5000) cycling through greedy, fixed lookahead, auto, sampling, streaming with a
stop string, a two-turn chat and a pool save/load, over prompts of many distinct lengths, on a tiny random
checkpoint (written by tests/python/tiny_models.py; bf16, so the engine's own kernels and oneDNN-free paths
run as in production) or any checkpoint given with --model. Every lookahead output is checked against greedy
on the same prompt. Prints and writes RSS samples, and the growth after the warm-up.

    python benchmarks/soak.py --generations 5000 --out benchmarks/results/soak/tiny-bfloat16.json
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import shlex
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--generations", type=int, default=5000)
    parser.add_argument("--model", default=None, help="checkpoint dir (default: a tiny random one)")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--sample-every", type=int, default=250)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "tests" / "python"))
    import torch

    import pylookahead
    from pylookahead import LookaheadConfig, Model, Session
    from pylookahead.tools.bench import machine_info

    torch.set_num_threads(args.threads)
    work = Path(tempfile.mkdtemp(prefix="pylookahead-soak-"))
    if args.model is None:
        from tiny_models import TINY_VOCAB_SIZE, write_tiny_model

        model_dir, vocab = write_tiny_model(work / "tiny", "llama", seed=9), TINY_VOCAB_SIZE
    else:
        model_dir, vocab = Path(args.model), None
    model = Model(model_dir, dtype=args.dtype)
    vocab = vocab or model.info.vocab_size
    sessions = [Session(model) for _ in range(2)]
    rng = random.Random(0)
    la = LookaheadConfig(window_size=2, ngram_size=3, verification_set_size=2)
    kinds = ["greedy", "lookahead", "auto", "sample", "stream", "chat", "pool"]
    samples: list[dict[str, float]] = []
    mismatches = 0
    t0 = time.monotonic()
    for i in range(args.generations):
        s = sessions[i % 2]
        kind = kinds[i % len(kinds)]
        length = 1 + rng.randrange(200)  # many distinct prompt lengths
        phrase = [rng.randrange(3, vocab) for _ in range(5)]
        prompt = [1] + (phrase * (length // 5 + 1))[:length]
        new = 4 + rng.randrange(28)
        if kind == "greedy":
            s.generate(prompt, max_new_tokens=new)
        elif kind in ("lookahead", "auto"):
            out = s.generate(prompt, max_new_tokens=new, lookahead=la if kind == "lookahead" else "auto")
            mismatches += out.token_ids != s.generate(prompt, max_new_tokens=new).token_ids
        elif kind == "sample":
            s.generate(prompt, max_new_tokens=new, lookahead=la, temperature=0.8, top_p=0.9, seed=i)
        elif kind == "stream":
            for _ in s.stream(prompt, max_new_tokens=new, lookahead=la, stop=["x y"]):
                pass
        elif kind == "chat":
            s.chat("hello x y z", max_new_tokens=8, lookahead=la)
            s.chat("print x", max_new_tokens=8, lookahead="auto")
            s.reset()
        else:
            s.generate(prompt, max_new_tokens=new, lookahead=la, keep_pool=True)
            s.save_pool(work / "pool.bin")
            s.reset()
            s.load_pool(work / "pool.bin")
        if i % args.sample_every == 0 or i == args.generations - 1:
            samples.append(
                {"generation": i, "seconds": round(time.monotonic() - t0, 1), "rss_mib": round(rss_mib(), 1)}
            )
            print(
                f"{i:6d} generations  {samples[-1]['seconds']:7.1f} s  RSS {samples[-1]['rss_mib']:7.1f} MiB",
                flush=True,
            )
    warm = [x for x in samples if x["generation"] >= args.generations // 10] or samples
    growth = warm[-1]["rss_mib"] - warm[0]["rss_mib"]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"RSS after warm-up: {warm[0]['rss_mib']:.1f} -> {warm[-1]['rss_mib']:.1f} MiB ({growth:+.1f}); peak {peak:.1f} MiB; "
        f"lookahead != greedy: {mismatches}"
    )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({
            "kind": "soak",
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "command": "python " + " ".join(shlex.quote(a) for a in ["benchmarks/soak.py", *(argv if argv is not None else sys.argv[1:])]),
            "machine": machine_info(),
            "settings": {"model": str(args.model or "tiny llama"), "dtype": args.dtype, "threads": args.threads,
                         "generations": args.generations, "linear_kernel": model.info.linear_kernel},
            "samples": samples,
            "rss_growth_after_warmup_mib": growth,
            "peak_rss_mib": peak,
            "lookahead_mismatches": mismatches,
            "versions": {"pylookahead": pylookahead.__version__, "torch": torch.__version__},
        }, indent=1) + "\n")  # fmt: skip
        print(f"wrote {args.out}")
    return 0 if mismatches == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
