"""A projection, not a measurement: lookahead's end-to-end speedup on the GPU for the Qwen2.5-Coder checkpoints,
from the step counts measured on the CPU and the GPU step latencies of benchmarks/gpu_steps.py (docs/benchmarks.md).

Lookahead's output is exactly greedy's, so the number of steps a configuration takes on a prompt is a property of
the text, the same on any device; the step counts come from `pylookahead bench` result files (CPU runs of the real
checkpoints). On CUDA every decode step runs cuda_step_rows = 64 rows, greedy and lookahead alike, so a step costs
t(64) whatever the configuration, and the decode time of a method is steps x t(64). Two ratios per configuration:
- vs the engine's greedy (64-row steps, the output lookahead equals): steps_greedy / steps_config;
- vs a one-row greedy step (the fastest greedy the engine can run, whose bfloat16 output may differ):
  steps_greedy x t(1) / (steps_config x t(64)).
Prefill (the same for every method) is left out. Configurations wider than 64 rows are not projected.

Usage: python benchmarks/gpu_projection.py --gpu benchmarks/results/gpu/gpu_steps-h200.json
           --cpu NAME=FILE [--cpu NAME=FILE ...] --out FILE
  NAME: a model of the GPU file (e.g. qwen2.5-coder-0.5b); FILE: a `pylookahead bench` JSON of that checkpoint.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROWS = 64


def project(gpu_model: dict, bench: dict) -> dict:
    t1 = gpu_model["summary"]["step_ms_graphs"]["1"]
    t64 = gpu_model["summary"]["step_ms_graphs"][str(ROWS)]
    methods = bench["methods"]
    greedy = methods["greedy"]
    out = {}
    for name, m in methods.items():
        if m.get("kind") != "engine" or name == "greedy" or "+pool" in name:
            continue
        rows = m.get("tokens_per_step")
        if rows is not None and rows > ROWS:
            continue
        out[name] = {
            "prompts": m["prompts"],
            "equal_to_greedy": m["equal_to_greedy"],
            "steps": m["steps"],
            "greedy_steps": greedy["steps"],
            "compression": m["compression"],
            "tokens_per_step_rows": rows,
            "projected_speedup_vs_engine_greedy": greedy["steps"] / m["steps"],
            "projected_speedup_vs_one_row_greedy": greedy["steps"] * t1 / (m["steps"] * t64),
        }
    return {"step_ms_1": t1, "step_ms_64": t64, "source_command": bench["command"], "methods": out}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpu", required=True, help="benchmarks/gpu_steps.py result")
    parser.add_argument("--cpu", action="append", required=True, help="NAME=FILE (a pylookahead bench result)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    from pylookahead.tools.bench import script_result_header

    gpu = json.loads(Path(args.gpu).read_text())
    result = script_result_header("gpu_projection", "benchmarks/gpu_projection.py", argv)
    result["label"] = "PROJECTION: CPU-measured step counts x GPU step latencies; not an end-to-end measurement"
    result["gpu_file"] = args.gpu
    result["gpu"] = gpu.get("gpu")
    result["projections"] = {}
    for spec in args.cpu:
        name, _, file = spec.partition("=")
        bench = json.loads(Path(file).read_text())
        entry = project(gpu["models"][name], bench)
        entry["cpu_file"] = file
        entry["dataset"] = bench.get("dataset", {}).get("name") if isinstance(bench.get("dataset"), dict) else None
        result["projections"][f"{name} {Path(file).stem}"] = entry
        for method, p in entry["methods"].items():
            print(f"{name:20s} {Path(file).stem:55s} {method:22s} prompts {p['prompts']:4d} "
                  f"vs greedy {p['projected_speedup_vs_engine_greedy']:.2f}x, vs 1-row greedy "
                  f"{p['projected_speedup_vs_one_row_greedy']:.2f}x")  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
