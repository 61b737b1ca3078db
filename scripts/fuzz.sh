#!/usr/bin/env bash
# The long, randomized fuzz run of the loader and the pool reader (tests/python/test_fuzz.py): N cases per
# target (default 5000; about 20 ms each on 2 cores). A failing example is printed by hypothesis, shrunk;
# add it to test_fuzz.py's regression cases. Usage: bash scripts/fuzz.sh [N]   (after scripts/setup.sh test)
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
PYLOOKAHEAD_FUZZ_EXAMPLES="${1:-5000}" PYLOOKAHEAD_FUZZ_RANDOM=1 pytest tests/python/test_fuzz.py -q -p no:cacheprovider
