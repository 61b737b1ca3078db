"""An OpenAI-compatible HTTP server over one shared Model: `pylookahead serve`.

FastAPI + uvicorn; server-sent events for streams. Endpoints: POST /v1/chat/completions, POST /v1/completions,
GET /v1/models, GET /health, GET /metrics (Prometheus text).

- One `Model` (weights loaded once) and a bounded pool of `Session`s (`sessions`), each a KV cache and n-gram pool.
  A request takes the idle session whose last sequence shares the longest prefix with its prompt, reusing those
  cached K/V rows; when the prompt continues that session's last prompt (a chat client resending the conversation
  so far), the n-gram pool is kept too, so earlier answers feed lookahead. Different conversations never share a
  pool (docs/session.md, "Keeping one conversation's pool out of another").
- At most `max_queue` requests wait for a session; one more gets 429.
- Decoding options as OpenAI's (`max_tokens` / `max_completion_tokens`, `temperature` (default 1), `top_p`, `seed`,
  `stop`, `stream`), plus `top_k` and `lookahead` (default "auto"; None or "greedy" for plain decoding, or an object
  of LookaheadConfig fields) as extra request fields. Output equals plain decoding with the same options.
- Bad requests get 400 with OpenAI's error object naming the field; a client that disconnects mid-stream stops its
  generation after the step in progress and frees its session.
"""

# No `from __future__ import annotations`: FastAPI reads the handlers' annotations (Request) at run time.
import asyncio
import contextlib
import json
import secrets
import time
import uuid
from dataclasses import dataclass
from typing import Any, AsyncIterator, Sequence

from . import _core
from .session import Model, Session, StreamChunk


@dataclass(frozen=True)
class ServerOptions:
    """What `create_app` serves and how many requests it holds."""

    model_name: str  # the id /v1/models reports and requests may name
    sessions: int = 2  # sessions (KV caches) that decode at once
    max_queue: int = 16  # requests that may wait for a session; more get 429
    kv_capacity: int = 0  # per session; 0 = the model's default (Session)
    cuda_step_rows: int = 64  # per session, on CUDA: rows of every decode step (Session)
    default_max_tokens: int = 256  # chat completions without max_tokens
    reuse_cache: bool = True  # reuse the cached K/V rows of a shared prompt prefix


