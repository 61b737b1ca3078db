"""The session API for services: sampling that lookahead cannot change, stop strings, streaming,
chat turns that reuse the cache and the pool, pool files and sharing, and parallel sessions.

Tiny float64 checkpoints carry the exact contracts (seeds x prompts x (W, N, G)); the real
SmolLM2-135M-Instruct checkpoint (byte-level BPE, multi-byte text) carries stop strings, streaming
and the chat compression check.
"""

from __future__ import annotations

import math
import random
import struct
import threading
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from pylookahead import LookaheadConfig, Model, Session
from tiny_models import TINY_VOCAB_SIZE

CONFIGS = [(1, 2, 1), (2, 3, 2), (4, 4, 4), (3, 5, 2), (5, 3, 0), (0, 4, 3)]


def la(w: int, n: int, g: int) -> LookaheadConfig:
    return LookaheadConfig(window_size=w, ngram_size=n, verification_set_size=g)


def repetitive_prompt(seed: int) -> list[int]:
    rng = random.Random(seed)
    phrase = [rng.randrange(3, TINY_VOCAB_SIZE) for _ in range(4)]
    return [1] + phrase * 3 + [rng.randrange(3, TINY_VOCAB_SIZE) for _ in range(3)] + phrase[:2]


@pytest.fixture(scope="module")
def tiny64(tiny_model_factory, single_thread) -> Model:
    return Model(tiny_model_factory("llama", seed=3), dtype="float64")


@pytest.fixture(scope="module")
def tiny64_qwen(tiny_model_factory, single_thread) -> Model:
    return Model(tiny_model_factory("qwen2", seed=4), dtype="float64")


# ---- sampling ----------------------------------------------------------------------------------

SAMPLING = [
    dict(temperature=0.6),
    dict(temperature=1.0, top_k=5),
    dict(temperature=0.8, top_p=0.9),
    dict(temperature=1.2, top_k=12, top_p=0.8),
]


