"""TextStream: chunk-invariant streaming text and stop strings, against a token-by-token reference."""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers


def _load_textstream() -> ModuleType:
    # Loaded from its file: importing the `pylookahead` package pulls in torch and the compiled _core,
    # which this pure-Python module does not need.
    path = Path(__file__).resolve().parents[2] / "pylookahead" / "textstream.py"
    spec = importlib.util.spec_from_file_location("_pylookahead_textstream_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


TextStream: Any = _load_textstream().TextStream

CORPUS = [
    "héllo wörld 你好 🙂 the quick brown fox jumps over the lazy dog",
    "STOP here. END of the line\n\nUser: hi\nAssistant: hello",
    "naïve café résumé ça va? 日本語のテキスト 🙂🙃 Grüße, Ελληνικά, русский",
]
SMOLLM2_TOKENIZER = (
    Path(os.environ.get("PYLOOKAHEAD_CACHE") or Path.home() / ".cache" / "pylookahead")
    / "models"
    / "smollm2-135m-instruct"
    / "tokenizer.json"
)


def _train(pre_tokenizer: Any, decoder: Any, vocab_size: int, **trainer_kwargs: Any) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE(unk_token=trainer_kwargs.pop("unk_token", None)))
    tokenizer.pre_tokenizer = pre_tokenizer
    tokenizer.decoder = decoder
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False, **trainer_kwargs)
    tokenizer.train_from_iterator(CORPUS * 5, trainer)
    return tokenizer


BYTE_BPE = _train(
    pre_tokenizers.ByteLevel(add_prefix_space=False),
    decoders.ByteLevel(),
    300,
    initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
)
METASPACE_BPE = _train(
    pre_tokenizers.Metaspace(), decoders.Metaspace(), 200, special_tokens=["<unk>"], unk_token="<unk>"
)


def _word_tokenizer(words: Sequence[str]) -> Tokenizer:
    """Whole words as tokens, decoded joined by spaces: full control over which token completes what."""
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(["[UNK]", *words])}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return tokenizer


def _visible_texts(tokenizer: Tokenizer, ids: Sequence[int]) -> list[str]:
    """Generated text visible after each token, one-token-at-a-time: decode(ids[:j]) for the last j <= i
    whose text does not end in U+FFFD (a cut multi-byte character)."""
    texts = [""]
    for i in range(1, len(ids) + 1):
        text = tokenizer.decode(list(ids[:i]))
        texts.append(texts[-1] if text.endswith("\ufffd") else text)
    return texts


def _reference(
    tokenizer: Tokenizer, ids: Sequence[int], stop: Sequence[str], include_stop: bool = False
) -> tuple[str, list[int], str | None]:
    """(text, kept ids, stop string) by brute force: the first token whose visible text holds a stop string;
    among its matches the earliest start, then the shortest."""
    texts = _visible_texts(tokenizer, ids)
    for i in range(1, len(ids) + 1):
        matches = [(texts[i].find(s), len(s), s) for s in stop if s in texts[i]]
        if matches:
            start, length, string = min(matches)
            return texts[i][: start + (length if include_stop else 0)], list(ids[:i]), string
    return tokenizer.decode(list(ids)), list(ids), None


def _run(stream: Any, ids: Sequence[int], sizes: Sequence[int]) -> tuple[list[str], list[int | None]]:
    """Feed `ids` in chunks of the given sizes (cycled); finish() unless stopped. Returns pieces and keeps."""
    pieces: list[str] = []
    keeps: list[int | None] = []
    position, turn = 0, 0
    while position < len(ids) and not stream.stopped:
        size = sizes[turn % len(sizes)] if sizes else 1
        piece, keep = stream.feed(ids[position : position + size])
        pieces.append(piece)
        keeps.append(keep)
        position += size
        turn += 1
    if not stream.stopped:
        pieces.append(stream.finish())
    return pieces, keeps


def _split_positions(tokenizer: Tokenizer, ids: Sequence[int]) -> list[int]:
    """Character offset in the decoded text where each token's text starts (one-shot decode)."""
    return [len(tokenizer.decode(list(ids[:i]))) for i in range(len(ids))]


# -- plain streaming ---------------------------------------------------------------------------------------


def test_byte_level_tokens_split_multibyte_characters() -> None:
    ids = BYTE_BPE.encode("héllo wörld 你好 🙂 日本語").ids
    tokens = [BYTE_BPE.decode([i]) for i in ids]
    assert any("\ufffd" in token for token in tokens), "the fixture must cut characters across tokens"