class RequestError(ValueError):
    """A 400: `message` names the field, the value and the rule."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class QueueFull(RuntimeError):
    """A 429: every session is busy and `max_queue` requests already wait."""


# ---- the session pool ------------------------------------------------------------------------------------------


class _Slot:
    def __init__(self, session: Session) -> None:
        self.session = session
        self.prompt: list[int] = []  # the last request's prompt
        self.context: list[int] = []  # the last request's prompt + output (what the cache holds, about)
        self.used = 0.0  # monotonic time of the last release


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class SessionPool:
    """`size` sessions over one model; acquire() waits (bounded) for an idle one, preferring cache affinity."""

    def __init__(self, model: Model, size: int, max_queue: int, kv_capacity: int = 0, cuda_step_rows: int = 64) -> None:
        self._slots = [
            _Slot(Session(model, kv_capacity=kv_capacity, cuda_step_rows=cuda_step_rows)) for _ in range(size)
        ]
        self._idle = list(self._slots)
        self._max_queue = max_queue
        self.waiting = 0
        self._cond: asyncio.Condition | None = None  # made in the serving loop

    @property
    def busy(self) -> int:
        return len(self._slots) - len(self._idle)

    async def acquire(self, prompt: Sequence[int]) -> _Slot:
        if self._cond is None:
            self._cond = asyncio.Condition()
        async with self._cond:
            if not self._idle:
                if self.waiting >= self._max_queue:
                    raise QueueFull(f"all {len(self._slots)} sessions are busy and {self.waiting} requests wait")
                self.waiting += 1
                try:
                    await self._cond.wait_for(lambda: bool(self._idle))
                finally:
                    self.waiting -= 1
            best = max(self._idle, key=lambda s: (_common_prefix(s.context, prompt), -s.used))
            self._idle.remove(best)
            return best

    async def release(self, slot: _Slot, prompt: Sequence[int], output: Sequence[int]) -> None:
        slot.prompt = list(prompt)
        slot.context = list(prompt) + list(output)
        slot.used = time.monotonic()
        assert self._cond is not None
        async with self._cond:
            self._idle.append(slot)
            self._cond.notify()


# ---- request parsing -------------------------------------------------------------------------------------------


def _field(body: dict[str, Any], name: str, kinds: tuple[type, ...], default: Any) -> Any:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) and bool not in kinds:
        raise RequestError(f"{name} must be {' or '.join(k.__name__ for k in kinds)} (got {value!r})", name)
    if not isinstance(value, kinds):
        raise RequestError(f"{name} must be {' or '.join(k.__name__ for k in kinds)} (got {value!r})", name)
    return value


def _lookahead(value: Any) -> Any:
    if value is None or value == "greedy":
        return None
    if value == "auto":
        return "auto"
    if isinstance(value, dict):
        try:
            return _core.LookaheadConfig(**value)
        except (TypeError, ValueError) as e:
            raise RequestError(f"lookahead: {e}", "lookahead") from None
    raise RequestError(
        f"lookahead must be 'auto', 'greedy', null or an object of LookaheadConfig fields (got {value!r})", "lookahead"
    )


def _options(body: dict[str, Any], default_max_tokens: int) -> tuple[int, Any, dict[str, Any]]:
    """max_new_tokens, lookahead and Session.generate keyword options of an OpenAI request body."""
    for unsupported in ("logprobs", "top_logprobs", "tools", "functions", "response_format", "logit_bias"):
        if body.get(unsupported) not in (None, False, [], {}):
            raise RequestError(f"{unsupported} is not supported by this server", unsupported)
    n = _field(body, "n", (int,), 1)
    if n != 1:
        raise RequestError(f"n must be 1 (got {n}): one choice per request", "n")
    max_tokens = _field(body, "max_completion_tokens", (int,), None)
    if max_tokens is None:
        max_tokens = _field(body, "max_tokens", (int,), default_max_tokens)
    if max_tokens < 1:
        raise RequestError(f"max_tokens must be >= 1 (got {max_tokens})", "max_tokens")
    temperature = float(_field(body, "temperature", (int, float), 1.0))
    top_p = float(_field(body, "top_p", (int, float), 1.0))
    top_k = _field(body, "top_k", (int,), 0)
    seed = _field(body, "seed", (int,), None)
    if seed is None:
        seed = secrets.randbits(63)  # OpenAI: no seed, a fresh draw per request
    if seed < 0:
        raise RequestError(f"seed must be >= 0 (got {seed})", "seed")
    stop = body.get("stop")
    if stop is None:
        stop = []
    elif isinstance(stop, str):
        stop = [stop]
    elif not (isinstance(stop, list) and all(isinstance(s, str) and s for s in stop)):
        raise RequestError(f"stop must be a string or a list of non-empty strings (got {stop!r})", "stop")
    options = dict(temperature=temperature, top_p=top_p, top_k=top_k, seed=seed, stop=stop)
    return max_tokens, _lookahead(body.get("lookahead", "auto")), options


def _finish_reason(stop_reason: str) -> str:
    return "length" if stop_reason in ("max_new_tokens", "timeout") else "stop"


# ---- the app ---------------------------------------------------------------------------------------------------


def create_app(model: Model, options: ServerOptions):
    """The FastAPI app serving `model`. Sessions are made here; the pool's waiting starts in the serving loop."""
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

    if model.tokenizer is None:
        raise ValueError(f"serving needs a tokenizer.json, which {model.path} lacks")
    pool = SessionPool(model, options.sessions, options.max_queue, options.kv_capacity, options.cuda_step_rows)
    registry = CollectorRegistry()
    requests_total = Counter("pylookahead_requests", "Requests by endpoint and status", ["endpoint", "status"],
                             registry=registry)  # fmt: skip
    tokens_total = Counter("pylookahead_generated_tokens", "Tokens generated", registry=registry)
    steps_total = Counter("pylookahead_decode_steps", "Forward passes after prefill", registry=registry)
    ttft = Histogram("pylookahead_time_to_first_token_seconds", "Request arrival to first token (not streamed: to the answer)",
                     buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30), registry=registry)  # fmt: skip
    tok_s = Histogram("pylookahead_decode_tokens_per_second", "Per request: tokens over decode time",
                      buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000), registry=registry)  # fmt: skip
    tok_step = Histogram("pylookahead_tokens_per_step", "Per request: tokens per forward pass",
                         buckets=(1, 1.1, 1.25, 1.5, 2, 2.5, 3, 4, 6, 8), registry=registry)  # fmt: skip
    Gauge("pylookahead_queue_depth", "Requests waiting for a session", registry=registry).set_function(
        lambda: pool.waiting
    )
    Gauge("pylookahead_sessions_busy", "Sessions decoding", registry=registry).set_function(lambda: pool.busy)

    app = FastAPI(title="pylookahead", docs_url=None, redoc_url=None)
    app.state.pool = pool

    def error(status: int, message: str, kind: str, param: str | None = None) -> JSONResponse:
        return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": None}}, status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error(400, str(exc), "invalid_request_error")

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(generate_latest(registry).decode(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        card = {"id": options.model_name, "object": "model", "created": 0, "owned_by": "pylookahead"}
        return {"object": "list", "data": [card]}

    async def body_of(request: Request) -> dict[str, Any]:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise RequestError(f"the request body must be a JSON object ({e})") from None
        if not isinstance(body, dict):
            raise RequestError(f"the request body must be a JSON object (got {type(body).__name__})")
        name = body.get("model")
        if name is not None and name != options.model_name:
            raise RequestError(f"model must be {options.model_name!r} (got {name!r})", "model")
        return body

    def chat_prompt(body: dict[str, Any]) -> list[int]:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise RequestError(f"messages must be a non-empty list (got {messages!r})", "messages")
        clean = []
        for i, m in enumerate(messages):
            content = m.get("content") if isinstance(m, dict) else None
            if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
                parts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"]
                content = "".join(p for p in parts if isinstance(p, str)) if len(parts) == len(content) else None
            if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(content, str):
                raise RequestError(f"messages[{i}] must have a string role and text content (got {m!r})", "messages")
            clean.append({"role": m["role"], "content": content})
        return model.tokenizer.encode_chat(clean, add_generation_prompt=True)

    def completion_prompt(body: dict[str, Any]) -> list[int]:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]  # one prompt in a batch of one
        if isinstance(prompt, str) and prompt:
            return model.tokenizer.encode(prompt)
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            return list(prompt)
        raise RequestError(f"prompt must be a non-empty string or list of token ids (got {prompt!r})", "prompt")

    async def handle(request: Request, chat: bool) -> Any:
        arrived = time.monotonic()
        endpoint = "chat" if chat else "completions"
        try:
            body = await body_of(request)
            ids = chat_prompt(body) if chat else completion_prompt(body)
            max_tokens, lookahead, gen = _options(body, options.default_max_tokens if chat else 16)
            stream = _field(body, "stream", (bool,), False)
            stream_options = _field(body, "stream_options", (dict,), {})
            include_usage = _field(stream_options, "include_usage", (bool,), False)
            slot = await pool.acquire(ids)
        except RequestError as e:
            requests_total.labels(endpoint, "400").inc()
            return error(400, str(e), "invalid_request_error", e.param)
        except QueueFull as e:
            requests_total.labels(endpoint, "429").inc()
            return error(429, str(e), "rate_limit_error")
        # The same conversation (the prompt extends this session's last prompt) keeps its pool.
        same_conversation = bool(slot.prompt) and _common_prefix(slot.prompt, ids) == len(slot.prompt)
        gen.update(reuse_cache=options.reuse_cache, keep_pool=same_conversation, skip_special_tokens=True)
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        created = int(time.time())

        def record(out: Any) -> None:
            tokens_total.inc(len(out.token_ids))
            steps_total.inc(out.stats.steps)
            if out.stats.decode_s > 0:
                tok_s.observe(out.stats.new_tokens / out.stats.decode_s)
            if out.stats.steps > 0:
                tok_step.observe(out.stats.compression)

        async def give_back(chunks: AsyncIterator[StreamChunk] | None = None) -> None:
            # Closes the stream (its engine stops after the step in progress), waits until the session is idle and
            # returns it to the pool. Run as its own task: a cancelled request (a client that left) cannot cut it.
            if chunks is not None:
                with contextlib.suppress(BaseException):
                    await chunks.aclose()  # type: ignore[attr-defined]
            await asyncio.get_running_loop().run_in_executor(None, slot.session.wait_idle)
            last = slot.session.last_output
            await pool.release(slot, ids, last.token_ids if last is not None else [])

        async def give_back_shielded(chunks: AsyncIterator[StreamChunk] | None = None) -> None:
            await asyncio.shield(asyncio.ensure_future(give_back(chunks)))

        if not stream:
            try:
                out = await slot.session.agenerate(ids, max_new_tokens=max_tokens, lookahead=lookahead, **gen)
            except ValueError as e:  # e.g. the prompt does not fit the session's cache
                requests_total.labels(endpoint, "400").inc()
                return error(400, str(e), "invalid_request_error")
            finally:
                await give_back_shielded()
            ttft.observe(time.monotonic() - arrived)
            record(out)
            requests_total.labels(endpoint, "200").inc()
            usage = {"prompt_tokens": len(ids), "completion_tokens": len(out.token_ids),
                     "total_tokens": len(ids) + len(out.token_ids)}  # fmt: skip
            finish = _finish_reason(out.stop_reason)
            if chat:
                choice = {"index": 0, "message": {"role": "assistant", "content": out.text}, "finish_reason": finish}
                return {"id": rid, "object": "chat.completion", "created": created, "model": options.model_name,
                        "choices": [choice], "usage": usage}  # fmt: skip
            choice = {"index": 0, "text": out.text, "logprobs": None, "finish_reason": finish}
            return {"id": rid, "object": "text_completion", "created": created, "model": options.model_name,
                    "choices": [choice], "usage": usage}  # fmt: skip

        kind = "chat.completion.chunk" if chat else "text_completion"

        def event(text: str | None, finish: str | None, first: bool = False) -> str:
            if chat:
                delta: dict[str, Any] = {"role": "assistant", "content": ""} if first else {}
                if text:
                    delta["content"] = text
                choice = {"index": 0, "delta": delta, "finish_reason": finish}
            else:
                choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
            payload = {"id": rid, "object": kind, "created": created, "model": options.model_name, "choices": [choice]}
            return f"data: {json.dumps(payload)}\n\n"

        # Validated before the first byte: a bad request still gets its 400 (the session's own checks).
        try:
            chunks: AsyncIterator[StreamChunk] = slot.session.astream(
                ids, max_new_tokens=max_tokens, lookahead=lookahead, **gen
            )
            first_chunk = await chunks.__anext__()
        except StopAsyncIteration:
            first_chunk = None
        except ValueError as e:
            await give_back_shielded()
            requests_total.labels(endpoint, "400").inc()
            return error(400, str(e), "invalid_request_error")
        ttft.observe(time.monotonic() - arrived)

        async def events() -> AsyncIterator[str]:
            finished = False
            try:
                if chat:
                    yield event(None, None, first=True)
                if first_chunk is not None:
                    if first_chunk.text:
                        yield event(first_chunk.text, None)
                    async for chunk in chunks:
                        if chunk.text:
                            yield event(chunk.text, None)
                out = slot.session.last_output
                yield event(None, _finish_reason(out.stop_reason))
                if include_usage:  # OpenAI's stream_options: one more chunk, no choices, the usage
                    usage = {"prompt_tokens": len(ids), "completion_tokens": len(out.token_ids),
                             "total_tokens": len(ids) + len(out.token_ids)}  # fmt: skip
                    payload = {"id": rid, "object": kind, "created": created, "model": options.model_name,
                               "choices": [], "usage": usage}  # fmt: skip
                    yield f"data: {json.dumps(payload)}\n\n"
                yield "data: [DONE]\n\n"
                finished = True
                record(out)
            finally:
                # A client that left: closing the stream stops the engine after the step in progress.
                requests_total.labels(endpoint, "200" if finished else "disconnected").inc()
                await give_back_shielded(chunks)

        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})  # fmt: skip

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Any:
        return await handle(request, chat=True)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:
        return await handle(request, chat=False)

    return app


def serve(model: str, *, dtype: str = "float32", host: str = "127.0.0.1", port: int = 8000, sessions: int = 2,
          max_queue: int = 16, num_threads: int = 0, kv_capacity: int = 0, log_level: str = "info",
          device: str = "cpu", cuda_step_rows: int = 64, use_cuda_graphs: bool = True) -> None:  # fmt: skip
    """Load `model` (catalogue name, checkpoint directory or GGUF file) on `device` and serve it until interrupted."""
    import uvicorn

    loaded = Model(model, device=device, dtype=dtype, num_threads=num_threads, use_cuda_graphs=use_cuda_graphs)
    app = create_app(loaded, ServerOptions(model_name=str(model), sessions=sessions, max_queue=max_queue,
                                           kv_capacity=kv_capacity, cuda_step_rows=cuda_step_rows))  # fmt: skip
    uvicorn.run(app, host=host, port=port, log_level=log_level)


__all__ = ["QueueFull", "RequestError", "ServerOptions", "SessionPool", "create_app", "serve"]