@pytest.mark.parametrize("model_name", ["tiny64", "tiny64_qwen"])
@pytest.mark.parametrize("options", SAMPLING, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
def test_sampled_lookahead_equals_plain_sampling(request, model_name: str, options: dict) -> None:
    """For every seed, prompt and (W, N, G): the sampled tokens with lookahead == without, exactly."""
    session = Session(request.getfixturevalue(model_name))
    multi = 0
    for seed in range(6):
        prompt = repetitive_prompt(seed)
        plain = session.generate(prompt, max_new_tokens=40, seed=seed, **options)
        assert len(plain.token_ids) == 40 or plain.stop_reason == "end_token"
        for cfg in CONFIGS:
            out = session.generate(prompt, max_new_tokens=40, lookahead=la(*cfg), seed=seed, **options)
            assert out.token_ids == plain.token_ids, f"seed {seed}, {cfg}, {options}"
            multi += sum(out.stats.accept_histogram[2:])
    assert multi > 0, "no step accepted a candidate: the comparison would be vacuous"


def test_sampling_depends_on_the_seed_and_is_reproducible(tiny64) -> None:
    session = Session(tiny64)
    prompt = repetitive_prompt(1)
    a = session.generate(prompt, max_new_tokens=30, temperature=1.5, seed=1).token_ids
    assert session.generate(prompt, max_new_tokens=30, temperature=1.5, seed=1).token_ids == a
    assert session.generate(prompt, max_new_tokens=30, temperature=1.5, seed=2).token_ids != a
    # temperature 0 is greedy, whatever the other sampling options
    greedy = session.generate(prompt, max_new_tokens=30).token_ids
    assert session.generate(prompt, max_new_tokens=30, top_k=3, seed=9).token_ids == greedy


def _chi2_critical(df: int, z: float = 3.09) -> float:
    """Upper 0.1% point of chi-square(df), Wilson-Hilferty approximation (within 1% for df >= 10)."""
    h = 2.0 / (9.0 * df)
    return df * (1.0 - h + z * math.sqrt(h)) ** 3


def _target_distribution(logits: np.ndarray, temperature: float, top_k: int, top_p: float) -> np.ndarray:
    """The distribution the sampler must follow, computed independently in numpy."""
    z = logits.astype(np.float64) / temperature
    p = np.exp(z - z.max())
    p /= p.sum()
    order = sorted(range(len(p)), key=lambda i: (-p[i], i))
    keep = order[:top_k] if top_k else order
    q = np.zeros_like(p)
    q[keep] = p[keep]
    q /= q.sum()
    if top_p < 1.0:
        mass, nucleus = 0.0, []
        for i in keep:
            nucleus.append(i)
            mass += q[i]
            if mass >= top_p:
                break
        r = np.zeros_like(q)
        r[nucleus] = q[nucleus]
        q = r / r.sum()
    return q


@pytest.mark.parametrize("temperature,top_k,top_p", [(4.0, 16, 1.0), (8.0, 0, 0.6), (2.0, 0, 1.0)])
def test_sampler_matches_the_target_distribution(tiny64, temperature, top_k, top_p) -> None:
    """Chi-square of 3000 first-token draws (seeds 0..2999: independent streams) against the exact
    next-token distribution of a tiny model. Seeds are fixed, so the test cannot flake; the bound
    is the 0.1% critical value."""
    session = Session(tiny64)
    prompt = repetitive_prompt(5)
    q = _target_distribution(session.prompt_logits(prompt)[-1], temperature, top_k, top_p)
    n = 3000
    counts = Counter(
        session.generate(prompt, max_new_tokens=1, temperature=temperature, top_k=top_k, top_p=top_p, seed=s).token_ids[
            0
        ]
        for s in range(n)
    )
    assert set(counts) <= set(np.flatnonzero(q)), "drew a token outside the top-k / top-p set"
    # Bins with small expectation are pooled, as the chi-square approximation needs.
    bins = [i for i in np.flatnonzero(q) if q[i] * n >= 5]
    rest = [i for i in np.flatnonzero(q) if q[i] * n < 5]
    observed = [counts[i] for i in bins] + ([sum(counts[i] for i in rest)] if rest else [])
    expected = [q[i] * n for i in bins] + ([sum(q[i] for i in rest) * n] if rest else [])
    df = len(observed) - 1
    assert df >= 5, f"too few bins ({df + 1}) for a meaningful test"
    chi2 = sum((o - e) ** 2 / e for o, e in zip(observed, expected))
    assert chi2 < _chi2_critical(df), f"chi2 {chi2:.1f} with {df} dof"


@pytest.mark.parametrize(
    "option,value,message",
    [
        ("temperature", -0.5, "temperature must be finite and >= 0"),
        ("temperature", float("nan"), "temperature must be finite and >= 0 (got nan)"),
        ("temperature", "0.5", "temperature must be a number (got '0.5')"),
        ("top_k", -1, "top_k must be >= 0"),
        ("top_p", 0.0, "top_p must be in (0, 1]"),
        ("top_p", 1.5, "top_p must be in (0, 1]"),
        ("seed", -3, "seed must be in [0, 18446744073709551615] (got -3)"),
        ("reuse_cache", "yes", "reuse_cache must be a bool"),
        ("stop", [""], "stop strings must be non-empty"),
        ("stop", [3], "stop strings must be str"),
        ("colour", 1, "unknown generation option 'colour'"),
    ],
)
def test_bad_generation_options_raise_value_error(tiny64, option, value, message) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        Session(tiny64).generate([1, 2, 3], max_new_tokens=4, **{option: value})


# ---- chat, cache reuse and the pool ------------------------------------------------------------


def test_chat_second_turn_equals_the_full_prompt_from_scratch(tiny64) -> None:
    session = Session(tiny64)
    first = session.chat("hello x y z", max_new_tokens=12, lookahead=la(3, 3, 3))
    second = session.chat([{"role": "user", "content": "print x = y"}], max_new_tokens=12, lookahead=la(3, 3, 3))
    assert second.stats.reused_tokens > first.stats.prompt_tokens  # turn 1's prompt and answer
    assert [m["role"] for m in session.messages] == ["user", "assistant", "user", "assistant"]
    ids = session.tokenizer.encode_chat(session.messages[:3], add_generation_prompt=True)
    assert second.stats.reused_tokens + second.stats.prompt_tokens == len(ids)
    fresh = Session(tiny64).generate(ids, max_new_tokens=12, lookahead=la(3, 3, 3))
    assert second.token_ids == fresh.token_ids
    greedy = Session(tiny64).generate(ids, max_new_tokens=12)
    assert second.token_ids == greedy.token_ids


def test_chat_stream_records_the_turn_and_matches_chat(tiny64) -> None:
    streamed = Session(tiny64)
    pieces = [c.text for c in streamed.chat_stream("hello x y z", max_new_tokens=10, lookahead=la(2, 3, 2))]
    answer = streamed.last_output
    assert "".join(pieces) == answer.text
    assert streamed.messages[-1] == {"role": "assistant", "content": answer.text}
    plain = Session(tiny64)
    assert plain.chat("hello x y z", max_new_tokens=10).token_ids == answer.token_ids
    # The next turn reuses the streamed turn's cache.
    second = streamed.chat("print x", max_new_tokens=6, lookahead="auto")
    assert second.stats.reused_tokens > 0
    assert second.token_ids == plain.chat("print x", max_new_tokens=6).token_ids


def test_reset_forgets_the_conversation_cache_and_pool(tiny64) -> None:
    session = Session(tiny64)
    session.chat("x y z x y z", max_new_tokens=10, lookahead=la(2, 3, 2))
    assert session.cached_tokens > 0 and session.pool_size > 0 and session.messages
    session.reset()
    assert (session.cached_tokens, session.pool_size, session.messages) == (0, 0, [])
    again = session.chat("x y z x y z", max_new_tokens=10, lookahead=la(2, 3, 2))
    assert again.stats.reused_tokens == 0


def test_reuse_cache_prefills_only_the_new_suffix(tiny64) -> None:
    session = Session(tiny64)
    prompt = repetitive_prompt(2)
    first = session.generate(prompt, max_new_tokens=10)
    assert session.cached_tokens == len(prompt) + 9
    longer = prompt + first.token_ids + [5, 6]
    out = session.generate(longer, max_new_tokens=10, lookahead=la(2, 3, 2), reuse_cache=True)
    assert (out.stats.reused_tokens, out.stats.prompt_tokens) == (len(prompt) + 9, 3)
    assert out.token_ids == Session(tiny64).generate(longer, max_new_tokens=10).token_ids
    # Without reuse_cache the whole prompt is prefilled again.
    assert session.generate(longer, max_new_tokens=4).stats.reused_tokens == 0


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_reused_prefix_ending_inside_a_block_decodes_as_a_fresh_session(
    tiny_model_factory, single_thread, arch: str, dtype: str
) -> None:
    """A reused prefix that ends inside one of the 16-row blocks of the fp32 copy the CPU attention
    kernel reads (kv/kv_cache.h) leaves the old sequence's rows after it; the new rows overwrite them
    in the cache and in the copy, so the output is a fresh Session's, greedy and with lookahead (whose
    accepted rows move within the cache)."""
    model = Model(tiny_model_factory(arch, seed=5), dtype=dtype)
    rng = random.Random(7)
    first = [1] + [rng.randrange(3, TINY_VOCAB_SIZE) for _ in range(70)]
    session = Session(model)
    session.generate(first, max_new_tokens=30, lookahead=la(2, 3, 2))
    for lookahead in (None, la(3, 4, 3)):
        # 37 shared tokens: two blocks and 5 rows of a third.
        prompt = first[:37] + [rng.randrange(3, TINY_VOCAB_SIZE) for _ in range(12)]
        out = session.generate(prompt, max_new_tokens=40, lookahead=lookahead, reuse_cache=True)
        assert out.stats.reused_tokens == 37
        assert out.token_ids == Session(model).generate(prompt, max_new_tokens=40).token_ids


def test_pool_save_load_and_keep(tiny64, tmp_path: Path) -> None:
    prompt = repetitive_prompt(3)
    source = Session(tiny64)
    first = source.generate(prompt, max_new_tokens=40, lookahead=la(3, 4, 3))
    source.save_pool(tmp_path / "pool.bin")
    loaded = Session(tiny64)
    loaded.load_pool(tmp_path / "pool.bin")
    assert loaded.pool_size == source.pool_size > 0
    warm = loaded.generate(prompt, max_new_tokens=40, lookahead=la(3, 4, 3), keep_pool=True)
    assert warm.token_ids == first.token_ids
    assert warm.stats.steps < first.stats.steps  # the saved n-grams verify from the first step
    # keep_pool=False (the default) starts from an empty pool.
    cold = loaded.generate(prompt, max_new_tokens=40, lookahead=la(3, 4, 3))
    assert cold.stats.steps == first.stats.steps


@pytest.mark.parametrize("source", ["suffix", "recycle"])
def test_tree_sources_learn_from_a_kept_or_shared_pool(tiny64, tmp_path: Path, source: str) -> None:
    """A draft tree's sources learn from what a pool keeps: suffix lookup copies earlier generations'
    texts, token recycling reads the table of each token's best next tokens from earlier steps' logits.
    Both are kept across calls (keep_pool) and shared between sessions, and a fresh pool forgets them;
    a saved pool file holds the texts, not the successors. Rows are made free (a flat step-cost table),
    so every step verifies its whole tree and step counts do not depend on timing."""
    drafts = dict(suffix_branches=2) if source == "suffix" else dict(recycle_top_k=4)
    tree = LookaheadConfig(window_size=0, ngram_size=3, verification_set_size=0, tree_rows=16, **drafts)
    prompt = [1, 5, 9, 14, 3, 27]  # nothing in it repeats

    def free_rows_session() -> Session:
        s = Session(tiny64)
        s.calibrate([(1, 1.0), (1024, 1.0)])
        return s

    session = free_rows_session()
    greedy = session.generate(prompt, max_new_tokens=60)
    first = session.generate(prompt, max_new_tokens=60, lookahead=tree)
    again = session.generate(prompt, max_new_tokens=60, lookahead=tree, keep_pool=True)
    assert first.token_ids == again.token_ids == greedy.token_ids
    assert again.stats.steps * (3 if source == "suffix" else 1) < first.stats.steps, (
        again.stats.steps,
        first.stats.steps,
    )
    assert again.stats.accepted_tokens_by_source[source] > first.stats.accepted_tokens_by_source[source]
    assert sum(again.stats.accepted_tokens_by_source.values()) == again.stats.accepted_tokens_by_source[source]
    # A fresh pool forgets them.
    assert session.generate(prompt, max_new_tokens=60, lookahead=tree).stats.steps == first.stats.steps

    other = free_rows_session()
    other.share_pool(session)
    shared = other.generate(prompt, max_new_tokens=60, lookahead=tree, keep_pool=True)
    assert shared.token_ids == greedy.token_ids
    assert shared.stats.steps == again.stats.steps

    session.generate(prompt, max_new_tokens=60, lookahead=tree)
    session.save_pool(tmp_path / "pool.bin")
    loaded = free_rows_session()
    loaded.load_pool(tmp_path / "pool.bin")
    warm = loaded.generate(prompt, max_new_tokens=60, lookahead=tree, keep_pool=True)
    assert warm.token_ids == greedy.token_ids
    # The file brings the texts back; the successors start empty.
    assert warm.stats.steps == (again.stats.steps if source == "suffix" else first.stats.steps)


def test_pool_file_errors_name_the_file_and_field(tiny64, tiny_model_factory, tmp_path: Path) -> None:
    session = Session(tiny64)
    session.generate(repetitive_prompt(1), max_new_tokens=8, lookahead=la(2, 3, 2))
    path = tmp_path / "pool.bin"
    session.save_pool(path)
    data = path.read_bytes()
    (tmp_path / "short.bin").write_bytes(data[: _pool_end(data) - 3])  # inside the pool (texts: below)
    with pytest.raises(ValueError, match=r"short\.bin: truncated"):
        session.load_pool(tmp_path / "short.bin")
    (tmp_path / "junk.bin").write_bytes(b"not a pool at all")
    with pytest.raises(ValueError, match=r"junk\.bin: not a pylookahead pool file"):
        session.load_pool(tmp_path / "junk.bin")
    with pytest.raises(ValueError, match="cannot open the pool file"):
        session.load_pool(tmp_path / "missing.bin")
    other = Session(Model(tiny_model_factory("llama", seed=3, vocab_size=120), dtype="float64"))
    with pytest.raises(ValueError, match=r"pool vocab_size must equal the model's 120 \(got 97\)"):
        other.load_pool(path)
    assert session.pool_size > 0  # a failed load leaves the pool as it was


def _u32(data: bytes, at: int) -> int:
    return struct.unpack_from("<I", data, at)[0]


def _pool_end(data: bytes) -> int:
    """Offset where a version-3 file's pool ends and its texts begin."""
    assert data[:8] == b"PYLAPOOL" and _u32(data, 8) == 3
    at = 16 + 4 + _u32(data, 16)  # magic, version, vocab_size, architecture
    ngram_len, keys = _u32(data, at), _u32(data, at + 8)
    at += 12
    for _ in range(keys):
        count = _u32(data, at + 4)
        at += 8 + count * (1 + 4 * ngram_len + 4 * 3)  # source byte, tokens, 3 context ids
    return at


def _pool_file_texts(data: bytes) -> list[list[int]]:
    at = _pool_end(data)
    texts = []
    for _ in range(_u32(data, at)):
        n = _u32(data, at + 4)
        texts.append(list(struct.unpack_from(f"<{n}I", data, at + 8)))
        at += 4 + 4 * n
    assert at + 4 == len(data)
    return texts


def _pool_file_as_version_2(data: bytes) -> bytes:
    """The same pool in the version-2 layout: no texts after the pool."""
    return data[:8] + struct.pack("<I", 2) + data[12 : _pool_end(data)]


def _pool_file_as_version_1(data: bytes) -> bytes:
    """The same pool in the version-1 layout: no texts, and no context ids after each entry's tokens."""
    end = _pool_end(data)
    at = 16 + 4 + _u32(data, 16)
    ngram_len, keys = _u32(data, at), _u32(data, at + 8)
    out = bytearray(data[:8] + struct.pack("<I", 1) + data[12 : at + 12])
    at += 12
    for _ in range(keys):
        count = _u32(data, at + 4)
        out += data[at : at + 8]
        at += 8
        for _ in range(count):
            out += data[at : at + 1 + 4 * ngram_len]  # source byte and tokens
            at += 1 + 4 * ngram_len + 4 * 3  # then 3 context ids, dropped
    assert at == end
    return bytes(out)


def test_pool_files_of_version_1_load_without_contexts(tiny64, tmp_path: Path) -> None:
    source = Session(tiny64)
    source.generate(repetitive_prompt(3), max_new_tokens=40, lookahead=la(0, 4, 3))
    source.save_pool(tmp_path / "pool.bin")
    data = (tmp_path / "pool.bin").read_bytes()
    (tmp_path / "v1.bin").write_bytes(_pool_file_as_version_1(data))
    loaded = Session(tiny64)
    loaded.load_pool(tmp_path / "v1.bin")
    assert loaded.pool_size == source.pool_size > 0
    out = loaded.generate(repetitive_prompt(3), max_new_tokens=20, lookahead=la(0, 4, 3), keep_pool=True)
    assert out.token_ids == Session(tiny64).generate(repetitive_prompt(3), max_new_tokens=20).token_ids
    (tmp_path / "v4.bin").write_bytes(data[:8] + struct.pack("<I", 4) + data[12:])
    with pytest.raises(ValueError, match=r"v4\.bin: pool file version must be 1, 2 or 3 \(got 4\)"):
        loaded.load_pool(tmp_path / "v4.bin")


def test_pool_file_keeps_the_texts_a_larger_n_rebuilds_from(tiny64, tmp_path: Path) -> None:
    # A pool saved at N = 3 holds 2-grams; a run at N = 5 needs 4-grams. From the file's texts (prompt and output
    # of the saving session's run) the loaded session rebuilds a 4-gram pool that verifies from the first step;
    # from a version-2 file of the same pool (no texts) the cut pool is empty and the run starts cold.
    prompt = repetitive_prompt(3)
    source = Session(tiny64)
    first = source.generate(prompt, max_new_tokens=40, lookahead=la(0, 3, 2))
    source.save_pool(tmp_path / "pool.bin")
    data = (tmp_path / "pool.bin").read_bytes()
    assert _pool_file_texts(data) == [prompt + first.token_ids]
    (tmp_path / "v2.bin").write_bytes(_pool_file_as_version_2(data))
    ref = Session(tiny64).generate(prompt, max_new_tokens=40)
    cold = Session(tiny64).generate(prompt, max_new_tokens=40, lookahead=la(0, 5, 2))
    runs = {}
    for name in ("pool.bin", "v2.bin"):
        loaded = Session(tiny64)
        loaded.load_pool(tmp_path / name)
        assert loaded.pool_size == source.pool_size > 0
        runs[name] = loaded.generate(prompt, max_new_tokens=40, lookahead=la(0, 5, 2), keep_pool=True)
        assert runs[name].token_ids == ref.token_ids
    assert runs["pool.bin"].stats.steps < cold.stats.steps
    assert runs["v2.bin"].stats.steps == cold.stats.steps
    # Loading a file without texts drops the session's own texts with its pool: a larger N no longer rebuilds
    # the pool from the earlier generation's text.
    session = Session(tiny64)
    session.generate(prompt, max_new_tokens=40, lookahead=la(0, 3, 2))
    session.load_pool(tmp_path / "v2.bin")
    assert (
        session.generate(prompt, max_new_tokens=40, lookahead=la(0, 5, 2), keep_pool=True).stats.steps
        == cold.stats.steps
    )


def test_pool_file_texts_are_checked(tiny64, tmp_path: Path) -> None:
    session = Session(tiny64)
    session.generate(repetitive_prompt(1), max_new_tokens=8, lookahead=la(0, 3, 2))
    session.save_pool(tmp_path / "pool.bin")
    data = (tmp_path / "pool.bin").read_bytes()
    at = _pool_end(data)  # u32 count, u32 length, ids
    bad_id = bytearray(data)
    struct.pack_into("<I", bad_id, at + 8, 97)
    (tmp_path / "id.bin").write_bytes(bad_id)
    with pytest.raises(ValueError, match=r"id\.bin: pool text token id must be < vocab_size 97 \(got 97 in text 0\)"):
        session.load_pool(tmp_path / "id.bin")
    empty = bytearray(data[: at + 4]) + struct.pack("<I", 0)
    (tmp_path / "empty.bin").write_bytes(empty)
    with pytest.raises(ValueError, match=r"empty\.bin: pool text length must be in \[1, 65536\] \(got 0 in text 0\)"):
        session.load_pool(tmp_path / "empty.bin")
    (tmp_path / "cut.bin").write_bytes(data[:-2])
    with pytest.raises(ValueError, match=r"cut\.bin: not a pylookahead pool file \(truncated before text token id\)"):
        session.load_pool(tmp_path / "cut.bin")
    assert session.pool_size > 0


def test_shared_pool_is_one_pool_until_reset(tiny64) -> None:
    a, b = Session(tiny64), Session(tiny64)
    b.share_pool(a)
    a.generate(repetitive_prompt(4), max_new_tokens=20, lookahead=la(2, 3, 2))
    assert b.pool_size == a.pool_size > 0
    out = b.generate(repetitive_prompt(4), max_new_tokens=20, lookahead=la(2, 3, 2), keep_pool=True)
    assert out.token_ids == Session(tiny64).generate(repetitive_prompt(4), max_new_tokens=20).token_ids
    b.reset()
    assert b.pool_size == 0 and a.pool_size > 0


# ---- threads -----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16"])  # fp32/bf16: packed oneDNN weights
def test_two_sessions_in_two_threads_match_running_one_after_another(tiny_model_factory, dtype) -> None:
    model = Model(tiny_model_factory("llama", seed=3), dtype=dtype)
    if dtype == "float64":
        assert model.info.packed_weights is False  # oneDNN packing is for bf16 / fp32 only
    jobs = [
        (repetitive_prompt(6), dict(lookahead=la(3, 4, 3))),
        (repetitive_prompt(7), dict(lookahead=la(2, 3, 2), temperature=0.9, seed=4)),
    ]
    sequential = [Session(model).generate(p, max_new_tokens=48, **kw).token_ids for p, kw in jobs]
    sessions = [Session(model), Session(model)]
    results: list[list[int] | BaseException] = [[], []]

    def work(i: int) -> None:
        try:
            for _ in range(3):
                results[i] = sessions[i].generate(jobs[i][0], max_new_tokens=48, **jobs[i][1]).token_ids
        except BaseException as e:  # reported below
            results[i] = e

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == sequential


def test_a_session_used_by_two_callers_at_once_raises(tiny64) -> None:
    session = Session(tiny64)
    stream = session.stream(repetitive_prompt(1), max_new_tokens=30, lookahead=la(2, 3, 2))
    next(stream)
    with pytest.raises(RuntimeError, match="Session is busy"):
        session.generate([1, 2, 3], max_new_tokens=4)
    stream.close()
    assert session.generate([1, 2, 3], max_new_tokens=4).token_ids  # usable again


# ---- real model: stop strings and streaming ----------------------------------------------------

CODE_PROMPT = 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'


@pytest.fixture(scope="module")
def smol(smollm2_dir) -> Session:
    return Session(smollm2_dir, dtype="bfloat16", num_threads=2)


@pytest.fixture(scope="module")
def smol_greedy(smol) -> tuple[list[int], str]:
    out = smol.generate(CODE_PROMPT, max_new_tokens=96)
    return out.token_ids, out.text


def _expected_stop(smol: Session, ids: list[int], text: str, stop: str) -> tuple[list[int], str]:
    """What token-by-token generation with `stop` returns: ids through the first token whose text
    completes the stop string, and the text before it."""
    for k in range(1, len(ids) + 1):
        if stop in smol.tokenizer.decode(ids[:k]):
            return ids[:k], text[: text.index(stop)]
    raise AssertionError(f"{stop!r} is not in the greedy text")


@pytest.mark.slow
def test_stop_strings_end_where_token_by_token_decoding_ends(smol, smol_greedy) -> None:
    ids, text = smol_greedy
    # Stop strings ending at many places of the answer: inside accepted runs and across steps.
    stops = sorted({text[i : i + 6] for i in range(5, len(text) - 6, 16) if text[i : i + 6].strip()})
    inside_a_run = across_chunks = 0
    for stop in stops:
        expected_ids, expected_text = _expected_stop(smol, ids, text, stop)
        chunks: list[list[int]] = []
        out = smol.generate(CODE_PROMPT, max_new_tokens=96, lookahead=la(4, 4, 4), stop=[stop], on_tokens=chunks.append)
        assert (out.token_ids, out.text, out.stop_reason, out.stop_string) == (
            expected_ids, expected_text, "stop_string", stop,
        ), repr(stop)  # fmt: skip
        inside_a_run += len(chunks[-1]) > 1
        # The token where the stop string starts came in an earlier chunk than the one ending it.
        start = next(k for k in range(len(ids)) if len(smol.tokenizer.decode(ids[: k + 1])) > len(expected_text))
        across_chunks += start < len(expected_ids) - len(chunks[-1])
        with_stop = smol.generate(CODE_PROMPT, max_new_tokens=96, lookahead=la(4, 4, 4), stop=[stop], include_stop=True)
        assert with_stop.text == expected_text + stop
    assert inside_a_run > 0, "no stop string completed inside a multi-token step"
    assert across_chunks > 0, "no stop string spanned two steps"


@pytest.mark.slow
@pytest.mark.parametrize("prompt", [CODE_PROMPT, "List the planets of the solar system, one per line."])
def test_real_model_sampled_lookahead_equals_plain_sampling(smol, prompt) -> None:
    """bfloat16 SmolLM2: the sampled text with lookahead == without, for each seed and config."""
    for seed in (1, 2, 3):
        options = dict(temperature=0.8, top_p=0.95, seed=seed)
        plain = smol.generate(prompt, max_new_tokens=64, **options)
        for cfg in [(2, 3, 2), (4, 4, 4)]:
            assert (
                smol.generate(prompt, max_new_tokens=64, lookahead=la(*cfg), **options).token_ids == plain.token_ids
            ), (seed, cfg)


@pytest.mark.slow
def test_stream_pieces_join_to_the_text_and_never_show_a_partial_stop(smol, smol_greedy) -> None:
    ids, text = smol_greedy
    stop = text[40:47]
    expected_ids, expected_text = _expected_stop(smol, ids, text, stop)
    pieces = [c.text for c in smol.stream(CODE_PROMPT, max_new_tokens=96, lookahead=la(4, 4, 4), stop=[stop])]
    shown = ""
    for piece in pieces:
        shown += piece
        assert expected_text.startswith(shown), "streamed text was revised or showed part of the stop"
    assert shown == expected_text
    assert smol.last_output.token_ids == expected_ids
    # Without stop strings the pieces are the whole text.
    assert "".join(c.text for c in smol.stream(CODE_PROMPT, max_new_tokens=96, lookahead=la(2, 3, 2))) == text


@pytest.mark.slow
def test_breaking_out_of_a_stream_stops_promptly_and_leaves_the_session_usable(smol, smol_greedy) -> None:
    seen = 0
    stream = smol.stream(CODE_PROMPT, max_new_tokens=96, lookahead=la(2, 3, 2))
    for chunk in stream:
        seen += len(chunk.token_ids)
        if seen >= 5:
            break
    stream.close()
    assert 5 <= len(smol.last_output.token_ids) <= seen + 3  # at most the step in progress
    assert smol.generate(CODE_PROMPT, max_new_tokens=96, lookahead=la(2, 3, 2)).token_ids == smol_greedy[0]


@pytest.mark.slow
def test_multibyte_text_streams_whole_characters(smol) -> None:
    prompt = "Traduis en français et ajoute des emojis : 'Good morning, dear friend! Coffee?'"
    out = smol.generate(prompt, max_new_tokens=48)
    pieces = [c.text for c in smol.stream(prompt, max_new_tokens=48, lookahead=la(2, 3, 2))]
    assert "".join(pieces) == out.text
    assert all("\ufffd" not in p for p in pieces) or "\ufffd" in out.text


@pytest.mark.slow
def test_second_chat_turn_compresses_more_on_a_repetitive_task(smol) -> None:
    smol.reset()
    first = smol.chat("Write a Python function that adds two numbers.", max_new_tokens=96, lookahead=la(2, 3, 2))
    second = smol.chat("Write the same function again, but name it plus.", max_new_tokens=96, lookahead=la(2, 3, 2))
    smol.reset()
    assert second.stats.reused_tokens > 0
    assert second.stats.compression > first.stats.compression, (first.stats.compression, second.stats.compression)
