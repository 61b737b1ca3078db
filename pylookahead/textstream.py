"""Streaming detokenization with stop strings, for engines that emit several tokens per step.

`TextStream.feed(chunk)` turns each chunk of generated ids into the text that is safe to show, and ends
generation on a stop string exactly where one-token-at-a-time generation would have ended: ids are
decoded and matched one by one, so the result never depends on how the ids were split into chunks.

Decoding uses `tokenizers.decoders.DecodeStream`, which re-decodes only a short window of recent ids per
token and holds text back while it ends in U+FFFD (a multi-byte character split across tokens). Stop
strings are matched with an Aho-Corasick automaton over the decoded characters, whose state is also the
longest suffix of the text that could still grow into a stop string, i.e. the text to hold back.

Known differences from `tokenizer.decode(all_ids)` (the concatenated text equals it otherwise):

* With `prompt_ids`, the first generated token is decoded after the end of the prompt, so decoders that
  strip a leading space of the first token (Metaspace / SentencePiece, `Strip`) keep it here, as they
  would in `decode(prompt_ids + ids)`.
* A decoder whose output for a window is not an extension of its output for a shorter window (DecodeStream
  raises "Invalid prefix" then) is restarted on the new ids; text already shown is not revised, so the
  spacing at that point may differ from a one-shot decode.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tokenizers.decoders import DecodeStream

if TYPE_CHECKING:
    from tokenizers import Tokenizer

__all__ = ["TextStream", "check_stop_strings"]

# Prompt ids that prime the decoder: enough for spacing context (the previous token or two) and for a
# multi-byte character split over up to four byte tokens, without decoding a whole long prompt.
_PROMPT_CONTEXT = 8
_REPLACEMENT_CHAR = "\ufffd"


def check_stop_strings(stop: Sequence[str]) -> tuple[str, ...]:
    """`stop` as a tuple, or ValueError unless it is a sequence of non-empty strings."""
    if isinstance(stop, str):
        raise ValueError(f"stop must be a sequence of strings, not one string (got {stop!r}); wrap it in a list")
    try:
        strings = tuple(stop)
    except TypeError:
        raise ValueError(f"stop must be a sequence of strings (got {stop!r})") from None
    for index, value in enumerate(strings):
        if not isinstance(value, str):
            raise ValueError(
                f"stop strings must be str (got {value!r} of type {type(value).__name__} at index {index})"
            )
        if not value:
            raise ValueError(f"stop strings must be non-empty (got {value!r} at index {index})")
    return strings


class _StopMatcher:
    """Aho-Corasick automaton over the stop strings, fed the decoded text piece by piece.

    `hold` is the length of the longest suffix of the text fed so far that is a prefix of some stop string
    (a proper prefix as long as no stop string has matched).
    """

    def __init__(self, patterns: Sequence[str]) -> None:
        self._goto: list[dict[str, int]] = [{}]
        self._depth: list[int] = [0]
        outputs: list[list[str]] = [[]]
        for pattern in dict.fromkeys(patterns):
            node = 0
            for char in pattern:
                child = self._goto[node].get(char)
                if child is None:
                    child = len(self._goto)
                    self._goto[node][char] = child
                    self._goto.append({})
                    self._depth.append(self._depth[node] + 1)
                    outputs.append([])
                node = child
            outputs[node].append(pattern)
        # Failure links in breadth-first order; a node's outputs gain those of its failure node, so that
        # `_out[node]` lists every stop string that is a suffix of the node's string, longest first.
        self._fail = [0] * len(self._goto)
        self._out: list[tuple[str, ...]] = [()] * len(self._goto)
        queue = list(self._goto[0].values())
        for node in queue:
            self._out[node] = tuple(outputs[node]) + self._out[self._fail[node]]
            for char, child in self._goto[node].items():
                fallback = self._fail[node]
                while fallback and char not in self._goto[fallback]:
                    fallback = self._fail[fallback]
                self._fail[child] = self._goto[fallback].get(char, 0)
                queue.append(child)
        self._longest = max(len(pattern) for pattern in patterns)
        self._state = 0

    @property
    def hold(self) -> int:
        return self._depth[self._state]

    def advance(self, piece: str) -> tuple[int, str] | None:
        """Feed `piece`; return the match with the earliest start among those ending inside it, if any.

        The start is relative to the beginning of `piece` (negative when the match began earlier). Among
        matches with the same start, the shortest wins.
        """
        goto, fail, out = self._goto, self._fail, self._out
        state = self._state
        best: tuple[int, str] | None = None
        for end, char in enumerate(piece, start=1):
            while state and char not in goto[state]:
                state = fail[state]
            state = goto[state].get(char, 0)
            if best is not None and end - self._longest >= best[0]:
                break  # every later match starts after the best one
            if out[state]:
                pattern = out[state][0]  # the longest, hence earliest-starting, match ending here
                start = end - len(pattern)
                if best is None or start < best[0]:
                    best = (start, pattern)
        self._state = state
        return best


class TextStream:
    """Incremental text for chunked generation, with stop strings decided token by token.

    Feed each chunk of generated ids to `feed()`; call `finish()` when generation ends without a stop.
    A stop string matches only generated text. When a stop string is completed, the token that completed
    it (scanning the chunk one id at a time) is the last one kept; among the stop strings completed by
    that token, the match that starts earliest in the text wins (then the shortest).
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        stop: Sequence[str] = (),
        include_stop: bool = False,
        skip_special_tokens: bool = False,
        prompt_ids: Sequence[int] = (),
    ) -> None:
        stops = check_stop_strings(stop)
        self._tokenizer = tokenizer
        self._include_stop = bool(include_stop)
        self._skip_special_tokens = bool(skip_special_tokens)
        self._matcher = _StopMatcher(stops) if stops else None
        context = self._prompt_context([_check_id("prompt_ids", i, v) for i, v in enumerate(prompt_ids)])
        self._decoder = self._new_decoder(context)
        self._context = context  # ids decoded just before `_pending`, for decoding them in context
        self._pending: list[int] = []  # ids whose text the decoder still holds back
        self._held = ""  # decoded text not yet returned: a possible start of a stop string
        self._parts: list[str] = []
        self._ids: list[int] = []
        self._stop_string: str | None = None
        self._finished = False

    @property
    def text(self) -> str:
        """All text returned so far by `feed()` and `finish()`, concatenated."""
        return "".join(self._parts)

    @property
    def token_ids(self) -> list[int]:
        """All ids kept so far: every id fed, or through the token that completed the stop string."""
        return list(self._ids)

    @property
    def has_stop_strings(self) -> bool:
        """Whether any stop string was given (else feeding all ids at once gives the same text)."""
        return self._matcher is not None

    @property
    def stopped(self) -> bool:
        """Whether a stop string has been matched."""
        return self._stop_string is not None

    @property
    def stop_string(self) -> str | None:
        """The stop string that matched, or None."""
        return self._stop_string

    def feed(self, ids: Sequence[int]) -> tuple[str, int | None]:
        """Consume a chunk of new ids; return `(text_piece, keep)`.

        `text_piece` is the newly safe text (possibly ""): it never ends inside a multi-byte character and
        never shows text that could still be the start of a stop string. `keep` is None without a stop;
        otherwise the number of ids of this chunk kept (through the token that completed the stop string),
        `text_piece` ends at the start of the stop string (at its end with `include_stop`), and the
        stream accepts no more ids.
        """
        if self._stop_string is not None:
            raise RuntimeError(f"feed() after stop string {self._stop_string!r} matched; the stream has ended")
        if self._finished:
            raise RuntimeError("feed() after finish(); the stream has ended")
        chunk = [_check_id("ids", index, value) for index, value in enumerate(ids)]
        shown: list[str] = []
        for index, token in enumerate(chunk):
            self._ids.append(token)
            piece = self._step(token)
            if not piece:
                continue
            self._held += piece
            if self._matcher is None:
                shown.append(self._held)
                self._held = ""
                continue
            match = self._matcher.advance(piece)
            if match is not None:
                start, pattern = match
                cut = len(self._held) - len(piece) + start + (len(pattern) if self._include_stop else 0)
                shown.append(self._held[:cut])
                self._held = ""
                self._stop_string = pattern
                return self._emit("".join(shown)), index + 1
            safe = len(self._held) - self._matcher.hold
            if safe > 0:
                shown.append(self._held[:safe])
                self._held = self._held[safe:]
        return self._emit("".join(shown)), None

    def finish(self) -> str:
        """End generation without a stop; return the text still held back.

        That is a partial stop string that never completed, and ids whose text was incomplete, decoded as
        the tokenizer does (a cut multi-byte character becomes U+FFFD). The flushed text is not matched
        against the stop strings. Returns "" after a stop or a previous `finish()`.
        """
        if self._stop_string is not None or self._finished:
            return ""
        self._finished = True
        rest = self._held + self._decode_pending()
        self._held = ""
        self._pending = []
        return self._emit(rest)

    # -- internals ----------------------------------------------------------------------------------------

    def _emit(self, text: str) -> str:
        if text:
            self._parts.append(text)
        return text

    def _decode(self, ids: Sequence[int]) -> str:
        return self._tokenizer.decode(list(ids), skip_special_tokens=self._skip_special_tokens)

    def _new_decoder(self, context: list[int]) -> DecodeStream:
        if context:
            return DecodeStream(ids=context, skip_special_tokens=self._skip_special_tokens)
        return DecodeStream(skip_special_tokens=self._skip_special_tokens)

    def _prompt_context(self, prompt_ids: list[int]) -> list[int]:
        # DecodeStream(ids=...) decodes its priming ids as the starting prefix, but when that text ends in
        # U+FFFD it keeps no prefix and emits the priming text along with the first generated token. So
        # drop trailing ids that end in a cut character; generated ids completing it then decode to U+FFFD,
        # as they do in tokenizer.decode(generated_ids).
        context = prompt_ids[-_PROMPT_CONTEXT:]
        while context and self._decode(context).endswith(_REPLACEMENT_CHAR):
            context.pop()
        return context

    def _step(self, token: int) -> str:
        """Decode one more id; return the text it completes ("" while the decoder holds text back)."""
        try:
            piece = self._decoder.step(self._tokenizer, token)
        except Exception as error:
            if "invalid prefix" not in str(error).lower():
                raise
            piece = self._restart_decoder(token)
        if piece is None:
            self._pending.append(token)
            return ""
        self._context = [*self._pending, token]
        self._pending = []
        return piece

    def _restart_decoder(self, token: int) -> str | None:
        # The decoder's text for its window stopped extending its text for the shorter window (a decoder
        # that rewrites across tokens). The old stream stays broken, so start a new one primed with the ids
        # of the last emitted text, or unprimed if that fails too, and replay the held-back ids.
        replay = [*self._pending, token]
        if self._context and not self._decode(self._context).endswith(_REPLACEMENT_CHAR):
            self._decoder = self._new_decoder(list(self._context))
            try:
                return self._decoder.step(self._tokenizer, replay)
            except Exception as error:
                if "invalid prefix" not in str(error).lower():
                    raise
        self._decoder = self._new_decoder([])
        return self._decoder.step(self._tokenizer, replay)

    def _decode_pending(self) -> str:
        if not self._pending:
            return ""
        before = self._decode(self._context)
        after = self._decode([*self._context, *self._pending])
        if after.startswith(before):
            return after[len(before) :]
        return self._decode(self._pending)


def _check_id(field: str, index: int, value: object) -> int:
    try:
        token = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise ValueError(
            f"{field} must hold integer token ids (got {value!r} of type {type(value).__name__} at index {index})"
        ) from None
    if token < 0:
        raise ValueError(f"{field} must hold non-negative token ids (got {token} at index {index})")
    return token
