"""Benchmark the engine's greedy and lookahead decoding side by side with transformers (one process).

A thin entry point: the logic lives in `pylookahead.tools.bench`, so that `pylookahead bench` works the same from an
installed wheel. Examples (see docs/benchmarks.md for the full set used for the published results)::

    python benchmarks/bench_generate.py --model smollm2-135m-instruct --dtype bfloat16 --threads 2 \\
        --dataset mtbench --limit 2 --max-new-tokens 16 --config 4,4,4 --config 8,4,8
    python benchmarks/bench_generate.py --model qwen2.5-coder-0.5b-instruct --dataset humaneval \\
        --methods greedy,lookahead --config 8,5,8 --out benchmarks/results/qwen-humaneval.json
"""

from __future__ import annotations

import sys

if __name__ == "__main__":
    from pylookahead.tools.bench import main

    sys.exit(main(sys.argv[1:], prog="benchmarks/bench_generate.py"))
