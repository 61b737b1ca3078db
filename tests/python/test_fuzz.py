"""Fuzzing the loader and the pool reader (issue 16): mutated safetensors files, config.json, sharded indexes
and pool files must load or fail with a typed error (ModelLoadError / ValueError, printable message); a
crash, a hang or any other exception is a finding.

Cases come from hypothesis strategies (fuzz/mutate.py) and run in a separate worker process (fuzz/worker.py),
restarted when a case kills it, so a crash fails the example (and hypothesis shrinks it) instead of the run.
The bounded run here is deterministic (derandomized, PYLOOKAHEAD_FUZZ_EXAMPLES cases per target, 750 by
default); `bash scripts/fuzz.sh` runs the long, randomized one. Findings become the regression cases at the
bottom of this file.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pylookahead
from fuzz.mutate import byte_mutation, json_mutation, safetensors_mutation
from fuzz.runner import Worker
from subproc import _child_env

EXAMPLES = int(os.environ.get("PYLOOKAHEAD_FUZZ_EXAMPLES", "750"))
RANDOM = os.environ.get("PYLOOKAHEAD_FUZZ_RANDOM") == "1"
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=not RANDOM,
                suppress_health_check=list(HealthCheck))  # fmt: skip


@pytest.fixture(scope="module")
def worker() -> Iterator[Worker]:
    w = Worker(_child_env({"OMP_NUM_THREADS": "1"}))
    yield w
    w.close()


@pytest.fixture(scope="module")
def seeds(tiny_model_factory, tmp_path_factory) -> dict[str, Path]:
    """Valid inputs to mutate: a single-file and a sharded tiny checkpoint, a pool saved for the first, a tiny GGUF."""
    single = tiny_model_factory("qwen2", seed=4)
    sharded = tiny_model_factory("llama", seed=4, sharded=True)
    pool = tmp_path_factory.mktemp("fuzz_pool") / "pool.bin"
    session = pylookahead.Session(single)
    lookahead = pylookahead.LookaheadConfig(window_size=2, ngram_size=3, verification_set_size=2)
    session.generate([1, 5, 6, 7, 5, 6, 7, 5], max_new_tokens=24, lookahead=lookahead, keep_pool=True)
    session.save_pool(pool)
    from test_gguf import Q, write_gguf

    gguf_dir = tmp_path_factory.mktemp("fuzz_gguf")
    gguf = write_gguf(tiny_model_factory("llama", seed=4), gguf_dir / "model.gguf", Q.Q4_1, Q.Q8_0)
    return {"single": single, "sharded": sharded, "pool": pool, "gguf": gguf}


class Cases:
    """A fresh case directory per example (hypothesis runs many examples in one test call)."""

    def __init__(self, root: Path) -> None:
        self.root, self.count = root, 0

    def new(self, template: Path | None) -> Path:
        self.count += 1
        case = self.root / f"case{self.count}"
        if case.exists():
            shutil.rmtree(case)
        if template is None:
            case.mkdir()
        else:
            shutil.copytree(template, case)
        return case


@pytest.fixture(scope="module")
def cases(tmp_path_factory) -> Cases:
    return Cases(tmp_path_factory.mktemp("fuzz_cases"))


# Outcomes per target, so the last test can check that the cases reached the engine.
OUTCOMES: dict[str, Counter[str]] = {}


def _check(worker: Worker, target: str, case: Path) -> None:
    outcome, detail = worker.run(target, case)
    OUTCOMES.setdefault(target, Counter())[outcome] += 1
    assert outcome in ("ok", "typed"), f"{target} case {case}: {outcome}: {detail}"


@FUZZ
@given(data=st.data())
def test_fuzz_safetensors(data, worker, seeds, cases) -> None:
    case = cases.new(seeds["single"])
    path = case / "model.safetensors"
    path.write_bytes(data.draw(safetensors_mutation(path.read_bytes())))
    _check(worker, "safetensors", case)


@FUZZ
@given(data=st.data())
def test_fuzz_config_json(data, worker, seeds, cases) -> None:
    case = cases.new(seeds["single"])
    name = data.draw(st.sampled_from(["config.json", "generation_config.json"]))
    path = case / name
    path.write_bytes(data.draw(json_mutation(json.loads(path.read_text()))))
    _check(worker, "config", case)


@FUZZ
@given(data=st.data())
def test_fuzz_sharded_index(data, worker, seeds, cases) -> None:
    case = cases.new(seeds["sharded"])
    path = case / "model.safetensors.index.json"
    path.write_bytes(data.draw(json_mutation(json.loads(path.read_text()))))
    _check(worker, "index", case)


@FUZZ
@given(data=st.data())
def test_fuzz_pool_file(data, worker, seeds, cases) -> None:
    case = cases.new(None)
    (case / "model").symlink_to(seeds["single"])
    (case / "pool.bin").write_bytes(data.draw(byte_mutation(seeds["pool"].read_bytes())))
    _check(worker, "pool", case)


@FUZZ
@given(data=st.data())
def test_fuzz_gguf_file(data, worker, seeds, cases) -> None:
    case = cases.new(None)
    (case / "model.gguf").write_bytes(data.draw(byte_mutation(seeds["gguf"].read_bytes())))
    _check(worker, "gguf", case)


def test_fuzz_cases_reached_the_engine() -> None:
    """Each target saw both inputs that still load and inputs refused with a typed error (a fuzzer whose cases
    all fail the same trivial way, or never reach the engine, tests nothing)."""
    if len(OUTCOMES) < 4:
        pytest.skip("runs after the four fuzz tests, in the same session")
    for target, counts in OUTCOMES.items():
        print(target, dict(counts))
        assert counts["ok"] > 0 and counts["typed"] > 0, (target, dict(counts))
