"""THE contract (issue 3): lookahead decoding returns exactly the engine's greedy token ids, in fewer steps.

* Tiny random Llama and Qwen2 checkpoints in float64: 10 seeds x a (W, N, G) grid with W=0 (verification only),
  W=1, N=2, N=3 and G=0,
  prompts with repetition so that candidates exist; a hypothesis property test over random prompts, configs,
  stop ids and lengths; stops inside an accepted run; the on_tokens callback; step statistics.
* The real SmolLM2-135M-Instruct checkpoint (slow) in float32 and bfloat16: 8 prompts (4 chat, 4 code) x 128 new
  tokens x 4 configs (one of them W=0); compression on a repetitive prompt; end ids and max_new_tokens hit inside an accepted run.

Equality is exact. The engine computes every row that decoding keeps with a row-invariant attention, so lookahead
is expected to be bit-exact against greedy; a real-model divergence fails with its index and the greedy
top-1/top-2 margin there (from the engine's own prefill logits), unless it is a documented near tie
(tolerances.py; it then passes with a NearTieDivergence warning). There is no escape for float64.

Everything runs on one intra-op thread (`single_thread`): on the shared 2-core CI machine two OpenMP threads that
lose their core make a step 20-40x slower. The real-model grid instead runs two sessions on two worker threads.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pylookahead
from pylookahead import GenerationOutput, LookaheadConfig, Session
from tiny_models import TINY_EOS_ID, TINY_VOCAB_SIZE
from tolerances import assert_same_tokens

pytestmark = pytest.mark.usefixtures("single_thread")


def la(w: int, n: int, g: int, r: int = 0, s: int = 0, k: int = 0, **kwargs) -> LookaheadConfig:
    """(W, N, G), or (W, N, G, R, S, K) for a draft tree of R rows with S suffix branches and recycling top-K."""
    return LookaheadConfig(
        window_size=w, ngram_size=n, verification_set_size=g, tree_rows=r, suffix_branches=s, recycle_top_k=k, **kwargs
    )


def cfg_id(cfg: tuple[int, ...]) -> str:
    return "W{}-N{}-G{}".format(*cfg) + ("-R{}-S{}-K{}".format(*cfg[3:]) if len(cfg) > 3 else "")


def check_stats(out: GenerationOutput, lookahead: LookaheadConfig | None) -> None:
    """Invariants of GenerationStats that hold for every generate() call."""
    s = out.stats
    hist = list(s.accept_histogram)
    assert s.new_tokens == len(out.token_ids) >= 1
    tree = lookahead is not None and lookahead.tree_rows > 0
    # A step emits at most N tokens (a draft tree: R + 1).
    most = (lookahead.tree_rows + 1 if tree else lookahead.ngram_size) if lookahead else 1
    assert len(hist) == most + 1, hist
    assert hist[0] == 0, hist
    # The first new token comes from the prefill; every later one from exactly one step.
    assert sum(k * count for k, count in enumerate(hist)) == s.new_tokens - 1, hist
    assert s.steps == sum(hist)
    assert len(s.step_times_s) == s.steps
    assert all(t > 0 for t in s.step_times_s)
    # A step's tokens are accepted drafts and its bonus token (a stop may cut the last step's bonus).
    drafted = sum(s.accepted_tokens_by_source.values())
    assert 0 <= drafted - sum((k - 1) * count for k, count in enumerate(hist) if k) <= 1, (hist, drafted)
    if not tree:
        # Every step that kept >= 2 tokens accepted an n-gram from the pool, from one of the two sources.
        assert sum(hist[2:]) <= s.accepted_from_prompt + s.accepted_from_window <= s.steps
        assert s.accepted_tokens_by_source["suffix"] == s.accepted_tokens_by_source["recycle"] == 0
    assert s.compression == pytest.approx((s.new_tokens - 1) / s.steps if s.steps else 0.0)
    if lookahead is None:
        assert s.steps == s.new_tokens - 1
        assert s.accepted_from_prompt == s.accepted_from_window == s.pool_size == 0


def engine_next_logits(session: Session, prompt: Sequence[int]):
    """`next_logits` for assert_same_tokens: the engine's own (prefill) logits after prompt + prefix."""
    return lambda prefix: session.prompt_logits(list(prompt) + list(prefix))[-1]