@pytest.mark.parametrize("text", CORPUS + ["🙂🙃🙂 你好你好 é", "x"])
@pytest.mark.parametrize("sizes", [[1], [2], [3, 1], [5], [1000]])
def test_pieces_concatenate_to_decode_and_never_cut_a_character(text: str, sizes: list[int]) -> None:
    ids = BYTE_BPE.encode(text).ids
    stream = TextStream(BYTE_BPE)
    pieces, keeps = _run(stream, ids, sizes)
    assert keeps == [None] * len(keeps)
    assert "".join(pieces) == stream.text == BYTE_BPE.decode(ids) == text
    assert all("\ufffd" not in piece for piece in pieces)
    assert stream.token_ids == ids and not stream.stopped and stream.stop_string is None


def test_finish_flushes_cut_character_as_the_tokenizer_decodes_it() -> None:
    ids = BYTE_BPE.encode("ab 你").ids
    assert BYTE_BPE.decode(ids[:-1]).endswith("\ufffd")
    stream = TextStream(BYTE_BPE)
    piece, keep = stream.feed(ids[:-1])
    assert (piece, keep) == ("ab ", None)
    assert stream.finish() == BYTE_BPE.decode(ids[:-1])[len("ab ") :]
    assert stream.text == BYTE_BPE.decode(ids[:-1])
    assert stream.finish() == ""
    with pytest.raises(RuntimeError, match="finish"):
        stream.feed(ids[-1:])


def test_empty_chunk_and_numpy_ids() -> None:
    np = pytest.importorskip("numpy")
    ids = BYTE_BPE.encode("hello wörld").ids
    stream = TextStream(BYTE_BPE, stop=["zz"])
    assert stream.feed([]) == ("", None)
    piece, keep = stream.feed(np.asarray(ids, dtype=np.int64))
    assert keep is None and piece + stream.finish() == "hello wörld"


# -- stop strings ------------------------------------------------------------------------------------------


def test_stop_completed_mid_chunk_keeps_only_ids_through_it() -> None:
    text = "hello STOP here. END of the line"
    ids = BYTE_BPE.encode(text).ids
    stream = TextStream(BYTE_BPE, stop=["STOP"])
    piece, keep = stream.feed(ids)
    assert keep is not None and keep < len(ids)
    assert piece == stream.text == "hello "
    assert stream.token_ids == ids[:keep] and stream.stop_string == "STOP"
    assert "STOP" in BYTE_BPE.decode(ids[:keep]) and "STOP" not in BYTE_BPE.decode(ids[: keep - 1])
    assert stream.finish() == ""
    with pytest.raises(RuntimeError, match="STOP"):
        stream.feed(ids[keep:])


def test_stop_spanning_two_chunks_is_held_back_then_cut() -> None:
    text = "the quick brown fox jumps"
    ids = BYTE_BPE.encode(text).ids
    starts = _split_positions(BYTE_BPE, ids)
    stop = "brown fox"
    begin = text.index(stop)
    # Split the ids at a token boundary strictly inside the stop string.
    split = next(i for i, offset in enumerate(starts) if begin < offset < begin + len(stop))
    stream = TextStream(BYTE_BPE, stop=[stop])
    first, keep = stream.feed(ids[:split])
    assert keep is None and first == "the quick "  # "brown..." so far is a prefix of the stop: held back
    second, keep = stream.feed(ids[split:])
    assert keep is not None and second == ""
    assert stream.text == "the quick " and stream.stop_string == stop
    assert (stream.text, stream.token_ids, stream.stop_string) == _reference(BYTE_BPE, ids, [stop])


def test_stop_starting_inside_a_token() -> None:
    text = "the quick brown fox jumps over the lazy dog"
    ids = BYTE_BPE.encode(text).ids
    starts = _split_positions(BYTE_BPE, ids)
    # A token of 3+ characters; the stop string starts at its second character and runs into the next token.
    index = next(i for i in range(1, len(ids) - 1) if starts[i + 1] - starts[i] >= 3)
    begin = starts[index] + 1
    stop = text[begin : starts[index + 1] + 1]
    assert stop and text.index(stop) == begin
    for include_stop in (False, True):
        stream = TextStream(BYTE_BPE, stop=[stop], include_stop=include_stop)
        pieces, keeps = _run(stream, ids, [1])
        assert stream.text == text[: begin + (len(stop) if include_stop else 0)]
        assert keeps[-1] == 1 and stream.token_ids == ids[: index + 2]
        # The token holding the stop's first character is shown up to that character only.
        assert pieces[index] == text[starts[index] : begin]


