"""The engine on a CUDA device (docs/design.md, "CUDA"): exactness of the fixed-row decode step, graph replay
against eager steps, device-side sampling, errors and threads.

Tests marked `cuda` need a GPU and a build against a CUDA torch (`scripts/gpu_check.sh` runs them); elsewhere they
are skipped. The option checks at the end run everywhere.
"""

from __future__ import annotations

import threading

import pytest
from test_lookahead_exact import engine_next_logits, la, repetitive_prompt
from tolerances import assert_same_tokens

import pylookahead
from pylookahead import Model, Session

torch = pytest.importorskip("torch")

HAS_CUDA = torch.cuda.is_available()

ARCHS = ["llama", "qwen2"]
SEEDS = range(3)
NEW_TOKENS = 48
ROWS = 96  # cuda_step_rows of the grid's sessions: the widest config below, (16 + 16) * (4 - 1)
# (W, N, G) and draft trees (W, N, G, R, S, K): verification only (W = 0), small and wide windows.
GRID = [(0, 3, 2), (0, 5, 4), (1, 2, 1), (2, 3, 2), (4, 4, 4), (5, 4, 2), (8, 3, 8), (3, 5, 1), (16, 4, 16)]
GRID += [(0, 4, 4, 8, 0, 0), (3, 4, 3, 16, 2, 2)]


def cfg_id(cfg: tuple[int, ...]) -> str:
    return ",".join(map(str, cfg))


_models: dict[tuple, Model] = {}


def cuda_model(path, dtype: str, graphs: bool = True) -> Model:
    """One loaded Model per (checkpoint, dtype, graphs) for the module."""
    key = (str(path), dtype, graphs)
    if key not in _models:
        _models[key] = Model(path, device="cuda", dtype=dtype, use_cuda_graphs=graphs)
    return _models[key]


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("arch", ARCHS)
def test_cuda_fp32_greedy_matches_cpu_float64(tiny_model_factory, arch: str, seed: int) -> None:
    path = tiny_model_factory(arch, seed=seed)
    prompt = repetitive_prompt(seed)
    reference = Session(path, dtype="float64")
    want = reference.generate(prompt, max_new_tokens=NEW_TOKENS)
    session = Session(cuda_model(path, "float32"))
    got = session.generate(prompt, max_new_tokens=NEW_TOKENS)
    assert session.model.info.device == "cuda:0"
    assert got.stats.cuda_graphs == 1 and got.stats.cuda_graph_bytes > 0
    assert_same_tokens(
        want.token_ids,
        got.token_ids,
        dtype="float32",
        next_logits=engine_next_logits(reference, prompt),
        what=f"tiny {arch} seed={seed}: CUDA float32 greedy vs CPU float64 greedy, prompt {prompt}",
    )


