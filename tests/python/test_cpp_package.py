"""The C++ package as a native app uses it: install, find_package, link, run, same ids as Python.

The core is configured and built in a persistent build directory (build/cpp-package, so reruns are
incremental) and `cmake --install`ed into a fresh prefix. cpp/examples is copied out of the source
tree and built as a separate CMake project against that prefix only; its generate_main runs on a tiny
checkpoint, and its greedy and lookahead ids (and step statistics) must equal the Python API's.
When the imported pylookahead is an installed wheel, the same example is also built against the
wheel's package (`python -m pylookahead cmake-dir`). Deselect with `-m "not cpp_package"`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import pylookahead
from kernel_support import kernels_here

pytestmark = pytest.mark.cpp_package

REPO = Path(__file__).resolve().parents[2]
BUILD_DIR = REPO / "build" / "cpp-package"
PROMPT = [1, 5, 6, 7, 5, 6, 7, 5, 6, 7, 8]


def _run(cmd: list[str], what: str, **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    if proc.returncode != 0:
        out = (proc.stdout + proc.stderr)[-6000:]
        pytest.fail(f"{what} failed (exit {proc.returncode}): {' '.join(cmd)}\n{out}")
    return proc


def _torch_cmake_prefix() -> str:
    import torch.utils

    return torch.utils.cmake_prefix_path


def _build_args() -> list[str]:
    if os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL"):
        return []
    return ["--parallel", str(os.cpu_count() or 2)]


def _generator_args(build_dir: Path) -> list[str]:
    # A persistent build dir keeps the generator it was created with.
    if (build_dir / "CMakeCache.txt").exists() or shutil.which("ninja") is None:
        return []
    return ["-G", "Ninja"]


@pytest.fixture(scope="module")
def installed_prefix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build the core in build/cpp-package and `cmake --install` it into a fresh prefix."""
    if shutil.which("cmake") is None:
        pytest.skip("cmake is not installed")
    _run(
        [
            "cmake",
            "-S",
            str(REPO),
            "-B",
            str(BUILD_DIR),
            *_generator_args(BUILD_DIR),
            "-DCMAKE_BUILD_TYPE=Release",
            f"-DPython_EXECUTABLE={sys.executable}",
            f"-DTorch_DIR={Path(_torch_cmake_prefix()) / 'Torch'}",
            "-DPYLOOKAHEAD_WITH_TORCH=ON",
            "-DPYLOOKAHEAD_BUILD_PYTHON=OFF",
            "-DPYLOOKAHEAD_BUILD_TESTS=OFF",
            "-DPYLOOKAHEAD_BUILD_EXAMPLES=OFF",
        ],
        "configuring the core",
    )
    _run(["cmake", "--build", str(BUILD_DIR), *_build_args()], "building the core")
    prefix = tmp_path_factory.mktemp("prefix")
    _run(["cmake", "--install", str(BUILD_DIR), "--prefix", str(prefix)], "cmake --install")
    return prefix


def test_installed_headers_need_no_torch(installed_prefix: Path, tmp_path: Path) -> None:
    """The installed public headers compile with only their own include directory."""
    cxx = _cache_value(BUILD_DIR, "CMAKE_CXX_COMPILER")
    source = tmp_path / "headers.cpp"
    source.write_text("#include <pylookahead/pylookahead.h>\nint main() { return 0; }\n")
    _run(
        [cxx, "-std=c++17", "-fsyntax-only", f"-I{installed_prefix / 'include'}", str(source)],
        "compiling the public headers without torch",
    )
    installed = sorted(p.name for p in (installed_prefix / "include" / "pylookahead").iterdir())
    assert installed == sorted(p.name for p in (REPO / "cpp" / "include" / "pylookahead").glob("*.h"))


def _build_example(build_root: Path, cmake_args: list[str]) -> Path:
    """Copy cpp/examples out of the source tree, configure it as its own project, build it."""
    src = build_root / "src"
    shutil.copytree(REPO / "cpp" / "examples", src)
    build = build_root / "build"
    _run(
        [
            "cmake",
            "-S",
            str(src),
            "-B",
            str(build),
            *_generator_args(build),
            "-DCMAKE_BUILD_TYPE=Release",
            *cmake_args,
        ],
        "configuring cpp/examples",
    )
    _run(["cmake", "--build", str(build), *_build_args()], "building cpp/examples")
    return build


def _cache_value(build: Path, key: str) -> str:
    for line in (build / "CMakeCache.txt").read_text().splitlines():
        if line.startswith(key + ":"):
            return line.split("=", 1)[1]
    raise KeyError(key)


def _run_example(exe: Path, args: list[str]) -> dict[str, str]:
    proc = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = {}
    for line in proc.stdout.splitlines():
        key, _, value = line.partition(": ")
        out[key] = value
    return out


def _ids(text: str) -> list[int]:
    return [int(t) for t in text.split()]