def test_stop_at_the_first_token() -> None:
    ids = BYTE_BPE.encode("hello world").ids
    first = BYTE_BPE.decode(ids[:1])
    for include_stop, expected in ((False, ""), (True, first)):
        stream = TextStream(BYTE_BPE, stop=[first], include_stop=include_stop)
        assert stream.feed(ids) == (expected, 1)
        assert stream.token_ids == ids[:1] and stream.text == expected and stream.stopped


def test_include_stop_keeps_the_stop_string_and_drops_what_follows_it() -> None:
    text = "Assistant: hello\n\nUser: hi"
    ids = BYTE_BPE.encode(text).ids
    stream = TextStream(BYTE_BPE, stop=["\n\n"], include_stop=True)
    _run(stream, ids, [4])
    assert stream.text == "Assistant: hello\n\n" and stream.stop_string == "\n\n"
    assert BYTE_BPE.decode(stream.token_ids).startswith(stream.text)


def test_earliest_ending_stop_wins_over_stop_order() -> None:
    text = "STOP here. END of the line"
    ids = BYTE_BPE.encode(text).ids
    stream = TextStream(BYTE_BPE, stop=["END", "here", "line"])
    _run(stream, ids, [1000])
    assert stream.stop_string == "here" and stream.text == "STOP "


def test_same_token_matches_earliest_start_then_shortest() -> None:
    tokenizer = _word_tokenizer(["xx", "abcd", "yy"])
    ids = tokenizer.encode("xx abcd yy").ids
    cases = [
        (["bc", "abcd"], "abcd", "xx "),  # both end in token 2: "abcd" starts first, though "bc" ends first
        (["abc", "ab"], "ab", "xx "),  # same start: the shorter one
        (["d y", "cd"], "cd", "xx ab"),  # "d y" ends in token 3, too late
        (["x a"], "x a", "x"),  # a stop across the space the decoder puts between tokens
    ]
    for stop, matched, text in cases:
        stream = TextStream(tokenizer, stop=stop)
        assert stream.feed(ids) == (text, 2)
        assert stream.stop_string == matched and stream.token_ids == ids[:2]


def test_stop_ignores_the_prompt() -> None:
    prompt = BYTE_BPE.encode("User: say STOP").ids
    ids = BYTE_BPE.encode(" ok").ids
    stream = TextStream(BYTE_BPE, stop=["STOP", "P ok"], prompt_ids=prompt)
    _run(stream, ids, [1])
    assert not stream.stopped and stream.text == " ok"


def test_pieces_never_show_the_start_of_a_later_stop() -> None:
    text = "STOP here. END of the line"
    ids = BYTE_BPE.encode(text).ids
    for stop in ("END", "END of", "the line", "e. E"):
        begin = text.index(stop)
        stream = TextStream(BYTE_BPE, stop=[stop])
        shown = ""
        for i in range(len(ids)):
            piece, keep = stream.feed(ids[i : i + 1])
            shown += piece
            assert len(shown) <= begin, (stop, shown)
            if keep is not None:
                break
        assert shown == text[:begin] and stream.stop_string == stop


def test_finish_flushes_a_partial_stop_that_never_completed() -> None:
    # The longest suffix that is a proper prefix of any stop string is held back, until finish().
    for text, shown, held in (("hello ST", "hello ", "ST"), ("hello S", "hel", "lo S")):
        ids = BYTE_BPE.encode(text).ids
        stream = TextStream(BYTE_BPE, stop=["STOP", "lo S!"])
        assert stream.feed(ids) == (shown, None)
        assert stream.finish() == held
        assert stream.text == text and not stream.stopped and stream.token_ids == ids


def test_stop_with_multibyte_characters_and_cut_tokens() -> None:
    text = "héllo wörld 你好 🙂 the quick"
    ids = BYTE_BPE.encode(text).ids
    for stop in ("你好", "好 🙂", "ö", "🙂"):
        for include_stop in (False, True):
            stream = TextStream(BYTE_BPE, stop=[stop], include_stop=include_stop)
            pieces, _ = _run(stream, ids, [2])
            assert all("\ufffd" not in piece for piece in pieces)
            assert (stream.text, stream.token_ids, stream.stop_string) == _reference(
                BYTE_BPE, ids, [stop], include_stop
            )


