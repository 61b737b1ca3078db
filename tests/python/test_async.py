"""The asyncio API: `await session.agenerate(...)`, `async for chunk in session.astream(...)`, cancellation and
per-call deadlines (`timeout_s`), on the tiny models. Every wait is bounded (asyncio.wait_for) so a hang fails."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from pylookahead import LookaheadConfig, Model, Session
from pylookahead._core import SessionBusyError

PROMPT = [1, 24, 30, 31, 27, 24, 32, 28, 24, 29, 31, 27, 40, 41, 24, 30]
LOOKAHEADS = [None, LookaheadConfig(window_size=2, ngram_size=3, verification_set_size=2), "auto",
              LookaheadConfig(window_size=0, ngram_size=4, verification_set_size=4, tree_rows=8, suffix_branches=2)]  # fmt: skip
BOUND = 60.0  # seconds any one awaited call may take


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, BOUND))


@pytest.fixture(scope="module")
def model(tiny_llama: Path) -> Model:
    return Model(tiny_llama)


def slow(seconds: float):
    """An on_tokens hook that makes every step take at least `seconds` (a deterministic slow engine)."""

    def hook(ids: list[int]) -> None:
        time.sleep(seconds)

    return hook


@pytest.mark.parametrize("lookahead", LOOKAHEADS, ids=str)
def test_agenerate_and_astream_equal_generate(model: Model, lookahead) -> None:
    session = Session(model)
    ref = session.generate(PROMPT, max_new_tokens=40, lookahead=lookahead)

    async def main():
        out = await session.agenerate(PROMPT, max_new_tokens=40, lookahead=lookahead)
        chunks = [c async for c in session.astream(PROMPT, max_new_tokens=40, lookahead=lookahead)]
        return out, chunks

    out, chunks = run(main())
    assert out.token_ids == ref.token_ids and out.stop_reason == ref.stop_reason
    assert [t for c in chunks for t in c.token_ids] == ref.token_ids
    assert "".join(c.text for c in chunks) == ref.text
    assert session.last_output.token_ids == ref.token_ids


def test_the_event_loop_runs_while_the_engine_decodes(model: Model) -> None:
    session = Session(model)

    async def main():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.005)
                ticks += 1

        task = asyncio.create_task(ticker())
        out = await session.agenerate(PROMPT, max_new_tokens=30, on_tokens=slow(0.01))
        task.cancel()
        return out, ticks

    out, ticks = run(main())
    assert len(out.token_ids) == 30
    assert ticks >= 10  # ~0.3 s of decoding; a blocked loop would not tick at all


def test_cancelling_agenerate_stops_after_the_step_and_leaves_the_session_usable(model: Model) -> None:
    session = Session(model)
    ref = session.generate(PROMPT, max_new_tokens=200)

    async def main():
        task = asyncio.create_task(session.agenerate(PROMPT, max_new_tokens=200, on_tokens=slow(0.01)))
        await asyncio.sleep(0.15)
        started = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.monotonic() - started

    stopped_in = run(main())
    assert stopped_in < 1.0  # one step (10 ms) plus the join, not the remaining ~1.8 s
    partial = session.last_output
    assert partial.stop_reason == "callback"
    assert 0 < len(partial.token_ids) < 200
    assert partial.token_ids == ref.token_ids[: len(partial.token_ids)]
    # Not busy, and the next call is complete and exact.
    assert run(session.agenerate(PROMPT, max_new_tokens=200)).token_ids == ref.token_ids


def test_wait_for_timeout_cancels_cleanly(model: Model) -> None:
    session = Session(model)

    async def main():
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(session.agenerate(PROMPT, max_new_tokens=200, on_tokens=slow(0.01)), 0.1)
        return await session.agenerate(PROMPT, max_new_tokens=5)

    assert len(run(main()).token_ids) == 5


def test_timeout_s_stops_with_reason_timeout(model: Model) -> None:
    session = Session(model)
    ref = session.generate(PROMPT, max_new_tokens=200)
    la = LookaheadConfig(window_size=2, ngram_size=3, verification_set_size=2)
    out = run(session.agenerate(PROMPT, max_new_tokens=200, lookahead=la, on_tokens=slow(0.01), timeout_s=0.1))
    assert out.stop_reason == "timeout"
    assert 0 < len(out.token_ids) < 200
    assert out.token_ids == ref.token_ids[: len(out.token_ids)]
    sync = session.generate(PROMPT, max_new_tokens=200, on_tokens=slow(0.01), timeout_s=0.1)
    assert sync.stop_reason == "timeout" and sync.token_ids == ref.token_ids[: len(sync.token_ids)]
    # A deadline that is not reached changes nothing.
    assert session.generate(PROMPT, max_new_tokens=20, timeout_s=60.0).stop_reason == "max_new_tokens"

    async def streamed_timeout():
        chunks = [c async for c in session.astream(PROMPT, max_new_tokens=200, timeout_s=1e-6)]
        return chunks, session.last_output

    chunks, last = run(streamed_timeout())
    assert last.stop_reason == "timeout" and [t for c in chunks for t in c.token_ids] == last.token_ids


@pytest.mark.parametrize("value", [0, -1.0, float("nan"), "1", True])
def test_bad_timeout_is_a_value_error(model: Model, value) -> None:
    with pytest.raises(ValueError, match="timeout_s"):
        Session(model).generate(PROMPT, max_new_tokens=5, timeout_s=value)


def test_leaving_astream_early_stops_and_frees_the_session(model: Model) -> None:
    session = Session(model)
    ref = session.generate(PROMPT, max_new_tokens=200)

    async def main():
        got = []
        async for chunk in session.astream(PROMPT, max_new_tokens=200):
            got.extend(chunk.token_ids)
            if len(got) >= 5:
                break
        return got

    got = run(main())
    assert got == ref.token_ids[: len(got)]
    assert session.last_output.stop_reason == "callback"
    assert run(session.agenerate(PROMPT, max_new_tokens=200)).token_ids == ref.token_ids


def test_a_busy_session_raises_and_two_sessions_run_concurrently(model: Model) -> None:
    a, b = Session(model), Session(model)
    refs = [a.generate(PROMPT, max_new_tokens=40), a.generate(PROMPT[:8], max_new_tokens=40)]

    async def main():
        first = asyncio.create_task(a.agenerate(PROMPT, max_new_tokens=40, on_tokens=slow(0.002)))
        await asyncio.sleep(0.01)
        with pytest.raises(SessionBusyError):
            await a.agenerate(PROMPT, max_new_tokens=5)
        second = await b.agenerate(PROMPT[:8], max_new_tokens=40)
        return await first, second

    first, second = run(main())
    assert [first.token_ids, second.token_ids] == [r.token_ids for r in refs]