# (generate_main flags, Python Session / generate arguments)
CASES = [
    (
        ["-W", "3", "-N", "3", "-G", "2", "--max-new-tokens", "24", "--dtype", "float32"],
        dict(dtype="float32", max_new_tokens=24, W=3, N=3, G=2),
    ),
    (
        ["-W", "4", "-N", "4", "-G", "4", "--max-new-tokens", "40", "--dtype", "float64"],
        dict(dtype="float64", max_new_tokens=40, W=4, N=4, G=4),
    ),
    (
        [
            "-W",
            "2",
            "-N",
            "4",
            "-G",
            "3",
            "-R",
            "12",
            "--suffix-branches",
            "2",
            "--recycle-top-k",
            "3",
            "--max-new-tokens",
            "40",
            "--dtype",
            "float64",
        ],
        dict(dtype="float64", max_new_tokens=40, W=2, N=4, G=3, R=12, S=2, K=3),
    ),
]


def _check_sampling_and_stream_stop(exe: Path, model_dir: Path) -> None:
    """Sampling and the streaming hook through the C++ API: lookahead == plain sampling for one
    seed, equal to Python's, and a callback stop keeps exactly K tokens even inside a step."""
    flags = ["-W", "3", "-N", "4", "-G", "3", "--max-new-tokens", "32", "--dtype", "float64",
             "--temperature", "0.8", "--top-k", "20", "--seed", "5", "--threads", "1"]  # fmt: skip
    out = _run_example(exe, [str(model_dir), "--ids", ",".join(map(str, PROMPT)), *flags])
    session = pylookahead.Session(model_dir, dtype="float64")
    sampled = session.generate(PROMPT, max_new_tokens=32, temperature=0.8, top_k=20, seed=5)
    assert _ids(out["greedy_ids"]) == _ids(out["lookahead_ids"]) == sampled.token_ids
    assert sum(_ids(out["lookahead_chunks"])) == len(sampled.token_ids)
    stop = _run_example(exe, [str(model_dir), "--ids", ",".join(map(str, PROMPT)), *flags, "--stop-after", "11"])
    assert _ids(stop["lookahead_ids"]) == _ids(stop["greedy_ids"]) == sampled.token_ids[:11]
    assert stop["lookahead_stop_reason"] == "callback"


def _check_against_python(exe: Path, model_dir: Path, tmp_path: Path) -> None:
    ids_file = tmp_path / "prompt.txt"
    ids_file.write_text(" ".join(map(str, PROMPT[:6])) + "\n" + ",".join(map(str, PROMPT[6:])) + "\n")
    for use_file, (flags, py) in zip([False, True, False], CASES):
        prompt_args = ["--ids-file", str(ids_file)] if use_file else ["--ids", ",".join(map(str, PROMPT))]
        out = _run_example(exe, [str(model_dir), *prompt_args, *flags, "--threads", "1"])
        assert _ids(out["prompt_ids"]) == PROMPT

        session = pylookahead.Session(model_dir, dtype=py["dtype"])
        config = pylookahead.LookaheadConfig()
        config.window_size, config.ngram_size, config.verification_set_size = py["W"], py["N"], py["G"]
        config.tree_rows, config.suffix_branches, config.recycle_top_k = py.get("R", 0), py.get("S", 0), py.get("K", 0)
        greedy = session.generate(PROMPT, max_new_tokens=py["max_new_tokens"], lookahead=None)
        lookahead = session.generate(PROMPT, max_new_tokens=py["max_new_tokens"], lookahead=config)

        assert _ids(out["greedy_ids"]) == greedy.token_ids
        assert _ids(out["lookahead_ids"]) == lookahead.token_ids
        assert out["identical"] == ("yes" if greedy.token_ids == lookahead.token_ids else "no")
        for label, result in (("greedy", greedy), ("lookahead", lookahead)):
            assert out[f"{label}_stop_reason"] == result.stop_reason
            if label == "lookahead" and config.tree_rows > 0:
                # A draft tree sizes its steps by each session's measured step costs: the steps may
                # differ between the two processes (a step may even keep no draft), the tokens may not.
                # The C++ counters agree with each other: every token after the prefill's is an accepted
                # draft or a step's bonus token (the last step's bonus may be cut by max_new_tokens).
                drafted = sum(_ids(out["lookahead_accepted_by_source"]))
                bonus = len(_ids(out["lookahead_ids"])) - 1 - drafted
                assert int(out["lookahead_steps"]) - 1 <= bonus <= int(out["lookahead_steps"])
                continue
            assert int(out[f"{label}_steps"]) == result.stats.steps
            assert _ids(out[f"{label}_accept_histogram"]) == list(result.stats.accept_histogram)[1:]
            assert _ids(out[f"{label}_accepted_by_source"]) == list(result.stats.accepted_tokens_by_source.values())
        assert greedy.token_ids == lookahead.token_ids  # the engine's contract, seen from C++


