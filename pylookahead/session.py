"""The Python session API: strings in, strings out, over the native engine."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence, Union

from . import _core

Prompt = Union[str, Sequence[int]]
Lookahead = Union[None, str, _core.LookaheadConfig, _core.AutoLookahead]


@dataclass(frozen=True)
class GenerationOutput:
    """What `Session.generate` returns."""

    token_ids: list[int]  # new tokens only
    text: str  # decoded new tokens ("" when the checkpoint has no tokenizer.json)
    stats: _core.GenerationStats  # steps, new_tokens, prefill_s, decode_s, accept_histogram, ...
    stop_reason: str  # "end_token", "max_new_tokens" or "callback"


def _check_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int >= {minimum} (got {value!r})")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum} (got {value})")
    return value


class Model:
    """Loaded weights (and tokenizer) of one checkpoint, shareable by many sessions."""

    def __init__(
        self,
        model: str | Path,
        device: str = "cpu",
        dtype: str = "float32",
        num_threads: int = 0,
    ) -> None:
        path = Path(model).expanduser()
        if not path.exists() and "/" not in str(model):
            # A catalogue name ("smollm2-135m-instruct"); a path goes straight to the loader,
            # which reports what is missing as a ModelLoadError.
            from .models import resolve_model

            path = resolve_model(str(model))
        engine = _core.EngineConfig()
        engine.device = device
        engine.dtype = dtype
        engine.num_threads = _check_int("num_threads", num_threads, 0)
        self.path = Path(path)
        self._core = _core.Model(str(self.path), engine)
        self.tokenizer = None
        if (self.path / "tokenizer.json").exists():
            from .tokenizer import TextTokenizer

            self.tokenizer = TextTokenizer.from_pretrained(self.path)

    @property
    def info(self) -> _core.ModelInfo:
        return self._core.info


class Session:
    """One sequence's state (KV cache, lookahead pool) over a loaded model.

    Use one Session from one thread at a time; sessions over one Model may run in parallel.
    """

    def __init__(
        self,
        model: str | Path | Model,
        device: str = "cpu",
        dtype: str = "float32",
        kv_capacity: int = 0,
        num_threads: int = 0,
    ) -> None:
        self.model = model if isinstance(model, Model) else Model(model, device, dtype, num_threads)
        config = _core.SessionConfig()
        config.kv_capacity = _check_int("kv_capacity", kv_capacity, 0)
        self._session = _core.Session(self.model._core, config)

    @property
    def tokenizer(self):
        return self.model.tokenizer

    @property
    def kv_capacity(self) -> int:
        return self._session.kv_capacity

    def encode(self, prompt: Prompt) -> list[int]:
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise ValueError(
                    f"prompt is a string but {self.model.path} has no tokenizer.json; "
                    "pass token ids instead"
                )
            return self.tokenizer.encode(prompt)
        ids = list(prompt)
        for i, t in enumerate(ids):
            if isinstance(t, bool) or not isinstance(t, int):
                raise ValueError(f"prompt[{i}] must be an int token id (got {t!r})")
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        return "" if self.tokenizer is None else self.tokenizer.decode(list(ids))

    def generate(
        self,
        prompt: Prompt,
        max_new_tokens: int = 128,
        lookahead: Lookahead = None,
        stop_token_ids: Sequence[int] = (),
        on_tokens: Callable[[list[int]], bool | None] | None = None,
    ) -> GenerationOutput:
        """Greedy decoding of `prompt` (a string or token ids).

        With `lookahead` (a `LookaheadConfig`) the output is the same, token for token, in fewer
        forward passes. With `lookahead="auto"` (or an `AutoLookahead` with its options) the
        engine picks greedy or lookahead steps and their (W, N, G) itself, from this session's
        step-cost table (see `calibrate`) and the acceptance it observes; the output is still
        greedy's, and `stats.auto_decisions` lists the switches (step, "greedy" or "W,N,G").
        `on_tokens(ids)` is called after each step; returning False stops.
        """
        if (isinstance(lookahead, str) and lookahead != "auto") or not isinstance(
            lookahead, (type(None), str, _core.LookaheadConfig, _core.AutoLookahead)
        ):
            raise ValueError(
                "lookahead must be None, 'auto', a LookaheadConfig or an AutoLookahead "
                f"(got {lookahead!r})"
            )
        ids = self.encode(prompt)
        config = _core.GenerationConfig()
        config.max_new_tokens = _check_int("max_new_tokens", max_new_tokens, 1)
        config.stop_token_ids = [_check_int("stop_token_ids[]", t, 0) for t in stop_token_ids]
        result = self._session.generate(ids, config, lookahead, on_tokens)
        tokens = list(result.tokens)
        return GenerationOutput(tokens, self.decode(tokens), result.stats, result.stop_reason)

    def calibrate(
        self, costs: Mapping[int, float] | Sequence[tuple[int, float]] | None = None
    ) -> list[tuple[int, float]]:
        """The step-cost table of automatic lookahead: [(tokens per step, seconds), ...].

        Without `costs`, measures it on the first call (about 30 forward passes of 1..64 tokens,
        or up to 256 when wide steps are cheap) and returns the cached table afterwards. With
        `costs` ({tokens: seconds} or (tokens, seconds) pairs; one entry for 1 token), uses that
        table instead, e.g. one saved from an earlier session or a synthetic one for tests.
        """
        if costs is not None:
            pairs = costs.items() if isinstance(costs, Mapping) else costs
            table = []
            for item in pairs:
                tokens, seconds = item
                table.append((_check_int("costs tokens", tokens, 1), float(seconds)))
            self._session.set_step_costs(table)
            return self.step_costs()
        return [(int(t), float(s)) for t, s in self._session.calibrate()]

    def step_costs(self) -> list[tuple[int, float]]:
        """The current step-cost table ([] before `calibrate` or a first `lookahead="auto"`)."""
        return [(int(t), float(s)) for t, s in self._session.step_costs()]

    def prompt_logits(self, prompt: Prompt):
        """Logits [L, V] (float32 numpy) of every prompt position, from one prefill pass."""
        return self._session.prompt_logits(self.encode(prompt))
