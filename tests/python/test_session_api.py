"""The Python session API: string and id prompts, argument errors, KV capacity, reuse, determinism, stats.

Runs on the tiny random Llama checkpoint (float32, word-level tokenizer), so it needs no downloads.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import pylookahead
from pylookahead import LookaheadConfig, Session
from subproc import run_python
from tiny_models import TINY_VOCAB_SIZE

pytestmark = pytest.mark.usefixtures("single_thread")

TEXT = "the cat sat on the mat and the dog sat on the cat"
IDS = [1, 24, 30, 31, 27, 24, 32, 28, 24, 29, 31, 27]  # any valid ids (the tiny vocabulary has 97)
LOOKAHEAD = LookaheadConfig(window_size=4, ngram_size=3, verification_set_size=4)


@pytest.fixture(scope="module")
def session(tiny_llama: Path) -> Session:
    return Session(tiny_llama)


def in_context(session: Session, prompt: list[int], ids: list[int]) -> str:
    """The text of `ids` as decoded after the prompt (what `.text` holds): spacing in context."""
    before = session.tokenizer.decode(prompt)
    full = session.tokenizer.decode(prompt + ids)
    assert full.startswith(before)
    return full[len(before) :]


# ----------------------------------------------------------------------------------------------------------------
# prompts


@pytest.mark.parametrize("lookahead", [None, LOOKAHEAD], ids=["greedy", "lookahead"])
def test_string_prompt_round_trips(session: Session, lookahead) -> None:
    out = session.generate(TEXT, max_new_tokens=12, lookahead=lookahead)
    assert len(out.token_ids) == 12
    assert out.text == in_context(session, session.tokenizer.encode(TEXT), out.token_ids)
    assert out.text.count(" ") == 12  # the word tokenizer joins tokens with spaces, after the prompt too
    # A string is the same prompt as its token ids.
    assert session.generate(session.tokenizer.encode(TEXT), max_new_tokens=12).token_ids == out.token_ids


@pytest.mark.parametrize(
    "prompt", [IDS, tuple(IDS), [1], [TINY_VOCAB_SIZE - 1]], ids=["list", "tuple", "bos", "last-id"]
)
def test_id_prompts(session: Session, prompt) -> None:
    out = session.generate(prompt, max_new_tokens=6)
    assert 1 <= len(out.token_ids) <= 6
    assert all(0 <= t < TINY_VOCAB_SIZE for t in out.token_ids)
    assert out.stats.prompt_tokens == len(prompt)
    assert out.text == in_context(session, list(prompt), out.token_ids)


def test_prompt_logits_shape(session: Session) -> None:
    logits = session.prompt_logits(IDS)
    assert logits.shape == (len(IDS), TINY_VOCAB_SIZE)
    # The greedy first token is the argmax of the last prompt position.
    assert session.generate(IDS, max_new_tokens=1).token_ids == [int(logits[-1].argmax())]


def test_public_names() -> None:
    # What the Python calls take, return and raise; the engine's option structs stay in _core.
    assert sorted(pylookahead.__all__) == sorted([
        "AutoLookahead", "GenerationOutput", "LookaheadConfig", "Model", "ModelLoadError", "ModelNotPulledError",
        "Session", "SessionBusyError", "StreamChunk", "__version__",
    ])  # fmt: skip
    for name in ("EngineConfig", "GenerationConfig", "SessionConfig"):
        assert not hasattr(pylookahead, name) and hasattr(pylookahead._core, name)


_IMPORTS_CHILD = """
import sys
import pylookahead
session = pylookahead.Session(sys.argv[1])
session.generate("the cat", max_new_tokens=2)
print(sorted(m for m in sys.modules if m.startswith("pylookahead.")))
"""


def test_the_library_does_not_import_the_tools(tiny_llama: Path) -> None:
    proc = run_python(_IMPORTS_CHILD, str(tiny_llama), timeout=120)
    assert proc.returncode == 0, proc.stderr
    loaded = proc.stdout.strip()
    assert "pylookahead.session" in loaded and "pylookahead.tools" not in loaded, loaded


def test_string_prompt_without_tokenizer(tiny_model_factory) -> None:
    session = Session(tiny_model_factory("llama", with_tokenizer=False))
    with pytest.raises(ValueError, match="tokenizer.json"):
        session.generate("the cat")
    out = session.generate(IDS, max_new_tokens=3)
    assert len(out.token_ids) == 3 and out.text == ""


# ----------------------------------------------------------------------------------------------------------------
# bad arguments: ValueError naming the field, the value and the rule (the engine's rules; Python's types)

LOOKAHEAD_KINDS = r"lookahead must be None, 'auto', a LookaheadConfig or an AutoLookahead"


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        (dict(max_new_tokens=0), r"max_new_tokens must be >= 1 \(got 0\)"),
        (dict(max_new_tokens=-1), r"max_new_tokens must be >= 1 \(got -1\)"),
        (dict(max_new_tokens="3"), r"max_new_tokens must be an int \(got '3'\)"),
        (dict(max_new_tokens=2.0), r"max_new_tokens must be an int \(got 2\.0\)"),
        (dict(max_new_tokens=True), r"max_new_tokens must be an int \(got True\)"),
        (
            dict(stop_token_ids=[TINY_VOCAB_SIZE]),
            rf"stop_token_ids\[0\] must be a token id in \[0, {TINY_VOCAB_SIZE}\) \(got {TINY_VOCAB_SIZE}\)",
        ),
        (dict(stop_token_ids=[-1]), r"stop_token_ids\[0\] must be >= 0 \(got -1\)"),
        (dict(stop_token_ids=[1, "2"]), r"stop_token_ids\[1\] must be an int \(got '2'\)"),
        (dict(stop_token_ids=7), r"stop_token_ids must be a sequence of token ids \(got 7\)"),
        (dict(lookahead="x"), rf"{LOOKAHEAD_KINDS} \(got 'x'\)"),
        (dict(lookahead=(4, 4, 4)), rf"{LOOKAHEAD_KINDS} \(got \(4, 4, 4\)\)"),
        (dict(top_k=-1), r"top_k must be >= 0 \(got -1\)"),
        (dict(top_p=0.0), r"top_p must be in \(0, 1\] \(got 0\)"),
        (dict(top_p=1.5), r"top_p must be in \(0, 1\] \(got 1\.5\)"),
        (dict(temperature=-1.0), r"temperature must be finite and >= 0 \(got -1\)"),
        (dict(temperature=-1e-9), r"temperature must be finite and >= 0 \(got -1e-09\)"),
        (dict(temperature=float("inf")), r"temperature must be finite and >= 0 \(got inf\)"),
        (dict(keep_pool=1), r"keep_pool must be a bool \(got 1\)"),
    ],
    ids=lambda v: repr(v) if isinstance(v, dict) else "",
)
def test_bad_generate_arguments(session: Session, kwargs, pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        session.generate(IDS, **kwargs)


@pytest.mark.parametrize(
    ("prompt", "pattern"),
    [
        ([], r"prompt must hold at least one token \(got 0\)"),
        ("", r"prompt must hold at least one token \(got 0\)"),
        (
            [5, TINY_VOCAB_SIZE],
            rf"prompt\[1\] must be a token id in \[0, {TINY_VOCAB_SIZE}\) \(got {TINY_VOCAB_SIZE}\)",
        ),
        ([5, 6, -1], rf"prompt\[2\] must be a token id in \[0, {TINY_VOCAB_SIZE}\) \(got -1\)"),
        ([5, 6.0], r"prompt\[1\] must be an int \(got 6\.0\)"),
        ([5, "6"], r"prompt\[1\] must be an int \(got '6'\)"),
        (5, r"prompt must be a str or a sequence of token ids \(got 5\)"),
    ],
    ids=["empty-list", "empty-string", "id-too-large", "negative-id", "float-id", "str-id", "int"],
)
def test_bad_prompts(session: Session, prompt, pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        session.generate(prompt, max_new_tokens=2)


def test_options_are_keyword_only(tiny_llama: Path, session: Session) -> None:
    with pytest.raises(TypeError):
        session.generate(IDS, 4)  # type: ignore[misc]
    with pytest.raises(TypeError):
        session.stream(IDS, 4)  # type: ignore[misc]
    with pytest.raises(TypeError):
        Session(tiny_llama, "cpu")  # type: ignore[misc]
    with pytest.raises(TypeError):
        pylookahead.Model(tiny_llama, "cpu")  # type: ignore[misc]


def test_bad_stream_arguments(session: Session) -> None:
    # Python's own checks raise at the call; the engine's when the stream starts (its first step).
    with pytest.raises(ValueError, match="unknown generation option 'colour'"):
        session.stream(IDS, colour=1)
    chunks = session.stream(IDS, max_new_tokens=0)
    with pytest.raises(ValueError, match=r"max_new_tokens must be >= 1 \(got 0\)"):
        next(chunks)
    assert len(session.generate(IDS, max_new_tokens=3).token_ids) == 3  # the session is free again


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        (dict(window_size=-1), r"window_size must be >= 0 \(got -1\)"),
        (dict(window_size=-3), r"window_size.*\(got -3\)"),
        (dict(window_size=0, verification_set_size=0), r"verification_set_size must be >= 1 when window_size is 0"),
        (dict(ngram_size=1), r"ngram_size.*>= 2.*\(got 1\)"),
        (dict(verification_set_size=-1), r"verification_set_size.*\(got -1\)"),
    ],
    ids=lambda v: repr(v) if isinstance(v, dict) else "",
)
def test_bad_lookahead_config(kwargs, pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        LookaheadConfig(**kwargs)


def test_lookahead_config_fields_and_defaults() -> None:
    cfg = LookaheadConfig(window_size=5, ngram_size=3, verification_set_size=2, seed_from_prompt=False, seed=7)
    assert (cfg.window_size, cfg.ngram_size, cfg.verification_set_size) == (5, 3, 2)
    assert (cfg.seed_from_prompt, cfg.seed) == (False, 7)
    assert cfg.tokens_per_step == (5 + 2) * (3 - 1)
    default = LookaheadConfig()
    assert default.window_size >= 1 and default.ngram_size >= 2 and default.verification_set_size >= 0
    # A config mutated into an invalid state is refused when used.
    cfg.ngram_size = 1
    with pytest.raises(ValueError, match="ngram_size"):
        cfg.validate()


@pytest.mark.parametrize(
    ("kwargs", "pattern"), [(dict(kv_capacity=-1), r"kv_capacity.*-1"), (dict(num_threads=-2), r"num_threads.*-2")]
)
def test_bad_session_arguments(tiny_llama: Path, kwargs, pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        Session(tiny_llama, **kwargs)


# ----------------------------------------------------------------------------------------------------------------
# KV capacity


@pytest.fixture(scope="module")
def small_session(tiny_llama: Path) -> Session:
    return Session(tiny_llama, kv_capacity=32)


def test_kv_capacity_is_reported(small_session: Session) -> None:
    assert small_session.kv_capacity == 32


@pytest.mark.parametrize(
    ("prompt_len", "max_new_tokens", "lookahead"),
    [(40, 1, None), (12, 30, None), (12, 8, LOOKAHEAD)],
    ids=["prompt-longer-than-cache", "generation-exceeds-cache", "lookahead-step-exceeds-cache"],
)
def test_kv_capacity_exceeded(small_session: Session, prompt_len: int, max_new_tokens: int, lookahead) -> None:
    prompt = [3 + i % 90 for i in range(prompt_len)]
    with pytest.raises(ValueError, match=r"kv_capacity \(32\)"):
        small_session.generate(prompt, max_new_tokens=max_new_tokens, lookahead=lookahead)


def test_prompt_logits_longer_than_kv_capacity(small_session: Session) -> None:
    with pytest.raises(ValueError, match="kv_capacity"):
        small_session.prompt_logits(list(range(3, 43)))


def test_session_is_reusable_after_errors(tiny_llama: Path) -> None:
    session = Session(tiny_llama, kv_capacity=48)  # fits IDS + 10 new tokens + one lookahead step (16 rows)
    fresh = Session(tiny_llama, kv_capacity=48).generate(IDS, max_new_tokens=10, lookahead=LOOKAHEAD)
    failing = [
        lambda: session.generate(IDS, max_new_tokens=40),  # over kv_capacity
        lambda: session.generate(IDS, max_new_tokens=30, lookahead=LOOKAHEAD),  # over kv_capacity with the step
        lambda: session.generate([5, TINY_VOCAB_SIZE]),
        lambda: session.generate(IDS, max_new_tokens=0),
        lambda: session.prompt_logits(list(range(3, 63))),  # over kv_capacity
    ]
    for call in failing:
        with pytest.raises(ValueError):
            call()
        out = session.generate(IDS, max_new_tokens=10, lookahead=LOOKAHEAD)
        assert out.token_ids == fresh.token_ids
        assert session.generate(IDS, max_new_tokens=10).token_ids == fresh.token_ids


def test_session_is_reusable_after_a_callback_exception(session: Session) -> None:
    expected = session.generate(IDS, max_new_tokens=10).token_ids

    def boom(ids: list[int]) -> bool:
        raise KeyError("from the callback")

    with pytest.raises(KeyError, match="from the callback"):
        session.generate(IDS, max_new_tokens=10, lookahead=LOOKAHEAD, on_tokens=boom)
    assert session.generate(IDS, max_new_tokens=10, lookahead=LOOKAHEAD).token_ids == expected


# ----------------------------------------------------------------------------------------------------------------
# determinism, sessions over one model, stats


@pytest.mark.parametrize("lookahead", [None, LOOKAHEAD], ids=["greedy", "lookahead"])
def test_two_calls_give_identical_results(session: Session, lookahead) -> None:
    first = session.generate(TEXT, max_new_tokens=20, lookahead=lookahead)
    second = session.generate(TEXT, max_new_tokens=20, lookahead=lookahead)
    assert second.token_ids == first.token_ids
    assert second.text == first.text
    assert second.stop_reason == first.stop_reason
    assert second.stats.steps == first.stats.steps
    assert list(second.stats.accept_histogram) == list(first.stats.accept_histogram)


def test_sessions_share_one_model(tiny_llama: Path, session: Session) -> None:
    model = pylookahead.Model(tiny_llama)
    a, b = Session(model), Session(model)
    assert a.model is b.model is model
    expected = session.generate(IDS, max_new_tokens=12).token_ids
    assert a.generate(IDS, max_new_tokens=12).token_ids == expected
    assert b.generate(IDS, max_new_tokens=12, lookahead=LOOKAHEAD).token_ids == expected


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        (dict(dtype="bfloat16"), r"dtype='bfloat16'.*Model's dtype \('float32'\).*Model\(\.\.\.\)"),
        (dict(device="cuda"), r"device='cuda'.*Model's device \('cpu'\)"),
        (dict(num_threads=1), r"num_threads=1.*Model's threads"),
    ],
)
def test_session_over_a_model_refuses_other_model_options(tiny_llama: Path, kwargs, pattern: str) -> None:
    model = pylookahead.Model(tiny_llama)  # float32 on the CPU
    with pytest.raises(ValueError, match=pattern):
        Session(model, **kwargs)
    # the Model's own values are accepted, and a session over it runs
    same = Session(model, device="cpu", dtype="float32")
    assert same.model is model and len(same.generate(IDS, max_new_tokens=2).token_ids) == 2


def test_model_info(session: Session) -> None:
    info = session.model.info
    assert info.architecture == "LlamaForCausalLM"
    assert info.vocab_size == TINY_VOCAB_SIZE
    assert (info.num_layers, info.hidden_size, info.num_attention_heads, info.num_key_value_heads) == (2, 64, 4, 2)
    assert list(info.eos_token_ids) == [2]
    assert info.dtype == "float32"


@pytest.mark.parametrize("lookahead", [None, LOOKAHEAD], ids=["greedy", "lookahead"])
def test_stats_are_populated(session: Session, lookahead) -> None:
    out = session.generate(IDS, max_new_tokens=16, lookahead=lookahead)
    s = out.stats
    assert s.prefill_s > 0 and s.decode_s > 0
    assert s.new_tokens == len(out.token_ids) == 16
    assert s.prompt_tokens == len(IDS)
    assert s.steps >= 1 and len(s.step_times_s) == s.steps
    assert sum(s.step_times_s) <= s.decode_s
    assert s.compression == pytest.approx((s.new_tokens - 1) / s.steps)
    if lookahead is not None:
        assert s.pool_size > 0  # seeded from the prompt
    assert out.stop_reason == "max_new_tokens"


def test_stop_token_ids(session: Session) -> None:
    greedy = session.generate(IDS, max_new_tokens=16).token_ids
    k = next(i for i, t in enumerate(greedy) if greedy.index(t) == i and i >= 3)
    for lookahead in (None, LOOKAHEAD):
        out = session.generate(IDS, max_new_tokens=16, stop_token_ids=[greedy[k]], lookahead=lookahead)
        assert out.token_ids == greedy[: k + 1]
        assert out.stop_reason == "end_token"


def test_max_new_tokens_one(session: Session) -> None:
    out = session.generate(IDS, max_new_tokens=1, lookahead=LOOKAHEAD)
    assert len(out.token_ids) == 1
    assert out.stats.steps == 0 and out.stats.new_tokens == 1
    assert out.stop_reason == "max_new_tokens"
