"""`pylookahead serve`: the OpenAI-compatible server, started by the test on a loopback port and driven by the official
`openai` client and by httpx. Outputs are compared with the library's own Session calls (same model, same options).
Every wait is bounded."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import pytest
import uvicorn

from pylookahead import Model, Session
from pylookahead.server import ServerOptions, create_app

BOUND = 60.0


class Served:
    def __init__(self, model: Model, **options) -> None:
        self.model = model
        self.app = create_app(model, ServerOptions(model_name="test-model", **options))
        self.server = uvicorn.Server(uvicorn.Config(self.app, host="127.0.0.1", port=0, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + BOUND
        while not self.server.started:
            assert time.monotonic() < deadline, "server did not start"
            assert self.thread.is_alive(), "server thread died"
            time.sleep(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.client = openai.OpenAI(base_url=self.url + "/v1", api_key="unused", timeout=BOUND, max_retries=0)

    @property
    def pool(self):
        return self.app.state.pool

    def wait_idle(self) -> None:
        deadline = time.monotonic() + BOUND
        while self.pool.busy or self.pool.waiting:
            assert time.monotonic() < deadline, "sessions stayed busy"
            time.sleep(0.01)

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(BOUND)


@pytest.fixture(scope="module")
def tiny(tiny_llama: Path):
    served = Served(Model(tiny_llama, dtype="float64"), sessions=2, max_queue=4)
    yield served
    served.close()


def reference(model: Model, ids: list[int], n: int, **options) -> str:
    return Session(model).generate(ids, max_new_tokens=n, lookahead=None, skip_special_tokens=True, **options).text


def test_health_models_and_metrics(tiny: Served) -> None:
    assert httpx.get(tiny.url + "/health", timeout=BOUND).json() == {"status": "ok"}
    assert [m.id for m in tiny.client.models.list().data] == ["test-model"]
    tiny.client.completions.create(model="test-model", prompt="one two", max_tokens=3, temperature=0)
    text = httpx.get(tiny.url + "/metrics", timeout=BOUND).text
    for name in ("pylookahead_requests_total", "pylookahead_generated_tokens_total", "pylookahead_queue_depth",
                 "pylookahead_time_to_first_token_seconds_bucket", "pylookahead_tokens_per_step_count"):  # fmt: skip
        assert name in text, name


@pytest.mark.parametrize("lookahead", ["auto", None, {"window_size": 2, "ngram_size": 3, "verification_set_size": 2},
                                       {"window_size": 0, "tree_rows": 8, "suffix_branches": 2}])  # fmt: skip
def test_completions_equal_the_library(tiny: Served, lookahead) -> None:
    prompt = "the cat sat on the mat and the cat"
    ids = tiny.model.tokenizer.encode(prompt)
    want = reference(tiny.model, ids, 24)
    extra = {"lookahead": lookahead}
    out = tiny.client.completions.create(model="test-model", prompt=prompt, max_tokens=24, temperature=0,
                                         extra_body=extra)  # fmt: skip
    assert out.choices[0].text == want
    assert out.usage.prompt_tokens == len(ids) and out.usage.completion_tokens <= 24
    assert out.choices[0].finish_reason in ("length", "stop")
    stream = tiny.client.completions.create(model="test-model", prompt=prompt, max_tokens=24, temperature=0,
                                            stream=True, extra_body=extra)  # fmt: skip
    pieces = list(stream)
    assert "".join(p.choices[0].text for p in pieces) == want
    assert pieces[-1].choices[0].finish_reason == out.choices[0].finish_reason


def test_chat_equals_the_library_streamed_or_not(tiny: Served) -> None:
    messages = [{"role": "user", "content": "the dog ran to the park"}]
    ids = tiny.model.tokenizer.encode_chat(messages, add_generation_prompt=True)
    want = reference(tiny.model, ids, 20)
    out = tiny.client.chat.completions.create(model="test-model", messages=messages, max_tokens=20, temperature=0)
    assert out.choices[0].message.role == "assistant" and out.choices[0].message.content == want
    stream = tiny.client.chat.completions.create(model="test-model", messages=messages, max_tokens=20, temperature=0,
                                                 stream=True, stream_options={"include_usage": True})  # fmt: skip
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == want
    assert chunks[-1].usage.completion_tokens == out.usage.completion_tokens and not chunks[-1].choices


def test_sampling_with_a_seed_equals_plain_sampling(tiny: Served) -> None:
    prompt = "a b c a b c a b"
    ids = tiny.model.tokenizer.encode(prompt)
    want = reference(tiny.model, ids, 30, temperature=0.8, top_p=0.9, seed=7)
    for lookahead in ("auto", None):
        out = tiny.client.completions.create(model="test-model", prompt=prompt, max_tokens=30, temperature=0.8,
                                             top_p=0.9, seed=7, extra_body={"lookahead": lookahead})  # fmt: skip
        assert out.choices[0].text == want


def test_concurrent_requests_equal_serial_ones(tiny: Served) -> None:
    prompts = [f"the {w} sat on the {w} and" for w in ("cat", "dog", "mat", "park", "sun", "tree")]
    serial = [tiny.client.completions.create(model="test-model", prompt=p, max_tokens=30, temperature=0).choices[0].text
              for p in prompts]  # fmt: skip
    with ThreadPoolExecutor(max_workers=4) as ex:
        futures = [ex.submit(tiny.client.completions.create, model="test-model", prompt=p, max_tokens=30,
                             temperature=0) for p in prompts]  # fmt: skip
        concurrent = [f.result(timeout=BOUND).choices[0].text for f in futures]
    assert concurrent == serial
    assert serial == [reference(tiny.model, tiny.model.tokenizer.encode(p), 30) for p in prompts]
    tiny.wait_idle()


def test_a_conversation_keeps_its_session_and_pool(tiny: Served) -> None:
    tiny.wait_idle()
    messages = [{"role": "user", "content": "the cat sat on the mat"}]
    first = tiny.client.chat.completions.create(model="test-model", messages=messages, max_tokens=16, temperature=0)
    messages += [{"role": "assistant", "content": first.choices[0].message.content},
                 {"role": "user", "content": "and the dog"}]  # fmt: skip
    before = {id(s.session): s.session.last_output for s in tiny.pool._slots}
    second = tiny.client.chat.completions.create(model="test-model", messages=messages, max_tokens=16, temperature=0)
    ids = tiny.model.tokenizer.encode_chat(messages, add_generation_prompt=True)
    assert second.choices[0].message.content == reference(tiny.model, ids, 16)
    # The session that answered turn 1 answered turn 2, reusing its cached rows.
    changed = [s for s in tiny.pool._slots if s.session.last_output is not before[id(s.session)]]
    assert len(changed) == 1 and changed[0].session.last_output.stats.reused_tokens > 0


@pytest.mark.parametrize(
    "body, field",
    [({"prompt": "a", "max_tokens": 0}, "max_tokens"), ({"prompt": "a", "n": 2}, "n"),
     ({"prompt": "a", "lookahead": {"window_size": -1}}, "lookahead"), ({"prompt": ""}, "prompt"),
     ({"prompt": "a", "temperature": "hot"}, "temperature"), ({"prompt": "a", "model": "other"}, "model"),
     ({"prompt": "a", "logprobs": 3}, "logprobs"), ({"prompt": "a", "stop": [1]}, "stop"),
     ({"prompt": "a", "max_tokens": 100000}, None)],
)  # fmt: skip
def test_bad_requests_get_400_naming_the_field(tiny: Served, body, field) -> None:
    r = httpx.post(tiny.url + "/v1/completions", json=body, timeout=BOUND)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"]
    if field is not None:
        assert error["param"] == field and field in error["message"]
    tiny.wait_idle()


def test_bad_chat_and_bad_json_get_400(tiny: Served) -> None:
    with pytest.raises(openai.BadRequestError, match="messages"):
        tiny.client.chat.completions.create(model="test-model", messages=[], max_tokens=3)
    r = httpx.post(tiny.url + "/v1/completions", content=b"{not json", timeout=BOUND)
    assert r.status_code == 400 and "JSON" in r.json()["error"]["message"]
    tiny.wait_idle()


# ---- disconnects and the queue, on SmolLM2 (its steps are slow enough to act mid-generation) ------------------


@pytest.fixture(scope="module")
def smol(smollm2_dir: Path):
    served = Served(Model(smollm2_dir, dtype="bfloat16", num_threads=1), sessions=1, max_queue=1)
    yield served
    served.close()


def _open_stream(served: Served, max_tokens: int = 120):
    """A streamed chat request read up to its first content event: (client, response, line iterator). Keep the
    iterator alive: dropping it closes the response, which the server sees as a disconnect."""
    client = httpx.Client(timeout=BOUND)
    body = {"messages": [{"role": "user", "content": "Write a long story about a lighthouse."}],
            "max_tokens": max_tokens, "temperature": 0, "stream": True}  # fmt: skip
    response = client.send(client.build_request("POST", served.url + "/v1/chat/completions", json=body), stream=True)
    assert response.status_code == 200
    lines = response.iter_lines()
    for line in lines:  # the first content event: generation is under way
        if line.startswith("data: ") and json.loads(line[6:])["choices"][0]["delta"].get("content"):
            break
    return client, response, lines


@pytest.mark.slow
def test_a_client_that_disconnects_mid_stream_frees_its_session_at_once(smol: Served) -> None:
    client, response, lines = _open_stream(smol, max_tokens=200)
    assert smol.pool.busy == 1
    left = time.monotonic()
    del lines
    response.close()
    client.close()
    smol.wait_idle()
    assert time.monotonic() - left < 5.0  # a step or two, not the ~5 s the rest of the answer takes
    partial = smol.pool._slots[0].session.last_output
    assert partial.stop_reason == "callback" and len(partial.token_ids) < 200
    metrics = httpx.get(smol.url + "/metrics", timeout=BOUND).text
    assert 'pylookahead_requests_total{endpoint="chat",status="disconnected"}' in metrics


@pytest.mark.slow
def test_a_full_queue_answers_429(smol: Served) -> None:
    smol.wait_idle()
    client, response, lines = _open_stream(smol, max_tokens=200)  # holds the only session
    body = {"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0}
    with ThreadPoolExecutor(max_workers=1) as ex:
        waiting = ex.submit(httpx.post, smol.url + "/v1/completions", json=body, timeout=BOUND)
        deadline = time.monotonic() + BOUND
        while smol.pool.waiting < 1:  # it waits for the session
            assert time.monotonic() < deadline
            time.sleep(0.01)
        with pytest.raises(openai.RateLimitError):
            smol.client.completions.create(model="test-model", **body)
        assert smol.pool.busy == 1
        del lines
        response.close()
        client.close()
        assert waiting.result(timeout=BOUND).status_code == 200  # served once the stream let go
    smol.wait_idle()


def test_serve_cli_checks_its_numbers(capsys) -> None:
    from pylookahead.cli import main

    assert main(["serve", "--sessions", "0"]) == 2
    assert "--sessions must be >= 1 (got 0)" in capsys.readouterr().err


def test_cuda_step_rows_reach_every_session(tiny_llama: Path) -> None:
    """ServerOptions.cuda_step_rows goes to each pooled Session, which checks it (on the CPU it changes nothing)."""
    model = Model(tiny_llama, dtype="float64")
    with pytest.raises(ValueError, match=r"cuda_step_rows must be in 1 \.\. 1024 \(got 0\)"):
        create_app(model, ServerOptions(model_name="m", sessions=1, cuda_step_rows=0))
    assert create_app(model, ServerOptions(model_name="m", sessions=2, cuda_step_rows=8)).state.pool.busy == 0
