#!/usr/bin/env bash
# The quantized-weights benchmarks behind docs/benchmarks.md ("Quantized weights"): the engine in bf16,
# int8, int4 and the GGUF's own formats beside llama-cpp-python on the same GGUF, 1 thread, on this
# machine's own paths and, where it has AVX-512, under the AVX2 cap (engine, oneDNN and ATen capped;
# llama.cpp is built for AVX2 + FMA + F16C, see below). Every comparison quoted is within one run.
# Needs llama-cpp-python, built for AVX2 + FMA + F16C (on CPUs with AMX its native build crashed
# here): `bash scripts/setup.sh "bench,convert,llama"` installs it so.
# Run on an idle machine (~25 min on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=benchmarks/results/quantized
mkdir -p $OUT
CAP=(env PYLOOKAHEAD_CPU_ISA=avx2 ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2)
python benchmarks/quantized.py --model smollm2-135m-instruct --threads 1 --prompts 6 --rounds 2 \
  --out $OUT/smollm2-135m-instruct-1t.json
"${CAP[@]}" python benchmarks/quantized.py --model smollm2-135m-instruct --threads 1 --prompts 6 --rounds 2 \
  --out $OUT/smollm2-135m-instruct-1t-avx2cap.json
python benchmarks/quantized.py --model qwen2.5-coder-0.5b-instruct --threads 1 --prompts 4 --rounds 1 \
  --out $OUT/qwen2.5-coder-0.5b-instruct-1t.json
