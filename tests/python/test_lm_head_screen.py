"""The lm_head screen (EngineConfig.lm_head_screen, docs/design.md "The lm_head screen"): greedy steps take
their argmax from an int8 copy of the lm_head with a proven bound, computing exactly only the columns that may
still win. It must give the same tokens as the whole lm_head, token for token, in greedy and lookahead decoding;
it applies where documented and its memory is counted.

(The bound and the candidate rule are tested adversarially in tests/cpp/argmax_screen_test.cpp.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pylookahead import LookaheadConfig, Model, Session
from tiny_models import TINY_VOCAB_SIZE
from tolerances import first_divergence


def assert_identical(screened: list[int], whole: list[int], what: str) -> None:
    i = first_divergence(screened, whole)
    assert i is None, f"{what}: the screen's tokens differ from the whole lm_head's at new token {i}"


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("tied", [False, True])
def test_screen_applies_and_is_counted(tiny_model_factory, dtype: str, tied: bool) -> None:
    path = tiny_model_factory("llama", tie_word_embeddings=tied)
    on = Model(path, dtype=dtype, linear_kernel="generic")
    off = Model(path, dtype=dtype, linear_kernel="generic", lm_head_screen=False)
    assert on.info.lm_head_screen and not off.info.lm_head_screen
    hidden = on.info.hidden_size
    # kQ8: 544-byte records per 16 columns and 32 inputs, and one fp32 bound factor per column.
    expected = -(-TINY_VOCAB_SIZE // 16) * (hidden // 32) * 544 + 4 * TINY_VOCAB_SIZE
    assert on.info.weight_bytes - off.info.weight_bytes == expected


def test_screen_does_not_apply_where_it_has_no_use(tiny_model_factory) -> None:
    path = tiny_model_factory("llama")
    # A quantized lm_head is already as small as the screen's copy; aten is not the engine's kernel;
    # float64 keeps the whole lm_head.
    assert not Model(path, dtype="bfloat16", quantize="int8").info.lm_head_screen
    assert Model(path, dtype="bfloat16", quantize="int8", quantize_lm_head=False).info.lm_head_screen
    assert not Model(path, dtype="float32", linear_kernel="aten").info.lm_head_screen
    assert not Model(path, dtype="float64").info.lm_head_screen


def test_lm_head_screen_must_be_a_bool(tiny_llama: Path) -> None:
    with pytest.raises(ValueError, match="lm_head_screen"):
        Model(tiny_llama, lm_head_screen="yes")  # type: ignore[arg-type]


TINY_CONFIGS = [
    None,
    "auto",
    LookaheadConfig(window_size=4, ngram_size=4, verification_set_size=4),
    # a draft tree with suffix branches and recycled successors (taken from the screen's approximations)
    LookaheadConfig(
        window_size=0, ngram_size=5, verification_set_size=8, tree_rows=16, suffix_branches=4, recycle_top_k=8
    ),
]


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("kernel", ["avx2", "generic"])
def test_tiny_tokens_equal_the_whole_lm_head(tiny_model_factory, arch: str, dtype: str, kernel: str) -> None:
    # Random tiny models have flat logits: many columns stay candidates, and rows the screen cannot decide
    # fall back to the whole row. Either way the tokens must be the whole lm_head's.
    path = tiny_model_factory(arch, seed=3)
    if kernel == "avx2" and Model(path, dtype=dtype).info.cpu_isa == "generic":
        pytest.skip("no AVX2 here (or capped to generic)")
    whole = Session(Model(path, dtype=dtype, linear_kernel=kernel, lm_head_screen=False))
    screened = Session(Model(path, dtype=dtype, linear_kernel=kernel))
    assert screened.model.info.lm_head_screen
    for prompt in ([5, 17, 3, 9], [42] * 6, list(range(10, 40))):
        reference = whole.generate(prompt, max_new_tokens=40).token_ids
        for cfg in TINY_CONFIGS:
            out = screened.generate(prompt, max_new_tokens=40, lookahead=cfg).token_ids
            assert_identical(out, reference, f"tiny {arch} {dtype} {kernel} prompt {prompt[:4]} lookahead {cfg}")


REAL_PROMPTS = {
    "chat-hash-table": "Explain how a hash table works.",
    "chat-tcp-udp": "What are the differences between TCP and UDP?",
    "code-fibonacci": 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n',
    "code-stack": 'class Stack:\n    """A simple LIFO stack."""\n\n    def __init__(self):\n',
}


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_smollm2_tokens_equal_the_whole_lm_head(smollm2_dir: Path, single_thread, dtype: str) -> None:
    whole = Session(Model(smollm2_dir, dtype=dtype, lm_head_screen=False))
    screened = Session(Model(smollm2_dir, dtype=dtype))
    if not screened.model.info.lm_head_screen:
        pytest.skip(f"no lm_head screen with the {screened.model.info.linear_kernel} kernel")
    tok = screened.tokenizer
    for name, text in REAL_PROMPTS.items():
        ids = tok.encode(text)
        reference = whole.generate(ids, max_new_tokens=128).token_ids
        for cfg in (None, "auto"):
            out = screened.generate(ids, max_new_tokens=128, lookahead=cfg).token_ids
            assert_identical(out, reference, f"SmolLM2 {dtype} {name} lookahead {cfg}")


@pytest.mark.parametrize("screen", [True, False], ids=["screen", "whole"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_lookahead_skips_the_lm_head_of_rows_it_cannot_read(tiny_model_factory, dtype: str, screen: bool) -> None:
    # A lookahead step computes the lm_head of row 0 and the window's rows, then of the subtree of the draft
    # that row 0's choice matched (lookahead/row_reads.h): the rows of rejected drafts are never read, so they
    # are skipped, and the tokens stay greedy's.
    path = tiny_model_factory("llama", seed=3)
    session = Session(Model(path, dtype=dtype, linear_kernel="generic", lm_head_screen=screen))
    prompt = [5, 17, 3, 9, 11] * 4
    reference = session.generate(prompt, max_new_tokens=40)
    assert reference.stats.skipped_head_rows == 0
    for cfg in (
        LookaheadConfig(window_size=0, ngram_size=4, verification_set_size=4),
        LookaheadConfig(window_size=4, ngram_size=4, verification_set_size=4),
    ):
        out = session.generate(prompt, max_new_tokens=40, lookahead=cfg)
        assert_identical(out.token_ids, reference.token_ids, f"{dtype} screen={screen} {cfg}")
        assert out.stats.skipped_head_rows > 0, cfg
    # Token recycling learns from every row's top k successors, rejected drafts' too: nothing is skipped.
    recycle = LookaheadConfig(window_size=0, ngram_size=4, verification_set_size=4, tree_rows=8, recycle_top_k=4)
    out = session.generate(prompt, max_new_tokens=40, lookahead=recycle)
    assert_identical(out.token_ids, reference.token_ids, f"{dtype} screen={screen} recycling")
    assert out.stats.skipped_head_rows == 0


def test_padded_steps_compute_every_row(tiny_model_factory) -> None:
    # aten's GEMMs are not row-invariant below 2-4 rows, so a row's lm_head must run in the step's own batch.
    path = tiny_model_factory("llama", seed=3)
    session = Session(Model(path, dtype="float32", linear_kernel="aten"))
    prompt = [5, 17, 3, 9, 11] * 4
    reference = session.generate(prompt, max_new_tokens=40).token_ids
    out = session.generate(
        prompt, max_new_tokens=40, lookahead=LookaheadConfig(window_size=0, ngram_size=4, verification_set_size=4)
    )
    assert_identical(out.token_ids, reference, "aten")
    assert out.stats.skipped_head_rows == 0
