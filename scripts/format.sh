#!/usr/bin/env bash
# Formats the C++ (clang-format, .clang-format) and Python (ruff format, pyproject.toml [tool.ruff])
# sources in place; with --check, changes nothing and fails listing the files that are not formatted.
# The formatters are the versions pinned in pyproject.toml's `test` extra (scripts/setup.sh test).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/clang-format ] && [ -x .venv/bin/ruff ] || bash scripts/setup.sh test
. .venv/bin/activate

mapfile -t cxx < <(git ls-files --cached --others --exclude-standard \
  'cpp/*.cpp' 'cpp/*.h' 'cpp/*.inc' 'bindings/*.cpp' 'tests/cpp/*.cpp' 'tests/cpp/*.h')
mapfile -t py < <(git ls-files --cached --others --exclude-standard '*.py')

if [ "${1:-}" = "--check" ]; then
  status=0
  clang-format --dry-run --Werror "${cxx[@]}" 2>/dev/null || {
    echo "format.sh: C++ files not formatted (run bash scripts/format.sh):" >&2
    for f in "${cxx[@]}"; do clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || echo "  $f" >&2; done
    status=1
  }
  ruff format --check --quiet "${py[@]}" || { echo "format.sh: Python files not formatted (run bash scripts/format.sh)" >&2; status=1; }
  exit $status
fi
clang-format -i "${cxx[@]}"
ruff format --quiet "${py[@]}"
