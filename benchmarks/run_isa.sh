#!/usr/bin/env bash
# The portability benchmarks behind docs/benchmarks.md ("CPUs and ISA paths"): on the machine at hand
# and, where it has AVX-512, under the AVX2 cap (the engine, oneDNN and ATen all capped, as on an
# AVX2-only CPU). Every comparison quoted is within one run: engine vs transformers and auto vs greedy
# inside one `pylookahead bench`, kernels and dtypes inside one benchmarks/linear_kernels.py.
# Run on an idle machine (~45 min on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=benchmarks/results/isa
mkdir -p $OUT
B="pylookahead bench --threads 2 --max-new-tokens 128 --no-progress --dataset humaneval --limit 6"
K="python benchmarks/linear_kernels.py --threads 2 --rounds 2 --prompts 3"
S=smollm2-135m-instruct
Q=qwen2.5-coder-0.5b-instruct
CAP=(env PYLOOKAHEAD_CPU_ISA=avx2 ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2)

# Under the AVX2 cap: the engine against transformers, and auto against the engine's greedy.
"${CAP[@]}" $B --model $S --dtype bfloat16 --config auto --config 0,4,2 --methods greedy,lookahead,hf-greedy \
  --out $OUT/avx2-$S-bfloat16-humaneval.json
"${CAP[@]}" $B --model $S --dtype float32 --config auto --config 0,4,2 --methods greedy,lookahead,hf-greedy \
  --out $OUT/avx2-$S-float32-humaneval.json
"${CAP[@]}" $B --model $Q --dtype bfloat16 --config auto --config 0,4,2 --methods greedy,lookahead,hf-greedy \
  --out $OUT/avx2-$Q-bfloat16-humaneval.json
"${CAP[@]}" $B --model $Q --dtype float32 --config auto --config 0,4,2 --methods greedy,lookahead,hf-greedy \
  --out $OUT/avx2-$Q-float32-humaneval.json
# How far each greedy is from streaming its weights at this machine's read bandwidth (the bound on any
# engine / transformers ratio), capped and uncapped.
R="python benchmarks/roofline.py --models $S,$Q --threads 2 --prompts 3 --max-new-tokens 128 --hf"
"${CAP[@]}" $R --dtypes bfloat16,float32 --out $OUT/roofline-avx2.json
$R --dtypes bfloat16,float32,bfloat16:int8,bfloat16:int4 --out $OUT/roofline-native.json
# Under the AVX2 cap: bf16 against fp32 with the avx2 kernel, and the kernels an AVX2 CPU has for fp32.
"${CAP[@]}" $K --model $S --kernels bfloat16:avx2,float32:avx2,float32:onednn,bfloat16:aten \
  --out $OUT/avx2-kernels-$S.json
"${CAP[@]}" $K --model $Q --kernels bfloat16:avx2,float32:avx2,bfloat16:aten \
  --out $OUT/avx2-kernels-$Q.json
# Uncapped: the kernels auto now picks against the ones it replaced (fp32: onednn -> avx2 where
# the CPU has AVX2; bf16 on AVX512-BF16 keeps bf16-avx512).
$K --model $S --kernels float32:avx2,float32:onednn,bfloat16:bf16-avx512,bfloat16:avx2,bfloat16:onednn \
  --out $OUT/native-kernels-$S.json
