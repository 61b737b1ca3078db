#!/usr/bin/env bash
# The main job: set up, pull the default demo model, and generate with lookahead side by side
# with greedy decoding (checking the outputs are identical).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh convert
. .venv/bin/activate
pylookahead pull smollm2-135m-instruct
pylookahead generate --chat --max-new-tokens 128 --compare-greedy \
  --prompt "${1:-Write a Python function that checks whether a string is a palindrome.}"