def chunks_and_output(session: Session, prompt, **kwargs) -> tuple[list[list[int]], GenerationOutput]:
    chunks: list[list[int]] = []
    out = session.generate(prompt, on_tokens=lambda ids: chunks.append(list(ids)), **kwargs)
    return chunks, out


def mid_chunk_cuts(chunks: list[list[int]]) -> list[int]:
    """Token counts k that cut an accepted multi-token chunk inside: tokens k-1 and k came from the same step."""
    cuts, start = [], 0
    for chunk in chunks:
        cuts += range(start + 1, start + len(chunk))
        start += len(chunk)
    return cuts


# ----------------------------------------------------------------------------------------------------------------
# tiny random models, float64

TINY_ARCHS = ["llama", "qwen2"]
TINY_SEEDS = range(10)
TINY_NEW_TOKENS = 48
GRID = [(1, 2, 0), (1, 2, 1), (2, 3, 2), (4, 4, 4), (5, 4, 2), (8, 3, 8), (3, 5, 1), (16, 4, 16), (0, 3, 2), (0, 5, 4)]
# Draft trees (W, N, G, R, S, K): the pool as a trie, suffix lookup alone, recycling alone, mixes.
GRID += [(0, 4, 4, 8, 0, 0), (0, 3, 0, 8, 2, 0), (0, 3, 0, 12, 0, 4), (3, 4, 3, 16, 2, 2), (0, 5, 8, 32, 4, 8)]


def repetitive_prompt(seed: int) -> list[int]:
    """BOS, a random 5-token phrase three times, 4 random tokens, then the phrase's start again."""
    rng = random.Random(seed)
    phrase = [rng.randrange(3, TINY_VOCAB_SIZE) for _ in range(5)]
    return [1] + phrase * 3 + [rng.randrange(3, TINY_VOCAB_SIZE) for _ in range(4)] + phrase[:2]


class TinyCase:
    """A float64 session over tiny (arch, seed) and its greedy reference, computed once."""

    def __init__(self, model_dir: Path, seed: int) -> None:
        self.session = Session(model_dir, dtype="float64")
        self.prompt = repetitive_prompt(seed)
        self.greedy = self.session.generate(self.prompt, max_new_tokens=TINY_NEW_TOKENS)
        check_stats(self.greedy, None)


@pytest.fixture(scope="module")
def tiny_case(tiny_model_factory):
    cache: dict[tuple[str, int], TinyCase] = {}

    def get(arch: str, seed: int) -> TinyCase:
        if (arch, seed) not in cache:
            cache[arch, seed] = TinyCase(tiny_model_factory(arch, seed=seed), seed)
        return cache[arch, seed]

    return get


