"""The Python session API: strings in, strings out, over the native engine."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Generator, Iterable, Iterator, Mapping, NamedTuple, Sequence, Union

from . import _core
from .catalog import resolve_model
from .textstream import TextStream, check_stop_strings

Prompt = Union[str, Sequence[int]]
Lookahead = Union[None, str, _core.LookaheadConfig, _core.AutoLookahead]
Message = Mapping[str, str]

# Keyword options of generate / stream / chat beyond the named ones.
_OPTIONS = frozenset(
    {"stop", "include_stop", "temperature", "top_k", "top_p", "seed", "reuse_cache", "keep_pool",
     "skip_special_tokens", "timeout_s"}
)  # fmt: skip


@dataclass(frozen=True)
class GenerationOutput:
    """What `Session.generate` (and `chat`, and a finished `stream`) returns."""

    token_ids: list[int]  # new tokens only; with a stop string, through the token that completed it
    # Their text as it reads after the prompt (decoded in context, so the spacing of the first
    # token is right), cut before a stop string; "" when the checkpoint has no tokenizer.json.
    text: str
    stats: _core.GenerationStats  # steps, new_tokens, prefill_s, decode_s, accept_histogram, ...
    # "end_token", "max_new_tokens", "stop_string", "callback" (on_tokens, or a stream left early) or
    # "timeout" (the call's timeout_s passed: it stopped after the step in progress)
    stop_reason: str
    stop_string: str | None = None  # the stop string that matched, if any


@dataclass(frozen=True)
class StreamChunk:
    """One piece of a `Session.stream`: the text that is now final, and the ids of that step."""

    text: str  # may be "" (an incomplete character or a possible stop string is held back)
    token_ids: list[int]  # the ids this step emitted (after any cut at a stop)


# Conversions of Python values to the engine's C fields. They check only the Python type and that
# the value fits the field (as the bindings' own conversions do, with the same messages); the rules
# (ranges, the vocabulary, the lookahead kind) are the engine's, which raises ValueError naming the
# field, the value and the rule.
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1  # C int fields; token ids (int32) too
_UINT64_MAX = 2**64 - 1  # seeds


def _c_int(name: str, value: object, lo: int = _INT_MIN, hi: int = _INT_MAX) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int (got {value!r})")
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be in [{lo}, {hi}] (got {value})")
    return value


def _c_uint64(name: str, value: object) -> int:
    return _c_int(name, value, 0, _UINT64_MAX)


def _c_double(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number (got {value!r})")
    try:
        return float(value)
    except OverflowError:  # an int beyond a double's range
        raise ValueError(f"{name} must be in the range of a C double (got {value})") from None


def _c_bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be a bool (got {value!r})")
    return value


def _c_str(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a str (got {value!r})")
    return value


class _Run(NamedTuple):
    """A generation request converted for the engine (which checks it when the call runs)."""

    ids: list[int]
    config: _core.GenerationConfig
    lookahead: Lookahead  # passed as it is: the bindings take None, "auto", a LookaheadConfig or an AutoLookahead
    # Makes the TextStream of the call (None without a tokenizer). Called once the engine has accepted the
    # request, so it only ever decodes prompt ids the engine checked.
    new_text: Callable[[], TextStream] | None
    has_stop_strings: bool
    timeout_s: float | None  # deadline of the call, from when it starts running


class Model:
    """Loaded weights (and tokenizer) of one checkpoint, shareable by many sessions."""

    def __init__(
        self,
        model: str | Path,
        *,
        device: str = "cpu",
        dtype: str = "float32",
        num_threads: int = 0,
        linear_kernel: str = "auto",
        quantize: str | None = None,
        quantize_lm_head: bool = True,
        lm_head_screen: bool = True,
        use_cuda_graphs: bool = True,
    ) -> None:
        """`model`: a checkpoint directory, a GGUF file, or a catalogue name already pulled
        (`pylookahead pull NAME`; otherwise ModelNotPulledError). The options are EngineConfig's
        fields (cpp/include/pylookahead/config.h), checked by the engine; `quantize=None` is "auto".
        `use_cuda_graphs` applies on CUDA only (docs/design.md, "CUDA")."""
        engine = _core.EngineConfig()
        engine.device = _c_str("device", device)
        engine.dtype = _c_str("dtype", dtype)
        engine.num_threads = _c_int("num_threads", num_threads)
        engine.linear_kernel = _c_str("linear_kernel", linear_kernel)
        if quantize is not None and not isinstance(quantize, str):
            raise ValueError(f"quantize must be None or a str (got {quantize!r})")
        engine.quantize = "auto" if quantize is None else quantize
        engine.quantize_lm_head = _c_bool("quantize_lm_head", quantize_lm_head)
        engine.lm_head_screen = _c_bool("lm_head_screen", lm_head_screen)
        engine.use_cuda_graphs = _c_bool("use_cuda_graphs", use_cuda_graphs)
        path = Path(model).expanduser()
        if not path.exists() and "/" not in str(model):
            # A catalogue name ("smollm2-135m-instruct"); a path goes straight to the loader,
            # which reports what is missing as a ModelLoadError.
            path = resolve_model(str(model))
        self.path = Path(path)
        self._core = _core.Model(str(self.path), engine)
        self.tokenizer = None
        if self.path.is_file():  # a GGUF file: its tokenizer (if it has one), converted by transformers
            if "tokenizer.ggml.model" in _core.read_gguf_info(str(self.path))["metadata"]:
                from .tokenizer import TextTokenizer

                self.tokenizer = TextTokenizer.from_gguf(self.path, eos_token_ids=tuple(self._core.info.eos_token_ids))
        elif (self.path / "tokenizer.json").exists():
            from .tokenizer import TextTokenizer

            self.tokenizer = TextTokenizer.from_pretrained(self.path)

    @property
    def info(self) -> _core.ModelInfo:
        return self._core.info


class Session:
    """One sequence's state (KV cache, lookahead pool, chat history) over a loaded model.

    Every generation option is per call. Use one Session from one thread at a time (a call made
    while another one, or an open `stream`, runs raises RuntimeError); sessions over one Model run
    in parallel threads, sharing its weights.
    """

    def __init__(
        self,
        model: str | Path | Model,
        *,
        device: str | None = None,
        dtype: str | None = None,
        kv_capacity: int = 0,
        num_threads: int | None = None,
        cuda_step_rows: int = 64,
    ) -> None:
        """`model`: a loaded `Model`, or what `Model` takes (with `device`, `dtype` and `num_threads`,
        default "cpu", "float32" and 0). A loaded Model has its own device, dtype and threads: giving
        them here as well is a ValueError unless they are the Model's. `kv_capacity`: KV cache rows
        (0: the model's default; SessionConfig). `cuda_step_rows`: on CUDA, the rows every decode step runs
        (greedy and lookahead alike, so that lookahead == this Session's greedy; docs/design.md, "CUDA")."""
        if isinstance(model, Model):
            info = model.info
            for field, value, own in (("device", device, info.device), ("dtype", dtype, info.dtype)):
                if value is not None and value != own:
                    raise ValueError(
                        f"{field}={value!r}: a Session over a loaded Model runs on the Model's {field} ({own!r}); "
                        f"pass {field} to Model(...) instead"
                    )
            if num_threads is not None:
                raise ValueError(
                    f"num_threads={num_threads!r}: a Session over a loaded Model uses the Model's threads; "
                    "pass num_threads to Model(...) instead"
                )
            self.model = model
        else:
            self.model = Model(
                model,
                device="cpu" if device is None else device,
                dtype="float32" if dtype is None else dtype,
                num_threads=0 if num_threads is None else num_threads,
            )
        config = _core.SessionConfig()
        config.kv_capacity = _c_int("kv_capacity", kv_capacity)
        config.cuda_step_rows = _c_int("cuda_step_rows", cuda_step_rows)
        self._session = _core.Session(self.model._core, config)
        self._busy = threading.Lock()
        self._messages: list[dict[str, str]] = []
        self._last_output: GenerationOutput | None = None

    @property
    def tokenizer(self):
        return self.model.tokenizer

    @property
    def kv_capacity(self) -> int:
        return self._session.kv_capacity

    def encode(self, prompt: Prompt) -> list[int]:
        """The token ids of `prompt`: a string through the checkpoint's tokenizer, or token ids as
        they are (ints; the engine checks that they are in the vocabulary when they are used)."""
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise ValueError(
                    f"prompt is a string but {self.model.path} has no tokenizer.json; pass token ids instead"
                )
            return self.tokenizer.encode(prompt)
        try:
            ids = list(prompt)
        except TypeError:
            raise ValueError(f"prompt must be a str or a sequence of token ids (got {prompt!r})") from None
        return [_c_int(f"prompt[{i}]", t) for i, t in enumerate(ids)]

    def decode(self, ids: Sequence[int]) -> str:
        return "" if self.tokenizer is None else self.tokenizer.decode(list(ids))

    # ---- generation --------------------------------------------------------------------------

    def generate(
        self,
        prompt: Prompt,
        *,
        max_new_tokens: int = 128,
        lookahead: Lookahead = None,
        stop_token_ids: Sequence[int] = (),
        on_tokens: Callable[[list[int]], bool | None] | None = None,
        **options: Any,
    ) -> GenerationOutput:
        """Decode a continuation of `prompt` (a string or token ids).

        Greedy by default; `temperature > 0` samples (with `top_k`, `top_p`, `seed`). With
        `lookahead` (a `LookaheadConfig`, `"auto"` or an `AutoLookahead`) the output is the same,
        token for token, in fewer forward passes; for sampling, the same for the same `seed`.
        `stop=["..."]` ends generation where token-by-token decoding would have ended (the stop
        string itself is left out of `.text` unless `include_stop=True`). `reuse_cache=True` reuses
        the cached K/V rows of the prefix this prompt shares with the session's last sequence;
        `keep_pool=True` keeps the n-gram pool of earlier calls. `on_tokens(ids)` is called after
        each step; returning False stops. `timeout_s` stops after the step in progress once that
        many seconds have passed (`stop_reason == "timeout"`). Other options:
        `skip_special_tokens` (for `.text`).

        A bad value raises ValueError naming the option, the value and the rule: the engine checks
        the options it runs with (ranges, prompt and stop ids in the vocabulary, the KV cache room,
        the lookahead kind); Python checks only their types and the Python-only options.
        """
        with self._exclusive():
            run = self._prepare(prompt, max_new_tokens, lookahead, stop_token_ids, options)
            return self._run(run, on_tokens=on_tokens)

    def stream(
        self,
        prompt: Prompt,
        *,
        max_new_tokens: int = 128,
        lookahead: Lookahead = None,
        stop_token_ids: Sequence[int] = (),
        **options: Any,
    ) -> Iterator[StreamChunk]:
        """Like `generate`, but yields a `StreamChunk` per step as the engine accepts tokens.

        Pieces never split a multi-byte character nor show part of a stop string; joined, they
        are the text `generate` returns. Leaving the loop early (`break`, or closing the
        generator) stops generation after the step in progress and leaves the session usable.
        The finished `GenerationOutput` is the generator's return value and `last_output`.
        Options the engine checks raise their ValueError from the first iteration (when the
        engine starts); the others at the call.
        """
        with self._exclusive():
            run = self._prepare(prompt, max_new_tokens, lookahead, stop_token_ids, options)
        return self._stream(run, lambda out: None)

    def chat(self, messages: str | Message | Sequence[Message], **options: Any) -> GenerationOutput:
        """Continue this session's conversation: `messages` (a user string, a message dict, or a
        list of them) are appended, the checkpoint's chat template renders the whole
        conversation, and the answer is generated and appended as the assistant's turn.

        The K/V rows of earlier turns and the n-gram pool are reused (`reuse_cache` and
        `keep_pool`), so a turn costs only its new tokens and earlier answers feed lookahead.
        `reset()` starts a new conversation. Options as for `generate`; `.text` leaves out
        special tokens (e.g. the end-of-turn token) unless `skip_special_tokens=False`.
        """
        with self._exclusive():
            run, conversation = self._prepare_chat(messages, options)
            out = self._run(run)
            self._messages = conversation + [{"role": "assistant", "content": out.text}]
            return out

    def chat_stream(self, messages: str | Message | Sequence[Message], **options: Any) -> Iterator[StreamChunk]:
        """`chat`, streamed as `stream` does. A conversation left early keeps the partial answer."""
        with self._exclusive():
            run, conversation = self._prepare_chat(messages, options)

        def record(out: GenerationOutput) -> None:
            self._messages = conversation + [{"role": "assistant", "content": out.text}]

        return self._stream(run, record)

    # ---- asyncio ----------------------------------------------------------------------------

    async def agenerate(
        self,
        prompt: Prompt,
        *,
        max_new_tokens: int = 128,
        lookahead: Lookahead = None,
        stop_token_ids: Sequence[int] = (),
        on_tokens: Callable[[list[int]], bool | None] | None = None,
        **options: Any,
    ) -> GenerationOutput:
        """`generate` for asyncio: the engine runs on a worker thread, the event loop stays free.

        Cancelling the awaiting task stops generation after the step in progress; the task then
        raises `CancelledError` once the engine has stopped, and the session is usable again.
        `timeout_s` stops after the step in progress (`stop_reason == "timeout"`). `on_tokens`,
        if given, is called on the worker thread.
        """
        with self._exclusive():
            run = self._prepare(prompt, max_new_tokens, lookahead, stop_token_ids, options)
        loop = asyncio.get_running_loop()
        done: asyncio.Future[GenerationOutput] = loop.create_future()

        def settle(kind: str, value: Any) -> None:
            if done.cancelled():
                return
            if kind == "error":
                done.set_exception(value)
            else:
                done.set_result(value)

        worker, cancelled = self._start_worker(run, lambda kind, value: loop.call_soon_threadsafe(settle, kind, value),
                                               on_tokens=on_tokens)  # fmt: skip
        try:
            return await asyncio.shield(done)
        except asyncio.CancelledError:
            cancelled.set()  # the engine stops after the step in progress
            done.cancel()  # its result (or error) is dropped: the caller asked to cancel
            await loop.run_in_executor(None, worker.join)
            raise

    async def astream(
        self,
        prompt: Prompt,
        *,
        max_new_tokens: int = 128,
        lookahead: Lookahead = None,
        stop_token_ids: Sequence[int] = (),
        **options: Any,
    ) -> AsyncIterator[StreamChunk]:
        """`stream` for asyncio: `async for chunk in session.astream(...)`. Leaving the loop (break,
        `aclose()`, or cancelling the consuming task) stops generation after the step in progress
        and leaves the session usable; the finished output is then `last_output`. `timeout_s` as
        for `agenerate`.
        """
        with self._exclusive():
            run = self._prepare(prompt, max_new_tokens, lookahead, stop_token_ids, options)
        loop = asyncio.get_running_loop()
        chunks: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

        def put(kind: str, value: Any) -> None:
            loop.call_soon_threadsafe(chunks.put_nowait, (kind, value))

        worker, cancelled = self._start_worker(run, put, on_piece=lambda c: put("chunk", c))
        try:
            while True:
                kind, value = await chunks.get()
                if kind == "chunk":
                    yield value
                elif kind == "done":
                    return
                else:
                    raise value
        finally:
            cancelled.set()  # the engine stops after the step in progress
            if worker.is_alive():
                await loop.run_in_executor(None, worker.join)

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until no call runs on this session (e.g. after cancelling an `agenerate` or leaving an `astream`,
        whose engine stops after the step in progress); False if `timeout` seconds passed first."""
        if not self._busy.acquire(timeout=-1 if timeout is None else max(0.0, timeout)):
            return False
        self._busy.release()
        return True

    @property
    def messages(self) -> list[dict[str, str]]:
        """The conversation so far (a copy): what `chat` has sent and received."""
        return [dict(m) for m in self._messages]

    @property
    def last_output(self) -> GenerationOutput | None:
        """The output of the last finished generation (also of a stream)."""
        return self._last_output

    # ---- context and pool --------------------------------------------------------------------

    def reset(self) -> None:
        """Forget the conversation, the cached K/V rows and the n-gram pool (a shared pool is
        left to the other sessions; this one gets a fresh one)."""
        with self._exclusive():
            self._messages = []
            self._session.reset()

    @property
    def cached_tokens(self) -> int:
        """Tokens whose K/V rows the cache holds now (reusable by the next `reuse_cache` call)."""
        return self._session.cached_tokens

    @property
    def pool_size(self) -> int:
        """N-grams in this session's lookahead pool."""
        return self._session.pool_size

    def save_pool(self, path: str | Path) -> None:
        """Write the n-gram pool and its texts to `path` (binary; see docs/session.md)."""
        with self._exclusive():
            self._session.save_pool(str(path))

    def load_pool(self, path: str | Path) -> None:
        """Replace the pool with one saved by `save_pool` for this model (use `keep_pool=True`)."""
        with self._exclusive():
            self._session.load_pool(str(path))

    def share_pool(self, other: Session) -> None:
        """Use `other`'s n-gram pool from now on (both sessions read and grow one pool)."""
        if not isinstance(other, Session):
            raise ValueError(f"other must be a Session (got {type(other).__name__})")
        with self._exclusive():
            self._session.share_pool(other._session)

    # ---- internals ---------------------------------------------------------------------------

    def _acquire(self) -> None:
        if not self._busy.acquire(blocking=False):
            raise _core.SessionBusyError(
                "this Session is busy (another call or an open stream is running on it); "
                "use one Session per thread, or finish/close the stream first"
            )

    @contextlib.contextmanager
    def _exclusive(self) -> Iterator[None]:
        self._acquire()
        try:
            yield
        finally:
            self._busy.release()

    def _prepare(
        self,
        prompt: Prompt,
        max_new_tokens: int,
        lookahead: Lookahead,
        stop_token_ids: Sequence[int],
        options: dict[str, Any],
    ) -> _Run:
        """Converts the engine's options to a GenerationConfig and checks the Python-only ones
        (stop strings, include_stop, skip_special_tokens, timeout_s, unknown names)."""
        unknown = sorted(set(options) - _OPTIONS)
        if unknown:
            raise ValueError(f"unknown generation option {unknown[0]!r} (known: {', '.join(sorted(_OPTIONS))})")
        ids = self.encode(prompt)
        config = _core.GenerationConfig()
        config.max_new_tokens = _c_int("max_new_tokens", max_new_tokens)
        if isinstance(stop_token_ids, (str, bytes)) or not isinstance(stop_token_ids, Iterable):
            raise ValueError(f"stop_token_ids must be a sequence of token ids (got {stop_token_ids!r})")
        config.stop_token_ids = [_c_int(f"stop_token_ids[{i}]", t) for i, t in enumerate(stop_token_ids)]
        config.temperature = _c_double("temperature", options.get("temperature", 0.0))
        config.top_k = _c_int("top_k", options.get("top_k", 0))
        config.top_p = _c_double("top_p", options.get("top_p", 1.0))
        config.seed = _c_uint64("seed", options.get("seed", 0))
        config.reuse_cache = _c_bool("reuse_cache", options.get("reuse_cache", False))
        config.keep_pool = _c_bool("keep_pool", options.get("keep_pool", False))

        stop = options.get("stop", ())
        stop = check_stop_strings([stop] if isinstance(stop, str) else stop)
        include_stop = _c_bool("include_stop", options.get("include_stop", False))
        skip_special = _c_bool("skip_special_tokens", options.get("skip_special_tokens", False))
        timeout_s = options.get("timeout_s")
        if timeout_s is not None:
            seconds = _c_double("timeout_s", timeout_s)
            if not (math.isfinite(seconds) and seconds > 0):
                raise ValueError(f"timeout_s must be None or a finite number of seconds > 0 (got {timeout_s!r})")
            timeout_s = seconds
        new_text = None
        if self.tokenizer is not None:
            new_text = functools.partial(
                TextStream, self.tokenizer.backend, stop=stop, include_stop=include_stop,
                skip_special_tokens=skip_special, prompt_ids=ids,
            )  # fmt: skip
        elif stop:
            raise ValueError(f"stop strings need a tokenizer.json, which {self.model.path} lacks")
        return _Run(ids, config, lookahead, new_text, bool(stop), timeout_s)

    def _prepare_chat(
        self, messages: str | Message | Sequence[Message], options: dict[str, Any]
    ) -> tuple[_Run, list[dict[str, str]]]:
        if self.tokenizer is None:
            raise ValueError(f"chat needs a tokenizer.json, which {self.model.path} lacks")
        if isinstance(messages, str):
            new = [{"role": "user", "content": messages}]
        elif isinstance(messages, Mapping):
            new = [dict(messages)]
        else:
            new = [dict(m) if isinstance(m, Mapping) else m for m in messages]
        if not new:
            raise ValueError("messages must hold at least one message (got none)")
        for i, m in enumerate(new):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
                raise ValueError(f"messages[{i}] must be a dict with str 'role' and 'content' (got {m!r})")
        conversation = self._messages + new
        ids = self.tokenizer.encode_chat(conversation, add_generation_prompt=True)
        options = dict(options)
        max_new_tokens = options.pop("max_new_tokens", 128)
        lookahead = options.pop("lookahead", None)
        stop_token_ids = options.pop("stop_token_ids", ())
        options.setdefault("reuse_cache", True)
        options.setdefault("keep_pool", True)
        options.setdefault("skip_special_tokens", True)
        return self._prepare(ids, max_new_tokens, lookahead, stop_token_ids, options), conversation

    def _run(
        self,
        run: _Run,
        on_tokens: Callable[[list[int]], bool | None] | None = None,
        on_piece: Callable[[StreamChunk], None] | None = None,
        cancelled: threading.Event | None = None,
    ) -> GenerationOutput:
        """Run on the calling thread. `on_piece` gets each step's StreamChunk (from the engine's
        thread, i.e. this one); `cancelled` stops after the step in progress, as does the
        deadline `run.timeout_s` seconds from now."""
        text: TextStream | None = None  # made once the engine has accepted the request
        deadline = None if run.timeout_s is None else time.monotonic() + run.timeout_s
        timed_out = False

        def on_chunk(ids: list[int]) -> bool | int | None:
            nonlocal text
            keep = None
            piece = ""
            if run.new_text is not None:
                if text is None:
                    text = run.new_text()
                piece, keep = text.feed(ids)
            kept = ids if keep is None else ids[:keep]
            answer: bool | int | None = None
            if on_tokens is not None:
                answer = on_tokens(list(kept))
                if answer is not None and not isinstance(answer, bool):
                    raise ValueError(f"on_tokens must return None or a bool (got {answer!r})")
            if on_piece is not None:
                on_piece(StreamChunk(piece, list(kept)))
            if keep is not None:
                return keep  # stop, keeping the tokens through the one that completed the stop
            if cancelled is not None and cancelled.is_set():
                return False
            if deadline is not None and answer is not False and time.monotonic() >= deadline:
                nonlocal timed_out
                timed_out = True
                return False
            return answer

        # Without a stop string or a listener, the engine runs without calling back into Python
        # every step, and the text is decoded once at the end (the same text: decoding does not
        # depend on how the ids are chunked).
        per_step = (
            on_tokens is not None or on_piece is not None or cancelled is not None or deadline is not None
            or run.has_stop_strings
        )  # fmt: skip
        result = self._session.generate(run.ids, run.config, run.lookahead, on_chunk if per_step else None)
        tokens = list(result.token_ids)
        if run.new_text is not None and text is None:  # not per step: decoded once, at the end
            text = run.new_text()
            text.feed(tokens)
        stop_string = None
        if text is not None:
            if text.stopped:
                stop_string = text.stop_string
            else:
                tail = text.finish()
                if tail and on_piece is not None:
                    on_piece(StreamChunk(tail, []))
            full = text.text
        else:
            full = ""
        reason = "stop_string" if stop_string is not None else result.stop_reason
        if timed_out and reason == "callback":
            reason = "timeout"
        out = GenerationOutput(tokens, full, result.stats, reason, stop_string)
        self._last_output = out
        return out

    def _start_worker(
        self,
        run: _Run,
        post: Callable[[str, Any], None],
        on_tokens: Callable[[list[int]], bool | None] | None = None,
        on_piece: Callable[[StreamChunk], None] | None = None,
    ) -> tuple[threading.Thread, threading.Event]:
        """Takes the session and runs `run` on a new thread (agenerate, astream). When it ends the session is free
        again first, then `post("done", output)` or `post("error", exception)` runs on that thread. Setting the
        returned event stops generation after the step in progress."""
        self._acquire()
        cancelled = threading.Event()

        def work() -> None:
            try:
                out = self._run(run, on_tokens=on_tokens, on_piece=on_piece, cancelled=cancelled)
            except BaseException as e:  # handed to the caller through post
                self._busy.release()
                post("error", e)
            else:
                self._busy.release()
                post("done", out)

        worker = threading.Thread(target=work, name="pylookahead-async", daemon=True)
        try:
            worker.start()
        except BaseException:
            self._busy.release()
            raise
        return worker, cancelled

    def _stream(
        self, run: _Run, on_done: Callable[[GenerationOutput], None]
    ) -> Generator[StreamChunk, None, GenerationOutput]:
        """The generator behind `stream` / `chat_stream`. It takes `_busy` when iteration starts
        (a generator never iterated holds nothing); the worker releases it when generation ends."""
        chunks: queue.Queue[tuple[str, Any]] = queue.Queue()
        cancelled = threading.Event()

        def work() -> None:
            try:
                out = self._run(run, on_piece=lambda c: chunks.put(("chunk", c)), cancelled=cancelled)
                on_done(out)
                chunks.put(("done", out))
            except BaseException as e:  # handed to the consumer, re-raised there
                chunks.put(("error", e))
            finally:
                self._busy.release()

        def generator() -> Generator[StreamChunk, None, GenerationOutput]:
            self._acquire()
            worker = threading.Thread(target=work, name="pylookahead-stream", daemon=True)
            try:
                worker.start()
            except BaseException:
                self._busy.release()
                raise
            try:
                while True:
                    kind, value = chunks.get()
                    if kind == "chunk":
                        yield value
                    elif kind == "done":
                        return value
                    else:
                        raise value
            finally:
                cancelled.set()  # the engine stops after the step in progress
                worker.join()

        return generator()

    def calibrate(
        self, costs: Mapping[int, float] | Sequence[tuple[int, float]] | None = None
    ) -> list[tuple[int, float]]:
        """The step-cost table of automatic lookahead: [(tokens per step, seconds), ...].

        Without `costs`, measures it on the first call (about 45 forward passes of 1..64 tokens, in rounds,
        or up to 256 when wide steps are cheap) and returns the cached table afterwards. With
        `costs` ({tokens: seconds} or (tokens, seconds) pairs; one entry for 1 token), uses that
        table instead, e.g. one saved from an earlier session or a synthetic one for tests.
        """
        if costs is not None:
            pairs = costs.items() if isinstance(costs, Mapping) else costs
            table = []
            for item in pairs:
                tokens, seconds = item
                table.append((_c_int("costs tokens", tokens), _c_double("costs seconds", seconds)))
            self._session.set_step_costs(table)
            return self.step_costs()
        return [(int(t), float(s)) for t, s in self._session.calibrate()]

    def step_costs(self) -> list[tuple[int, float]]:
        """The current step-cost table ([] before `calibrate` or a first `lookahead="auto"`)."""
        return [(int(t), float(s)) for t, s in self._session.step_costs()]

    def prompt_logits(self, prompt: Prompt):
        """Logits [L, V] (float32 numpy) of every prompt position, from one prefill pass."""
        return self._session.prompt_logits(self.encode(prompt))
