#!/usr/bin/env bash
# The benchmark runs behind docs/benchmarks.md (run on an idle machine; ~30 min on 2 cores).
# Prompts are a spread subset of each dataset (--limit): the full sets take hours here.
set -euo pipefail
cd "$(dirname "$0")/.."
B="pylookahead bench --threads 2 --max-new-tokens 128 --no-progress"
M=qwen2.5-coder-0.5b-instruct
$B --model $M --dtype bfloat16 --dataset humaneval --limit 10 --config 2,3,2 --config 4,4,4 --config 0,4,2 --config auto \
   --out benchmarks/results/$M-bfloat16-humaneval.json
$B --model $M --dtype bfloat16 --dataset mtbench --limit 8 --config 2,3,2 --config 4,4,4 --config 0,4,2 --config auto \
   --out benchmarks/results/$M-bfloat16-mtbench.json
M=qwen2.5-coder-1.5b-instruct
$B --model $M --dtype bfloat16 --dataset humaneval --limit 4 --config 2,3,2 --config 0,4,2 --config auto \
   --out benchmarks/results/$M-bfloat16-humaneval.json
$B --model $M --dtype bfloat16 --dataset mtbench --limit 4 --config 2,3,2 --config 0,4,2 --config auto \
   --out benchmarks/results/$M-bfloat16-mtbench.json
M=smollm2-135m-instruct
$B --model $M --dtype bfloat16 --dataset humaneval --limit 10 --config 2,3,2 --config 4,4,4 --config 0,4,2 --config auto \
   --out benchmarks/results/$M-bfloat16-humaneval.json
$B --model $M --dtype float32 --dataset mtbench --limit 8 --config 2,3,2 --config 0,4,2 --config auto \
   --out benchmarks/results/$M-float32-mtbench.json
$B --model $M --dtype bfloat16 --dataset mtbench --limit 8 --config 2,3,2 --config 4,4,4 --config 0,4,2 --config auto \
   --out benchmarks/results/$M-bfloat16-mtbench.json
python benchmarks/sweep.py --model $M --dtype bfloat16 --threads 2 --dataset humaneval --limit 4 \
   --max-new-tokens 128 --windows 1,2,4,8 --ngrams 3,4,5 --config 0,3,2 --config 0,4,2 --config 0,5,2 --config 0,4,4 \
   --out benchmarks/results/sweep-$M-bfloat16-humaneval.json
# Upper bounds of verification from the history on the Qwen 0.5B runs above (oracle candidate choice).
M=qwen2.5-coder-0.5b-instruct
for D in humaneval mtbench; do
  python benchmarks/history_bound.py benchmarks/results/$M-bfloat16-$D.json --out benchmarks/results/bounds/$M-bfloat16-$D.json
done
# The linear-layer kernels side by side (step costs, greedy and (0,4,2) tok/s), Qwen 0.5B bf16.
python benchmarks/linear_kernels.py --model $M --rounds 3 --prompts 3 \
   --out benchmarks/results/kernels/$M-bfloat16.json