@pytest.mark.parametrize("cfg", GRID, ids=cfg_id)
@pytest.mark.parametrize("seed", TINY_SEEDS)
@pytest.mark.parametrize("arch", TINY_ARCHS)
def test_tiny_lookahead_equals_greedy(tiny_case, arch: str, seed: int, cfg: tuple[int, int, int]) -> None:
    case = tiny_case(arch, seed)
    lookahead = la(*cfg)
    out = case.session.generate(case.prompt, max_new_tokens=TINY_NEW_TOKENS, lookahead=lookahead)
    assert_same_tokens(
        case.greedy.token_ids,
        out.token_ids,
        dtype="float64",
        next_logits=engine_next_logits(case.session, case.prompt),
        what=f"tiny {arch} seed={seed} float64 {lookahead}, prompt {case.prompt}",
    )
    assert out.stop_reason == case.greedy.stop_reason
    check_stats(out, lookahead)
    if len(cfg) == 3 and cfg[2] == 0:  # no candidates to verify: one token per step, like greedy
        assert out.stats.steps == case.greedy.stats.steps


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_tiny_wide_gqa_group_lookahead_equals_greedy(tiny_model_factory, dtype: str) -> None:
    """Six query heads on one KV head: the attention kernel runs a KV head's query heads in tiles (at most 4 on AVX2
    and the generic build: here 4 + 2; 8 on AVX-512: one of 6), and each row's bits must not depend on the step's
    width."""
    model_dir = tiny_model_factory(
        "llama", seed=3, hidden_size=96, num_attention_heads=6, num_key_value_heads=1, head_dim=16
    )
    session = Session(model_dir, dtype=dtype)
    prompt = repetitive_prompt(3)
    greedy = session.generate(prompt, max_new_tokens=TINY_NEW_TOKENS)
    fewer_steps = False
    for cfg in [(4, 4, 4), (0, 5, 4), (3, 4, 3, 16, 2, 2)]:
        out = session.generate(prompt, max_new_tokens=TINY_NEW_TOKENS, lookahead=la(*cfg))
        assert out.token_ids == greedy.token_ids, f"{dtype} {cfg_id(cfg)}"
        fewer_steps = fewer_steps or out.stats.steps < greedy.stats.steps
    assert fewer_steps, "no config accepted a draft: the equality above would be vacuous"


def test_tiny_grid_exercises_multi_token_acceptance(tiny_case) -> None:
    """The equality above is not vacuous: on every (arch, seed), the largest config accepts multi-token runs."""
    for arch in TINY_ARCHS:
        for seed in TINY_SEEDS:
            case = tiny_case(arch, seed)
            out = case.session.generate(case.prompt, max_new_tokens=TINY_NEW_TOKENS, lookahead=la(16, 4, 16))
            if len(out.token_ids) >= 16:
                assert sum(out.stats.accept_histogram[2:]) > 0, (arch, seed)


def test_tiny_compresses_on_a_repetitive_prompt(tiny_case) -> None:
    case = tiny_case("llama", 0)
    out = case.session.generate(case.prompt, max_new_tokens=TINY_NEW_TOKENS, lookahead=la(16, 4, 16))
    assert out.token_ids == case.greedy.token_ids
    assert len(out.token_ids) == TINY_NEW_TOKENS
    assert out.stats.steps < out.stats.new_tokens - 1  # greedy takes new_tokens - 1 steps
    assert out.stats.compression > 1.2


@pytest.mark.parametrize("arch", TINY_ARCHS)
def test_tiny_verification_only_compresses_from_the_prompt_alone(tiny_case, arch: str) -> None:
    """window_size=0: no Jacobi window; every accepted n-gram comes from the prompt / output, and it still compresses."""
    case = tiny_case(arch, 0)
    lookahead = la(0, 4, 4)
    assert lookahead.tokens_per_step == 1 + 4 * 3
    out = case.session.generate(case.prompt, max_new_tokens=TINY_NEW_TOKENS, lookahead=lookahead)
    assert out.token_ids == case.greedy.token_ids
    check_stats(out, lookahead)
    assert out.stats.accepted_from_window == 0
    assert out.stats.accepted_from_prompt == sum(out.stats.accept_histogram[2:]) > 0
    assert out.stats.steps < out.stats.new_tokens - 1
    without_seeds = case.session.generate(
        case.prompt, max_new_tokens=TINY_NEW_TOKENS, lookahead=la(0, 4, 4, seed_from_prompt=False)
    )
    assert without_seeds.token_ids == case.greedy.token_ids
    assert without_seeds.stats.steps == without_seeds.stats.new_tokens - 1  # nothing to verify: greedy steps
    assert without_seeds.stats.pool_size == 0


