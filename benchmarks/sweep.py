"""Sweep lookahead's (W, N, G) grid for one model and dataset: data for the scaling-law and latency plots.

Runs `pylookahead.tools.bench` with the engine's greedy decoding and one lookahead method per grid point, all
interleaved per prompt in one process (see `pylookahead.tools.bench` for how each method is timed), and writes the
same JSON schema with ``"kind": "sweep"``. `benchmarks/plot_results.py` turns it into

* compression ratio (tokens per step) against tokens per step ``(W + G) * (N - 1)`` on a log axis: the paper's
  scaling law (compression grows roughly linearly in the log of the per-step compute);
* median time per step against tokens per step: what one wider step costs on this machine.

The default grid follows the paper (G = W): W in 1,2,4,8,16 and N in 3,4,5,6, i.e. 4 to 160 tokens per step.
Example::

    python benchmarks/sweep.py --model qwen2.5-coder-0.5b-instruct --dtype bfloat16 --threads 2 \\
        --dataset humaneval --limit 10 --max-new-tokens 128
"""

from __future__ import annotations

import argparse
import itertools
import shlex
import sys
from pathlib import Path


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers (got {text!r})") from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one integer")
    return values


def grid(windows: list[int], ngrams: list[int], gsets: str) -> list[str]:
    """`--config` strings for the grid; `gsets` is "W" (G = W, the paper's choice) or comma-separated G values."""
    configs = []
    for w, n in itertools.product(windows, ngrams):
        for g in [w] if gsets.strip().upper() == "W" else _int_list(gsets):
            if (w + g) * (n - 1) <= 1024:  # LookaheadConfig's limit
                configs.append(f"{w},{n},{g}")
    return list(dict.fromkeys(configs))


def main(argv: list[str] | None = None) -> int:
    from pylookahead.tools import bench

    parser = argparse.ArgumentParser(prog="benchmarks/sweep.py", description=__doc__.split("\n\n")[0])
    bench.add_arguments(parser)
    parser.set_defaults(methods="greedy,lookahead", dataset="humaneval", limit=10)
    parser.add_argument("--windows", type=_int_list, default=[1, 2, 4, 8, 16], help="W values (default 1,2,4,8,16)")
    parser.add_argument("--ngrams", type=_int_list, default=[3, 4, 5, 6], help="N values (default 3,4,5,6)")
    parser.add_argument("--gsets", default="W", help="G values, or W for G = W (default)")
    args = parser.parse_args(argv)
    args.config = grid(args.windows, args.ngrams, args.gsets) + list(args.config or [])
    if args.out is None:
        from datetime import datetime

        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        from pylookahead.catalog import get_entry

        try:
            model = get_entry(args.model).name
        except ValueError:
            model = Path(args.model).name
        name = f"sweep-{model}-{args.dtype}-{bench.dataset_label(args.dataset)}-{stamp}.json"
        args.out = str(Path("benchmarks") / "results" / name)
    command = shlex.join(sys.argv if argv is None else ["benchmarks/sweep.py", *argv])
    print(f"sweep: {len(args.config)} lookahead configs: {' '.join(args.config)}", file=sys.stderr)
    return bench.run_from_args(args, command=command, kind="sweep")


if __name__ == "__main__":
    sys.exit(main())
