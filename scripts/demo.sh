#!/usr/bin/env bash
# The main job: set up, pull the default demo model, and generate with lookahead side by side
# with greedy decoding (checking the outputs are identical).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh convert
. .venv/bin/activate
pylookahead pull smollm2-135m-instruct
# bfloat16, automatic (W, N, G); pass -W/-N/-G for a fixed config or --greedy.
pylookahead generate --chat --dtype bfloat16 --max-new-tokens 256 --compare-greedy \
  --prompt "${1:-Write a Python class for a singly linked list with insert, delete, find and __repr__ methods, each with a docstring.}"