@pytest.mark.parametrize("arch", TINY_ARCHS)
def test_tiny_max_new_tokens_inside_an_accepted_run(tiny_case, arch: str) -> None:
    """max_new_tokens = k gives exactly greedy[:k] for every k, including cuts inside multi-token runs."""
    case = tiny_case(arch, 0)
    greedy = case.greedy.token_ids
    lookahead = la(16, 4, 16)
    chunks, full = chunks_and_output(case.session, case.prompt, max_new_tokens=len(greedy), lookahead=lookahead)
    assert full.token_ids == greedy
    assert mid_chunk_cuts(chunks), "no multi-token acceptance: the test would not cut inside one"
    for k in range(1, len(greedy) + 1):
        out = case.session.generate(case.prompt, max_new_tokens=k, lookahead=lookahead)
        assert out.token_ids == greedy[:k], f"max_new_tokens={k}"
        expected_reason = "end_token" if greedy[k - 1] == TINY_EOS_ID else "max_new_tokens"
        assert out.stop_reason == expected_reason, f"max_new_tokens={k}"
        check_stats(out, lookahead)


@pytest.mark.parametrize("arch", TINY_ARCHS)
def test_tiny_stop_token_inside_an_accepted_run(tiny_case, arch: str) -> None:
    """A stop id produced inside a multi-token run truncates right after its first occurrence."""
    case = tiny_case(arch, 0)
    greedy = case.greedy.token_ids
    lookahead = la(16, 4, 16)
    chunks, _ = chunks_and_output(case.session, case.prompt, max_new_tokens=len(greedy), lookahead=lookahead)
    positions = [k for k in mid_chunk_cuts(chunks) if k - 1 == greedy.index(greedy[k - 1])]
    assert positions, f"no first occurrence of a token inside a multi-token run; chunks {chunks}"
    for k in positions:
        stop = greedy[k - 1]
        out = case.session.generate(case.prompt, max_new_tokens=len(greedy), lookahead=lookahead,
                                    stop_token_ids=[stop])  # fmt: skip
        assert out.token_ids == greedy[:k], f"stop id {stop} (first at new token {k - 1})"
        assert out.stop_reason == "end_token"
        check_stats(out, lookahead)
        ref = case.session.generate(case.prompt, max_new_tokens=len(greedy), stop_token_ids=[stop])
        assert ref.token_ids == greedy[:k]


def test_tiny_on_tokens_chunks_concatenate_to_the_output(tiny_case) -> None:
    case = tiny_case("qwen2", 0)
    for lookahead in (None, la(4, 4, 4), la(16, 4, 16)):
        chunks, out = chunks_and_output(case.session, case.prompt, max_new_tokens=TINY_NEW_TOKENS,
                                        lookahead=lookahead)  # fmt: skip
        assert [t for chunk in chunks for t in chunk] == out.token_ids == case.greedy.token_ids
        assert len(chunks) == out.stats.steps + 1  # the prefill's token, then one chunk per step
        assert all(chunks)


@pytest.mark.parametrize("lookahead", [None, (4, 4, 4), (16, 4, 16)], ids=str)
@pytest.mark.parametrize("after", [1, 5, 20])
def test_tiny_on_tokens_false_stops(tiny_case, lookahead, after: int) -> None:
    """Returning False from on_tokens stops after that chunk; the output is what was reported."""
    case = tiny_case("llama", 0)
    cfg = la(*lookahead) if lookahead else None
    seen: list[int] = []

    def on_tokens(ids: list[int]) -> bool:
        seen.extend(ids)
        return len(seen) < after

    out = case.session.generate(case.prompt, max_new_tokens=TINY_NEW_TOKENS, lookahead=cfg, on_tokens=on_tokens)
    assert out.stop_reason == "callback"
    assert out.token_ids == seen == case.greedy.token_ids[: len(seen)]
    assert after <= len(seen) < after + (cfg.ngram_size if cfg else 1)
    check_stats(out, cfg)


def test_tiny_on_tokens_none_continues(tiny_case) -> None:
    case = tiny_case("llama", 0)
    out = case.session.generate(case.prompt, max_new_tokens=TINY_NEW_TOKENS, lookahead=la(4, 4, 4),
                                on_tokens=lambda ids: None)  # fmt: skip
    assert out.token_ids == case.greedy.token_ids


# ----------------------------------------------------------------------------------------------------------------
# property test: random prompts, configs, stop ids and lengths on one tiny model