@pytest.fixture(scope="module")
def grid_case(tiny_model_factory):
    """(arch, seed, dtype) -> (session with cuda_step_rows=ROWS, prompt, its greedy output), computed once."""
    cache: dict[tuple, tuple] = {}

    def get(arch: str, seed: int, dtype: str):
        key = (arch, seed, dtype)
        if key not in cache:
            session = Session(cuda_model(tiny_model_factory(arch, seed=seed), dtype), cuda_step_rows=ROWS)
            prompt = repetitive_prompt(seed)
            cache[key] = (session, prompt, session.generate(prompt, max_new_tokens=NEW_TOKENS))
        return cache[key]

    return get


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("cfg", GRID, ids=cfg_id)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("arch", ARCHS)
def test_cuda_lookahead_equals_greedy(grid_case, arch: str, seed: int, dtype: str, cfg: tuple[int, ...]) -> None:
    session, prompt, greedy = grid_case(arch, seed, dtype)
    lookahead = la(*cfg)
    out = session.generate(prompt, max_new_tokens=NEW_TOKENS, lookahead=lookahead)
    # Exact: no near-tie allowance (the bound of "float64" is 0); a failure reports the first divergence and
    # the greedy logit margin there.
    assert_same_tokens(
        greedy.token_ids,
        out.token_ids,
        dtype="float64",
        next_logits=engine_next_logits(session, prompt),
        what=f"tiny {arch} seed={seed} CUDA {dtype} {lookahead} vs greedy (cuda_step_rows={ROWS}), prompt {prompt}",
    )
    assert out.stop_reason == greedy.stop_reason


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_cuda_grid_accepts_multi_token_runs(grid_case) -> None:
    """The equalities above are not vacuous: the wide config accepts several tokens in some steps."""
    session, prompt, _ = grid_case("llama", 0, "bfloat16")
    out = session.generate(prompt, max_new_tokens=NEW_TOKENS, lookahead=la(16, 4, 16))
    assert out.stats.steps < NEW_TOKENS - 1 and max(i for i, n in enumerate(out.stats.accept_histogram) if n) >= 2


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("arch", ARCHS)
def test_cuda_graph_replay_equals_eager_steps(tiny_model_factory, arch: str, dtype: str) -> None:
    """The captured graph and the eager step give the same tokens, greedy, lookahead and sampled (the sampled
    draws hinge on the logits' exact values), and only the graph Session holds a graph."""
    path = tiny_model_factory(arch, seed=1)
    graph, eager = Session(cuda_model(path, dtype, graphs=True)), Session(cuda_model(path, dtype, graphs=False))
    assert graph.model.info.cuda_graphs and not eager.model.info.cuda_graphs
    for seed in SEEDS:
        prompt = repetitive_prompt(seed)
        for options in ({}, {"lookahead": la(4, 4, 4)}, {"temperature": 1.3, "seed": seed}):
            a = graph.generate(prompt, max_new_tokens=NEW_TOKENS, **options)
            b = eager.generate(prompt, max_new_tokens=NEW_TOKENS, **options)
            assert a.token_ids == b.token_ids, (arch, dtype, seed, options)
            assert a.stats.cuda_graphs == 1 and b.stats.cuda_graphs == 0
            assert a.stats.cuda_graph_bytes > 0 and b.stats.cuda_graph_bytes == 0


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("sampling", [dict(temperature=0.8), dict(temperature=1.0, top_k=20, top_p=0.9)], ids=str)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_cuda_sampled_lookahead_equals_plain_sampling(tiny_model_factory, dtype: str, sampling: dict) -> None:
    session = Session(cuda_model(tiny_model_factory("llama", seed=2), dtype), cuda_step_rows=ROWS)
    for seed in SEEDS:
        prompt = repetitive_prompt(seed)
        plain = session.generate(prompt, max_new_tokens=NEW_TOKENS, seed=seed, **sampling)
        for cfg in [(0, 4, 4), (4, 4, 4), (16, 4, 16)]:
            out = session.generate(prompt, max_new_tokens=NEW_TOKENS, seed=seed, lookahead=la(*cfg), **sampling)
            assert out.token_ids == plain.token_ids, (dtype, sampling, seed, cfg)
        other = session.generate(prompt, max_new_tokens=NEW_TOKENS, seed=seed + 100, **sampling)
        assert other.token_ids != plain.token_ids  # the seed matters: the draws are not argmax in disguise


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_cuda_auto_equals_greedy(grid_case) -> None:
    session, prompt, greedy = grid_case("qwen2", 0, "bfloat16")
    out = session.generate(prompt, max_new_tokens=NEW_TOKENS, lookahead="auto")
    assert out.token_ids == greedy.token_ids


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_cuda_capacity_and_step_rows_errors(tiny_model_factory) -> None:
    model = cuda_model(tiny_model_factory("llama", seed=0), "bfloat16")
    session = Session(model, kv_capacity=64, cuda_step_rows=16)
    prompt = repetitive_prompt(0)
    with pytest.raises(ValueError, match="kv_capacity"):
        session.generate(prompt, max_new_tokens=64 - len(prompt))
    with pytest.raises(ValueError, match="cuda_step_rows"):  # (4 + 4) * 3 = 24 tokens > 16 rows
        session.generate(prompt, max_new_tokens=8, lookahead=la(4, 4, 4))
    # The session still works after both errors, up to its capacity.
    out = session.generate(prompt, max_new_tokens=64 - len(prompt) - 16, lookahead=la(2, 3, 2))
    assert out.token_ids == session.generate(prompt, max_new_tokens=64 - len(prompt) - 16).token_ids


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_cuda_two_sessions_on_one_model_in_two_threads(tiny_model_factory) -> None:
    model = cuda_model(tiny_model_factory("qwen2", seed=1), "bfloat16")
    prompts = [repetitive_prompt(s) for s in SEEDS]
    reference = Session(model)
    want = {
        (i, cfg): reference.generate(p, max_new_tokens=NEW_TOKENS, lookahead=la(*cfg) if cfg else None).token_ids
        for i, p in enumerate(prompts)
        for cfg in [None, (4, 4, 4)]
    }
    got: dict = {}
    errors: list[BaseException] = []

    def work(cfg) -> None:
        try:
            session = Session(model)  # its own cache and graph, captured in this thread
            for _ in range(2):
                for i, p in enumerate(prompts):
                    got[i, cfg] = session.generate(
                        p, max_new_tokens=NEW_TOKENS, lookahead=la(*cfg) if cfg else None
                    ).token_ids
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(cfg,)) for cfg in [None, (4, 4, 4)]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert got == want
    assert want[0, None] == want[0, (4, 4, 4)]


def test_cuda_options_are_validated_on_any_machine(tiny_model_factory) -> None:
    path = tiny_model_factory("llama", seed=0)
    for rows in (0, 1025, -3):
        with pytest.raises(ValueError, match="cuda_step_rows must be in 1 .. 1024"):
            Session(path, cuda_step_rows=rows)
    with pytest.raises(ValueError, match="use_cuda_graphs"):
        Model(path, use_cuda_graphs="yes")  # type: ignore[arg-type]
    if not HAS_CUDA:
        with pytest.raises(ValueError, match="cuda"):
            Model(path, device="cuda")
    else:
        with pytest.raises(ValueError, match="float64"):
            Model(path, device="cuda", dtype="float64")
    # On the CPU the option is accepted and changes nothing.
    session = Session(path, cuda_step_rows=8)
    assert session.model.info.cuda_graphs is False
    out = session.generate(repetitive_prompt(0), max_new_tokens=8, lookahead=la(4, 4, 4))
    assert out.stats.cuda_graphs == 0 and out.stats.cuda_graph_bytes == 0
    assert pylookahead.__all__  # the package imported with the new options bound
