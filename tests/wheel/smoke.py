"""Smoke test of an installed pylookahead wheel, run by scripts/wheel.sh from a fresh venv.

The venv holds only torch==2.13.0, the wheel and the wheel's own dependencies; the script runs
outside the source tree. It checks, on a real checkpoint:
1. `import pylookahead` is the installed wheel, and none of the optional tools' packages is there;
2. Python generation: automatic and fixed lookahead equal greedy decoding, token for token;
3. the console script: `pylookahead generate --compare-greedy` exits 0;
4. C++: cpp/examples configured against `pylookahead cmake-dir` and the venv's torch, built, and
   run; its greedy and lookahead ids equal the Python API's.
Exits non-zero with the reason on the first failure.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch.utils

import pylookahead

PROMPT = "Write a Python function that returns the n-th Fibonacci number, with a docstring."
MAX_NEW = 48


def fail(message: str) -> None:
    sys.exit(f"wheel smoke test: FAILED: {message}")


def run(cmd: list[str], what: str, timeout: float = 900) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        fail(f"{what} (exit {proc.returncode}): {' '.join(cmd)}\n{(proc.stdout + proc.stderr)[-4000:]}")
    return proc.stdout


def check_install() -> None:
    where = Path(pylookahead.__file__).resolve()
    if not where.is_relative_to(Path(sys.prefix).resolve()):
        fail(f"pylookahead imported from {where}, not from this venv ({sys.prefix})")
    extras = [m for m in ("transformers", "gguf", "fastapi", "pytest") if importlib.util.find_spec(m)]
    if extras:
        fail(f"the venv should hold only torch and the wheel's dependencies, but has {extras}")
    print(f"installed: pylookahead {pylookahead.__version__} at {where.parent}")


def check_python(model: Path) -> list[int]:
    session = pylookahead.Session(model, dtype="bfloat16")
    prompt = session.tokenizer.encode_chat([{"role": "user", "content": PROMPT}])
    t0 = time.perf_counter()
    greedy = session.generate(prompt, max_new_tokens=MAX_NEW)
    t1 = time.perf_counter()
    auto = session.generate(prompt, max_new_tokens=MAX_NEW, lookahead="auto")
    fixed = session.generate(
        prompt,
        max_new_tokens=MAX_NEW,
        lookahead=pylookahead.LookaheadConfig(window_size=4, ngram_size=4, verification_set_size=4),
    )
    if not (greedy.token_ids == auto.token_ids == fixed.token_ids):
        fail(f"lookahead != greedy:\n greedy {greedy.token_ids}\n auto   {auto.token_ids}\n fixed  {fixed.token_ids}")
    if len(greedy.token_ids) == 0 or not greedy.text.strip():
        fail("greedy decoding produced no text")
    print(
        f"python: {len(greedy.token_ids)} tokens, greedy {len(greedy.token_ids) / (t1 - t0):.1f} tok/s, "
        f"auto and (4,4,4) identical to greedy ({fixed.stats.steps} steps for (4,4,4)); "
        f"linear kernel {session.model.info.linear_kernel}"
    )
    return list(prompt)


def check_console_script(model: Path) -> None:
    exe = Path(sys.prefix) / "bin" / "pylookahead"
    out = run(
        [
            str(exe),
            "generate",
            "--model",
            str(model),
            "--prompt",
            PROMPT,
            "--chat",
            "--max-new-tokens",
            "24",
            "--compare-greedy",
        ],
        "pylookahead generate --compare-greedy",
    )
    print(f"console script: ok ({out.strip().splitlines()[-1][:100]})")


def check_cpp(model: Path, prompt: list[int], examples: Path, work: Path) -> None:
    exe = Path(sys.prefix) / "bin" / "pylookahead"
    cmake_dir = run([str(exe), "cmake-dir"], "pylookahead cmake-dir").strip()
    if not Path(cmake_dir).resolve().is_relative_to(Path(sys.prefix).resolve()):
        fail(f"cmake-dir {cmake_dir} is not inside the venv")
    src, build = work / "examples-src", work / "examples-build"
    shutil.rmtree(src, ignore_errors=True)
    shutil.copytree(examples, src)
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    run(
        [
            "cmake",
            "-S",
            str(src),
            "-B",
            str(build),
            *generator,
            "-DCMAKE_BUILD_TYPE=Release",
            f"-Dpylookahead_DIR={cmake_dir}",
        ],  # docs/cpp.md, route 2: the package finds torch itself
        "configuring cpp/examples against the wheel",
    )
    run(["cmake", "--build", str(build), "--parallel", "2"], "building cpp/examples")
    cache = dict(
        line.partition("=")[::2]
        for line in (build / "CMakeCache.txt").read_text().splitlines()
        if "=" in line and not line.startswith(("#", "//"))
    )
    torch_dir = next((v for k, v in cache.items() if k.startswith("Torch_DIR:")), "")
    if not Path(torch_dir).resolve().is_relative_to(Path(torch.utils.cmake_prefix_path).resolve()):
        fail(f"the wheel's CMake package found libtorch at {torch_dir!r}, not in the venv's torch")

    out = run(
        [
            str(build / "generate_main"),
            str(model),
            "--ids",
            ",".join(map(str, prompt)),
            "-W",
            "4",
            "-N",
            "4",
            "-G",
            "4",
            "--max-new-tokens",
            "32",
            "--dtype",
            "float32",
            "--threads",
            "1",
        ],
        "running generate_main",
    )
    fields = dict(line.partition(": ")[::2] for line in out.splitlines())
    session = pylookahead.Session(model, dtype="float32")
    greedy = session.generate(prompt, max_new_tokens=32)
    ids = {k: [int(t) for t in fields[k].split()] for k in ("greedy_ids", "lookahead_ids")}
    if not (ids["greedy_ids"] == ids["lookahead_ids"] == greedy.token_ids):
        fail(
            f"C++ ids differ from Python's:\n C++ greedy {ids['greedy_ids']}\n C++ lookahead {ids['lookahead_ids']}\n"
            f" Python {greedy.token_ids}"
        )
    print(
        f"c++: generate_main built against {cmake_dir}; greedy == lookahead == Python "
        f"({len(greedy.token_ids)} tokens, {fields['lookahead_steps']} lookahead steps)"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, required=True, help="checkpoint directory")
    p.add_argument("--examples", type=Path, required=True, help="the source tree's cpp/examples")
    p.add_argument("--work", type=Path, required=True, help="scratch directory for the example build")
    args = p.parse_args()
    check_install()
    prompt = check_python(args.model)
    check_console_script(args.model)
    check_cpp(args.model, prompt, args.examples, args.work)
    print("wheel smoke test: ok")


if __name__ == "__main__":
    main()