token = st.integers(3, TINY_VOCAB_SIZE - 1)


@st.composite
def prompts(draw) -> list[int]:
    phrase = draw(st.lists(token, min_size=1, max_size=8))
    repeats = draw(st.integers(1, 4))
    tail = draw(st.lists(token, max_size=6))
    return [1] + phrase * repeats + tail


@settings(max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    prompt=prompts(),
    w=st.integers(0, 8),
    n=st.integers(2, 5),
    g=st.integers(0, 8),
    seed_from_prompt=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
    max_new_tokens=st.integers(1, 40),
    stop_token_ids=st.lists(token, max_size=2),
)
def test_property_lookahead_equals_greedy(
    tiny_case, prompt, w, n, g, seed_from_prompt, seed, max_new_tokens, stop_token_ids
) -> None:
    session = tiny_case("llama", 0).session
    g = max(g, 1) if w == 0 else g  # W = 0 (verification only) needs a candidate slot
    lookahead = la(w, n, g, seed_from_prompt=seed_from_prompt, seed=seed)
    greedy = session.generate(prompt, max_new_tokens=max_new_tokens, stop_token_ids=stop_token_ids)
    out = session.generate(prompt, max_new_tokens=max_new_tokens, stop_token_ids=stop_token_ids, lookahead=lookahead)
    assert out.token_ids == greedy.token_ids, f"{lookahead} seed_from_prompt={seed_from_prompt} seed={seed}"
    assert out.stop_reason == greedy.stop_reason
    check_stats(out, lookahead)
    check_stats(greedy, None)


def test_greedy_stats(tiny_case) -> None:
    case = tiny_case("qwen2", 3)
    check_stats(case.greedy, None)
    assert list(case.greedy.stats.accept_histogram) == [0, len(case.greedy.token_ids) - 1]


# ----------------------------------------------------------------------------------------------------------------
# the real SmolLM2-135M-Instruct checkpoint, float32 and bfloat16 (slow)

REAL_NEW_TOKENS = 128
REAL_CONFIGS = [(4, 4, 4), (8, 4, 8), (2, 3, 2), (0, 4, 4), (0, 5, 8, 16, 4, 8), (2, 4, 2, 12, 2, 0)]
REAL_DTYPES = ["float32", "bfloat16"]

CHAT_PROMPTS = {
    "chat-hash-table": "Explain how a hash table works.",
    "chat-robot-story": "Write a short story about a robot who learns to paint.",
    "chat-tcp-udp": "What are the differences between TCP and UDP?",
    "chat-linked-list": "Write a Python function that reverses a singly linked list, with comments.",
}
CODE_PROMPTS = {
    "code-fibonacci": 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n',
    "code-is-prime": 'def is_prime(n: int) -> bool:\n    """Return True if n is a prime number."""\n',
    "code-stack": 'class Stack:\n    """A simple LIFO stack."""\n\n    def __init__(self):\n',
    "code-bubble-sort": 'def bubble_sort(items):\n    """Sort a list in place with bubble sort and return it."""\n',
}
COUNTING_PROMPT = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,"  # greedy continues the sequence: very compressible

RealCase = tuple[str, str, tuple[int, ...]]  # (dtype, prompt name, (W, N, G) or (W, N, G, R, S, K))
REAL_CASES: list[RealCase] = [
    (dtype, name, cfg) for dtype in REAL_DTYPES for name in [*CHAT_PROMPTS, *CODE_PROMPTS] for cfg in REAL_CONFIGS
]


