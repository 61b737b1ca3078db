#!/usr/bin/env bash
# The engine's methods on the whole datasets (164 HumanEval problems, 80 MT-Bench first turns) for the
# issue's target model; transformers' methods are left out (at 12-20 tok/s here they would take hours).
# Every lookahead config runs twice side by side: with a fresh pool per prompt, and with one pool kept
# across the set in dataset order ('+pool', as a service's Session keeps it). ~50 min on 2 cores; run on
# an idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."
B="pylookahead bench --threads 2 --max-new-tokens 128 --no-progress --methods greedy,lookahead"
M=qwen2.5-coder-0.5b-instruct
for D in humaneval mtbench; do
  $B --model $M --dtype bfloat16 --dataset $D --config 0,4,2 --config auto --pool both \
     --out benchmarks/results/full/$M-bfloat16-$D-all.json
done