def test_example_against_cmake_install(installed_prefix: Path, tiny_llama: Path, tmp_path: Path) -> None:
    build = _build_example(tmp_path / "example", [f"-DCMAKE_PREFIX_PATH={installed_prefix};{_torch_cmake_prefix()}"])
    # find_package took the installed package, not anything in the source tree.
    assert (
        Path(_cache_value(build, "pylookahead_DIR")).resolve()
        == (installed_prefix / "lib" / "cmake" / "pylookahead").resolve()
    )
    exe = build / "generate_main"
    _check_against_python(exe, tiny_llama, tmp_path)
    _check_sampling_and_stream_stop(exe, tiny_llama)

    bad = subprocess.run([str(exe), str(tmp_path / "missing"), "--ids", "1,2"], capture_output=True, text=True)
    assert bad.returncode == 2
    assert "config.json" in bad.stderr
    _check_linear_kernels(exe, tiny_llama)
    _check_quantized(exe, tiny_llama, tmp_path)


def _check_quantized(exe: Path, model_dir: Path, tmp_path: Path) -> None:
    """EngineConfig::quantize and GGUF files through the C++ API: lookahead == greedy, and Python's ids."""
    from test_gguf import Q, write_gguf

    gguf_file = write_gguf(model_dir, tmp_path / "tiny.gguf", Q.Q4_1, Q.Q8_0)
    flags = ["--ids", ",".join(map(str, PROMPT)), "-W", "3", "-N", "4", "-G", "3", "--max-new-tokens", "24",
             "--threads", "1"]  # fmt: skip
    for path, quantize, expect in [
        (model_dir, "int8", "int8"),
        (model_dir, "int8-g32", "int8-g32"),
        (model_dir, "int4", "int4"),
        (model_dir, "w8a8", "w8a8"),
        (gguf_file, "auto", "gguf"),
    ]:
        out = _run_example(exe, [str(path), *flags, "--quantize", quantize])
        assert (out["quantize"], out["identical"]) == (expect, "yes")
        model = pylookahead.Model(path, dtype="float32", quantize=quantize)
        assert out["weight_notes"] == " | ".join(model.info.weight_notes)
        assert _ids(out["greedy_ids"]) == pylookahead.Session(model).generate(PROMPT, max_new_tokens=24).token_ids
    bad = subprocess.run(
        [str(exe), str(model_dir), "--ids", "1,2", "--quantize", "int3"], capture_output=True, text=True
    )
    assert bad.returncode == 2
    assert "quantize must be one of auto, none, int8, int8-g32, int4, w8a8 (got 'int3')" in bad.stderr


def _check_linear_kernels(exe: Path, model_dir: Path) -> None:
    """EngineConfig::linear_kernel through the C++ API: each kernel that runs here gives lookahead == greedy in
    bf16 and the ids Python gets with the same kernel; a kernel that cannot run is a ConfigError (exit 2)."""
    kernels = kernels_here(model_dir, "bfloat16")
    auto = pylookahead.Model(model_dir, dtype="bfloat16").info
    out = _run_example(exe, [str(model_dir), "--ids", "1,2", "--dtype", "bfloat16", "--max-new-tokens", "2"])
    assert (out["linear_kernel"], out["cpu_isa"]) == (auto.linear_kernel, auto.cpu_isa)
    assert out["linear_kernel_skipped"] == " | ".join(auto.linear_kernel_skipped)
    flags = ["-W", "2", "-N", "4", "-G", "3", "--max-new-tokens", "24", "--dtype", "bfloat16", "--threads", "1"]
    for kernel in kernels:
        out = _run_example(
            exe, [str(model_dir), "--ids", ",".join(map(str, PROMPT)), *flags, "--linear-kernel", kernel]
        )
        assert out["linear_kernel"] == kernel
        assert out["identical"] == "yes"
        session = pylookahead.Session(pylookahead.Model(model_dir, dtype="bfloat16", linear_kernel=kernel))
        assert _ids(out["greedy_ids"]) == session.generate(PROMPT, max_new_tokens=24).token_ids
    bad = subprocess.run([str(exe), str(model_dir), "--ids", "1,2", "--dtype", "float64", "--linear-kernel", "onednn"],
                         capture_output=True, text=True)  # fmt: skip
    assert bad.returncode == 2
    assert "linear_kernel 'onednn' needs dtype bfloat16 or float32" in bad.stderr


def test_example_against_wheel_cmake_dir(tiny_llama: Path, tmp_path: Path) -> None:
    package_dir = Path(pylookahead.__file__).resolve().parent
    if not (package_dir / "lib" / "cmake" / "pylookahead" / "pylookaheadConfig.cmake").is_file():
        pytest.skip(f"{package_dir} is a source checkout, not an installed wheel")
    if shutil.which("cmake") is None:
        pytest.skip("cmake is not installed")
    cmake_dir = _run(
        [sys.executable, "-m", "pylookahead", "cmake-dir"], "pylookahead cmake-dir", cwd=tmp_path
    ).stdout.strip()
    # Only pylookahead_DIR: the package finds the torch installed next to it by itself.
    build = _build_example(tmp_path / "example", [f"-Dpylookahead_DIR={cmake_dir}"])
    _check_against_python(build / "generate_main", tiny_llama, tmp_path)