class RealModel:
    """SmolLM2 per dtype: one shared Model, sessions, and each run's output computed once.

    The grid below is ~100 generate() calls of 128 tokens. Each session runs on one intra-op thread (the
    `single_thread` fixture), so `start_grid` runs the grid on two worker threads, each with its own sessions over
    the shared Model (sessions over one Model may run in parallel), to use both cores of the CI machine. It queues
    the runs of the collected tests in test order; each test waits for its own.
    """

    def __init__(self, model_dir: Path) -> None:
        self.model_dir = model_dir
        self._models: dict[str, pylookahead.Model] = {}
        self._main_sessions: dict[str, Session] = {}
        self._worker = threading.local()  # .sessions: a worker thread's own sessions
        self._runs: dict[tuple, Future] = {}  # (dtype, name, max_new_tokens, cfg or None) -> output
        self._pool: ThreadPoolExecutor | None = None

    def model(self, dtype: str) -> pylookahead.Model:
        if dtype not in self._models:
            self._models[dtype] = pylookahead.Model(self.model_dir, dtype=dtype)
        return self._models[dtype]

    def session(self, dtype: str) -> Session:
        """The calling thread's session (one Session must not be used by two threads at once)."""
        if threading.current_thread() is threading.main_thread():
            sessions = self._main_sessions
        else:
            sessions = self._worker.__dict__.setdefault("sessions", {})
        if dtype not in sessions:
            sessions[dtype] = Session(self.model(dtype), kv_capacity=512)
        return sessions[dtype]

    def prompt(self, name: str) -> list[int]:
        tokenizer = self.model("float32").tokenizer
        if name in CHAT_PROMPTS:
            return tokenizer.encode_chat([{"role": "user", "content": CHAT_PROMPTS[name]}])
        return tokenizer.encode(CODE_PROMPTS[name] if name in CODE_PROMPTS else COUNTING_PROMPT)

    def _generate(self, key: tuple) -> GenerationOutput:
        dtype, name, max_new_tokens, cfg = key
        lookahead = la(*cfg) if cfg else None
        return self.session(dtype).generate(self.prompt(name), max_new_tokens=max_new_tokens, lookahead=lookahead)

    def _run(self, key: tuple) -> GenerationOutput:
        if key not in self._runs:  # not queued: run it here, now
            future: Future = Future()
            future.set_result(self._generate(key))
            self._runs[key] = future
        return self._runs[key].result()

    def greedy(self, dtype: str, name: str, max_new_tokens: int = REAL_NEW_TOKENS) -> GenerationOutput:
        return self._run((dtype, name, max_new_tokens, None))

    def lookahead(self, case: RealCase) -> GenerationOutput:
        dtype, name, cfg = case
        return self._run((dtype, name, REAL_NEW_TOKENS, cfg))

    def start_grid(self, cases: list[RealCase]) -> None:
        """Queue each case's greedy (once per prompt) and lookahead run, in order, on two worker threads."""
        for dtype in dict.fromkeys(case[0] for case in cases):
            self.model(dtype)  # load in the main thread
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="smollm2")
        for dtype, name, cfg in cases:
            for key in [(dtype, name, REAL_NEW_TOKENS, None), (dtype, name, REAL_NEW_TOKENS, cfg)]:
                if key not in self._runs:
                    self._runs[key] = self._pool.submit(self._generate, key)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)


@pytest.fixture(scope="module")
def real(request: pytest.FixtureRequest, smollm2_dir: Path):
    model = RealModel(smollm2_dir)
    wanted = [
        tuple(item.callspec.params["case"])
        for item in request.session.items
        if item.path == request.path and getattr(item, "originalname", None) == "test_smollm2_lookahead_equals_greedy"
    ]
    model.start_grid(wanted)  # type: ignore[arg-type]
    yield model
    model.close()


@pytest.mark.slow
@pytest.mark.parametrize("case", REAL_CASES, ids=lambda c: f"{c[0]}-{c[1]}-{cfg_id(c[2])}")
def test_smollm2_lookahead_equals_greedy(real: RealModel, case: RealCase) -> None:
    dtype, name, cfg = case
    greedy, out = real.greedy(dtype, name), real.lookahead(case)
    check_stats(greedy, None)
    check_stats(out, la(*cfg))
    session, prompt = real.session(dtype), real.prompt(name)
    identical = assert_same_tokens(
        greedy.token_ids,
        out.token_ids,
        dtype=dtype,
        next_logits=engine_next_logits(session, prompt),
        what=(
            f"SmolLM2 {dtype} prompt {name!r} {la(*cfg)}, max_new_tokens={REAL_NEW_TOKENS}; reproduce: "
            f"s = Session(<smollm2 dir>, dtype={dtype!r}); ids = {prompt}; "
            f"s.generate(ids, {REAL_NEW_TOKENS}, lookahead={la(*cfg)!r}).token_ids "
            f"vs s.generate(ids, {REAL_NEW_TOKENS}).token_ids"
        ),
        decode=session.decode,
    )
    if identical:
        assert out.stop_reason == greedy.stop_reason