@pytest.mark.parametrize(
    ("stop", "message"),
    [
        ([""], r"stop strings must be non-empty \(got '' at index 0\)"),
        (["ok", ""], r"stop strings must be non-empty \(got '' at index 1\)"),
        (["ok", 5], r"stop strings must be str \(got 5 of type int at index 1\)"),
        ([None], r"stop strings must be str \(got None of type NoneType at index 0\)"),
        ("END", r"stop must be a sequence of strings, not one string \(got 'END'\)"),
    ],
)
def test_bad_stop_values_raise(stop: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TextStream(BYTE_BPE, stop=stop)


def test_bad_ids_raise_before_consuming_the_chunk() -> None:
    stream = TextStream(BYTE_BPE)
    with pytest.raises(ValueError, match=r"ids must hold integer token ids \(got 1.5 of type float at index 1\)"):
        stream.feed([1, 1.5])
    with pytest.raises(ValueError, match=r"ids must hold non-negative token ids \(got -1 at index 0\)"):
        stream.feed([-1])
    with pytest.raises(ValueError, match="prompt_ids"):
        TextStream(BYTE_BPE, prompt_ids=["a"])
    assert stream.token_ids == [] and stream.text == ""


# -- property: chunking never changes the outcome ----------------------------------------------------------

ALPHABET = list("ab c\nlé好🙂") + ["STOP", "ll", "你好", "END"]
STOPS = ["ab", "b c", "c\n", "\n\n", "好", "🙂", "é", "ll", "STOP", "a a", "l好", "bb", "OP EN", "b", "🙂 "]


@settings(derandomize=True, max_examples=50, deadline=None)
@given(
    text=st.lists(st.sampled_from(ALPHABET), min_size=1, max_size=25).map("".join),
    random_ids=st.lists(st.integers(0, 299), max_size=6),
    substrings=st.lists(st.tuples(st.integers(0, 200), st.integers(1, 6)), max_size=2),
    fixed_stops=st.lists(st.sampled_from(STOPS), max_size=2),
    include_stop=st.booleans(),
    sizes=st.lists(st.integers(1, 5), min_size=1, max_size=8),
)
def test_any_chunking_matches_token_by_token(
    text: str,
    random_ids: list[int],
    substrings: list[tuple[int, int]],
    fixed_stops: list[str],
    include_stop: bool,
    sizes: list[int],
) -> None:
    # Stops cut from the text itself match often; random ids mixed in produce invalid and cut UTF-8 too.
    stop = [text[start % len(text) :][:length] for start, length in substrings] + fixed_stops
    ids = random_ids[:3] + BYTE_BPE.encode(text).ids + random_ids[3:]
    expected = _reference(BYTE_BPE, ids, stop, include_stop)
    one_by_one = TextStream(BYTE_BPE, stop=stop, include_stop=include_stop)
    _run(one_by_one, ids, [1])
    chunked = TextStream(BYTE_BPE, stop=stop, include_stop=include_stop)
    pieces, keeps = _run(chunked, ids, sizes)
    for stream in (one_by_one, chunked):
        assert (stream.text, stream.token_ids, stream.stop_string) == expected
    assert "".join(pieces) == chunked.text
    assert all(keep is None for keep in keeps[:-1])
    # Every cumulative piece is final text: a prefix of what one-token-at-a-time decoding shows by then.
    visible, shown, position = _visible_texts(BYTE_BPE, ids), "", 0
    for turn, piece in enumerate(pieces[: len(keeps)]):
        shown += piece
        position = min(position + sizes[turn % len(sizes)], len(ids))
        assert visible[position].startswith(shown) and chunked.text.startswith(shown)
    if chunked.stopped:
        assert keeps[-1] is not None and 1 <= keeps[-1] <= sizes[(len(keeps) - 1) % len(sizes)]
        # No piece before the stopping chunk showed any part of the stop string that ended generation.
        match_start = len(expected[0]) - (len(expected[2]) if include_stop else 0)
        assert len("".join(pieces[:-1])) <= match_start
    else:
        assert chunked.text == BYTE_BPE.decode(ids)


# -- priming with the prompt, decoder quirks ---------------------------------------------------------------


def test_prompt_ids_give_the_first_token_its_leading_space() -> None:
    prompt = METASPACE_BPE.encode("the quick").ids
    ids = METASPACE_BPE.encode("brown fox").ids
    alone = TextStream(METASPACE_BPE)
    _run(alone, ids, [1])
    assert alone.text == METASPACE_BPE.decode(ids) == "brown fox"  # Metaspace drops the first space
    primed = TextStream(METASPACE_BPE, prompt_ids=prompt, stop=[" fox"])
    pieces, _ = _run(primed, ids, [2])
    assert pieces[0] == " brown" and primed.text == " brown" and primed.stop_string == " fox"
    full = METASPACE_BPE.decode(prompt + ids)
    assert full[len(METASPACE_BPE.decode(prompt)) :] == " brown fox"


def test_prompt_ending_in_a_cut_character_does_not_leak_into_the_text() -> None:
    prompt = BYTE_BPE.encode("say 你").ids
    ids = BYTE_BPE.encode(" ok fine").ids
    cut = prompt[:-1]
    assert BYTE_BPE.decode(cut).endswith("\ufffd")
    stream = TextStream(BYTE_BPE, prompt_ids=cut)
    _run(stream, ids, [3])
    assert stream.text == " ok fine"
    # Ids completing the prompt's cut character decode as the tokenizer decodes them alone.
    stream = TextStream(BYTE_BPE, prompt_ids=cut)
    _run(stream, prompt[-1:] + ids, [2])
    assert stream.text == BYTE_BPE.decode(prompt[-1:] + ids)


def test_decoder_that_rewrites_earlier_text_is_restarted() -> None:
    # DecodeStream raises "Invalid prefix" when decode(window) stops extending decode(shorter window).
    class JoinAB:
        def decode_chain(self, tokens: list[str]) -> list[str]:
            return [" ".join(tokens).replace("a b", "X")]

    tokenizer = _word_tokenizer(["a", "b", "c", "."])
    tokenizer.decoder = decoders.Decoder.custom(JoinAB())
    ids = tokenizer.encode("a b . c a b c").ids
    assert tokenizer.decode(ids) == "X . c X c"
    for sizes in ([1], [2], [3, 1], [7]):
        stream = TextStream(tokenizer, stop=["b ."])
        _run(stream, ids, sizes)
        # "a" was shown before "b" turned it into "X"; shown text is never revised, and after the restart
        # the ids held back ("b", ".") decode on their own. The outcome still does not depend on chunking.
        assert (stream.text, stream.token_ids, stream.stop_string) == ("a", ids[:3], "b .")
        stream = TextStream(tokenizer)
        _run(stream, ids, sizes)
        assert stream.text == "ab . c ab c" and stream.token_ids == ids


def test_skip_special_tokens() -> None:
    tokenizer = _word_tokenizer(["hello", "world"])
    tokenizer.add_special_tokens(["<end>"])
    ids = tokenizer.encode("hello <end> world").ids
    kept = TextStream(tokenizer, stop=["<end>"])
    assert kept.feed(ids) == ("hello ", 2)
    skipped = TextStream(tokenizer, stop=["<end>"], skip_special_tokens=True)
    assert skipped.feed(ids) == ("hello world", None)
    assert skipped.finish() == "" and not skipped.stopped


# -- the real SmolLM2 tokenizer ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smollm2() -> Tokenizer:
    if not SMOLLM2_TOKENIZER.is_file():
        pytest.skip(f"no SmolLM2 tokenizer at {SMOLLM2_TOKENIZER}")
    return Tokenizer.from_file(str(SMOLLM2_TOKENIZER))


def test_smollm2_streaming_and_stops(smollm2: Tokenizer) -> None:
    text = "The answer is 42.\nUser: what about 你好 🙂 and naïve café?\n\nAssistant: done."
    ids = smollm2.encode(text).ids
    for sizes in ([1], [2], [5], [3, 1, 4]):
        stream = TextStream(smollm2)
        pieces, _ = _run(stream, ids, sizes)
        assert "".join(pieces) == smollm2.decode(ids) == text
        assert all("\ufffd" not in piece for piece in pieces)
    for stop in (["User:"], ["\n\n", "Assistant"], ["好 🙂"], ["swer is"], ["é?"], ["nothing", "e a"]):
        for include_stop in (False, True):
            expected = _reference(smollm2, ids, stop, include_stop)
            for sizes in ([1], [5], [2, 3]):
                stream = TextStream(smollm2, stop=stop, include_stop=include_stop)
                _run(stream, ids, sizes)
                assert (stream.text, stream.token_ids, stream.stop_string) == expected


def test_smollm2_chat_prompt_and_special_tokens(smollm2: Tokenizer) -> None:
    prompt = smollm2.encode("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n").ids
    ids = smollm2.encode("Hello there!<|im_end|>\n").ids
    stream = TextStream(smollm2, stop=["<|im_end|>"], prompt_ids=prompt)
    assert stream.feed(ids) == ("Hello there!", ids.index(smollm2.token_to_id("<|im_end|>")) + 1)
    skipped = TextStream(smollm2, skip_special_tokens=True, prompt_ids=prompt)
    pieces, _ = _run(skipped, ids, [2])
    assert "".join(pieces) == smollm2.decode(ids, skip_special_tokens=True) == "Hello there!\n"