@pytest.mark.slow
def test_smollm2_prompts_give_long_outputs(real: RealModel) -> None:
    """The 128-token comparisons cover long texts: most prompts run to max_new_tokens."""
    lengths = {name: len(real.greedy("float32", name).token_ids) for name in [*CHAT_PROMPTS, *CODE_PROMPTS]}
    assert sum(n == REAL_NEW_TOKENS for n in lengths.values()) >= 6, lengths


@pytest.mark.slow
@pytest.mark.parametrize("dtype", REAL_DTYPES)
def test_smollm2_compresses_on_a_repetitive_prompt(real: RealModel, dtype: str) -> None:
    greedy = real.greedy(dtype, "counting", 64)
    lookahead = la(4, 4, 4)
    out = real.session(dtype).generate(real.prompt("counting"), max_new_tokens=64, lookahead=lookahead)
    assert out.token_ids == greedy.token_ids
    assert len(out.token_ids) == 64
    assert out.stats.steps < out.stats.new_tokens - 1  # greedy needs new_tokens - 1 steps
    assert out.stats.compression > 1.5, list(out.stats.accept_histogram)
    check_stats(out, lookahead)


@pytest.mark.slow
def test_smollm2_stops_inside_an_accepted_run(real: RealModel) -> None:
    """End ids and max_new_tokens reached inside a multi-token acceptance truncate exactly there (float32)."""
    session, prompt = real.session("float32"), real.prompt("counting")
    greedy = real.greedy("float32", "counting", 64).token_ids
    lookahead = la(4, 4, 4)
    chunks, full = chunks_and_output(session, prompt, max_new_tokens=len(greedy), lookahead=lookahead)
    assert [t for chunk in chunks for t in chunk] == full.token_ids == greedy
    cuts = [k for k in mid_chunk_cuts(chunks) if k <= 32]
    assert len(cuts) >= 4, f"too few multi-token acceptances in the first 32 tokens: chunks {chunks}"

    for k in [1, 2, *cuts[:6]]:
        out = session.generate(prompt, max_new_tokens=k, lookahead=lookahead)
        assert out.token_ids == greedy[:k], f"max_new_tokens={k}"
        assert out.stop_reason == "max_new_tokens"
        check_stats(out, lookahead)

    firsts = [k for k in mid_chunk_cuts(chunks) if k - 1 == greedy.index(greedy[k - 1])]
    assert firsts, f"no first occurrence of a token inside a multi-token run: chunks {chunks}"
    for k in firsts[:3]:
        stop = greedy[k - 1]
        out = session.generate(prompt, max_new_tokens=len(greedy), lookahead=lookahead, stop_token_ids=[stop])
        assert out.token_ids == greedy[:k], f"stop id {stop} {session.decode([stop])!r} (first at new token {k - 1})"
        assert out.stop_reason == "end_token"
        check_stats(out, lookahead)


@pytest.mark.slow
def test_smollm2_on_tokens_false_stops(real: RealModel) -> None:
    session, prompt = real.session("float32"), real.prompt("counting")
    greedy = real.greedy("float32", "counting", 64).token_ids
    seen: list[int] = []

    def on_tokens(ids: list[int]) -> bool:
        seen.extend(ids)
        return len(seen) < 10

    out = session.generate(prompt, max_new_tokens=64, lookahead=la(4, 4, 4), on_tokens=on_tokens)
    assert out.stop_reason == "callback"
    assert out.token_ids == seen == greedy[: len(seen)]
    assert 10 <= len(seen) < 14
