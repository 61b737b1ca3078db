"""Automatic lookahead (`lookahead="auto"`): greedy output always, a valid config when it runs lookahead,
and greedy steps only when told (through an injected step-cost table) that wide forward passes are expensive.

The tiny random Llama (float32) runs everything that needs no download; the real SmolLM2 tests are marked slow.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from pylookahead import AutoLookahead, LookaheadConfig, Session
from subproc import run_pylookahead

pytestmark = pytest.mark.usefixtures("single_thread")

# Word ids of the tiny tokenizer: a phrase repeated, so the prompt's n-grams recur.
REPETITIVE = [1] + [24, 30, 31, 27, 24, 32] * 8
MIXED = [1, 24, 30, 31, 27, 24, 32, 28, 24, 29, 31, 27, 40, 41, 24, 30]

# Seconds per step against tokens per step: flat (a wide pass is as cheap as a greedy one), linear (a pass
# of T tokens costs T greedy passes: lookahead can never win, as a step emits at most N <= T tokens).
CHEAP = {1: 1.0, 4: 1.0, 8: 1.0, 16: 1.0, 32: 1.0, 64: 1.0}
EXPENSIVE = {t: float(t) for t in CHEAP}


def _config_of(decision) -> LookaheadConfig:
    cfg = decision.config
    assert cfg is not None
    cfg.validate()
    return cfg


@pytest.fixture()
def session(tiny_llama: Path) -> Session:
    return Session(tiny_llama)  # a fresh one per test: the planner learns across calls


def test_auto_equals_greedy_on_tiny_model(session: Session) -> None:
    for prompt in (REPETITIVE, MIXED, [1]):
        ref = session.generate(prompt, max_new_tokens=60)
        out = session.generate(prompt, max_new_tokens=60, lookahead="auto")
        assert out.token_ids == ref.token_ids
        assert out.stop_reason == ref.stop_reason
        s = out.stats
        assert s.steps == sum(s.accept_histogram)
        assert s.new_tokens == 1 + sum(k * n for k, n in enumerate(s.accept_histogram))
        assert 0 <= s.lookahead_steps <= s.steps
        assert s.auto_decisions and s.auto_decisions[0].step == 0
        assert [d.step for d in s.auto_decisions] == sorted(d.step for d in s.auto_decisions)
    assert session.step_costs()  # the first auto call calibrated
    assert ref.stats.auto_decisions == [] and ref.stats.lookahead_steps == 0


def test_calibration_table_is_measured_once_and_readable(session: Session) -> None:
    assert session.step_costs() == []
    table = session.calibrate()
    tokens = [t for t, _ in table]
    assert tokens[0] == 1 and tokens == sorted(set(tokens)) and 4 in tokens
    assert all(s > 0 for _, s in table)
    assert session.calibrate() == table  # cached
    assert session.step_costs() == table


def test_expensive_wide_steps_fall_back_to_greedy(session: Session) -> None:
    assert session.calibrate(costs=EXPENSIVE) == sorted(EXPENSIVE.items())
    ref = session.generate(REPETITIVE, max_new_tokens=80)
    out = session.generate(REPETITIVE, max_new_tokens=80, lookahead="auto")
    assert out.token_ids == ref.token_ids
    assert out.stats.lookahead_steps == 0
    assert [tuple(d) for d in out.stats.auto_decisions] == [(0, "greedy")]
    assert out.stats.steps == len(out.token_ids) - 1
    # Sized for the largest step auto may run: N = 6, or a draft tree of tree_rows (capped by the table).
    size = max(7, min(AutoLookahead().tree_rows, max(EXPENSIVE) - 1) + 2)
    assert len(out.stats.accept_histogram) == size and out.stats.accept_histogram[2:] == [0] * (size - 2)


def test_cheap_wide_steps_on_repetitive_prompt_use_lookahead(session: Session) -> None:
    session.calibrate(costs=list(CHEAP.items()))
    ref = session.generate(REPETITIVE, max_new_tokens=80)
    out = session.generate(REPETITIVE, max_new_tokens=80, lookahead="auto")
    assert out.token_ids == ref.token_ids
    decisions = out.stats.auto_decisions
    assert not decisions[0].greedy and decisions[0].reason == "plan"
    assert decisions[0].predicted_speedup > 1.05
    assert out.stats.lookahead_steps > 0
    for d in decisions:
        if not d.greedy:
            cfg = _config_of(d)
            assert cfg.tokens_per_step <= max(CHEAP)
            assert d.label == f"{cfg.window_size},{cfg.ngram_size},{cfg.verification_set_size}"
    assert out.stats.steps < ref.stats.steps or out.stats.lookahead_steps < out.stats.steps


@pytest.mark.parametrize("tree_rows", [0, 16])
def test_verification_only_choices_run_as_draft_trees(session: Session, tree_rows: int) -> None:
    """AutoLookahead.tree_rows > 0 runs W = 0 choices as draft trees (pool + suffix lookup + recycling):
    the output stays greedy's; 0 keeps the classic slots (no suffix or recycled drafts)."""
    session.calibrate(costs={1: 1.0, 4: 1.3, 8: 1.6, 16: 2.2, 32: 3.4, 64: 5.8})  # rows cost: W = 0 pays best
    options = AutoLookahead(tree_rows=tree_rows)
    for prompt in (REPETITIVE, MIXED):
        ref = session.generate(prompt, max_new_tokens=80)
        out = session.generate(prompt, max_new_tokens=80, lookahead=options)
        assert out.token_ids == ref.token_ids
        by_source = out.stats.accepted_tokens_by_source
        assert len(out.stats.accept_histogram) == max(7, tree_rows + 2)
        if tree_rows == 0:
            assert by_source["suffix"] == by_source["recycle"] == 0
        # Every token after the prefill's is an accepted draft or a step's bonus token; max_new_tokens may cut the
        # last step inside its drafts (how many drafts a sized tree keeps depends on the measured step times, so no
        # count of them is asserted).
        hist = out.stats.accept_histogram
        assert 0 <= sum(by_source.values()) - sum((k - 1) * n for k, n in enumerate(hist) if k) <= 1


def test_switching_mid_generation_keeps_greedy_output(session: Session) -> None:
    # A table that promises nearly free steps (1 microsecond). On the repetitive prompt the first plan is a
    # window, whose steps all run many rows: its judgement has no one-row step of its own to take greedy's cost
    # from, so it compares with the table's 1 us, finds the run far slower and falls back; greedy steps are
    # measured, and the model still predicts a gain: a probe. Later runs (and the mixed prompt's, which start
    # verification-only) are judged against measured steps, so whether they fall back depends on the machine.
    session.calibrate(costs={t: 1e-6 for t in CHEAP})
    options = AutoLookahead(replan_interval=2, probe_after=4, probe_steps=2, min_gain=0.0)
    for i, prompt in enumerate((REPETITIVE, MIXED)):
        ref = session.generate(prompt, max_new_tokens=120)
        out = session.generate(prompt, max_new_tokens=120, lookahead=options)
        assert out.token_ids == ref.token_ids
        decisions = out.stats.auto_decisions
        assert decisions[0].reason == "plan" and decisions[0].judged_speedup == 0.0
        for d in decisions:
            if d.reason == "fallback":  # what its judgement measured: the run's tokens/s below greedy's
                assert 0.0 < d.judged_speedup < 1.0 and d.greedy_step_s > 0.0, (d.judged_speedup, d.greedy_step_s)
        if i == 0:
            assert decisions[0].window_size > 0, decisions
            assert [d.reason for d in decisions[:3]] == ["plan", "fallback", "probe"], decisions
            assert decisions[1].greedy_step_s == pytest.approx(1e-6) and decisions[1].judged_speedup < 0.01
            assert 0 < out.stats.lookahead_steps < out.stats.steps


def test_auto_keeps_the_pool_across_calls_when_asked(session: Session) -> None:
    # keep_pool=True: the pool (and the planner's replay pools) carry the n-grams of earlier calls; the
    # output stays greedy's, across reset() too.
    session.calibrate(costs=list(CHEAP.items()))
    refs = {tuple(p): session.generate(p, max_new_tokens=60).token_ids for p in (MIXED, REPETITIVE)}
    for prompt in (MIXED, REPETITIVE, MIXED):
        out = session.generate(prompt, max_new_tokens=60, lookahead="auto", keep_pool=True)
        assert out.token_ids == refs[tuple(prompt)]
        assert out.stats.lookahead_steps > 0
        assert session.pool_size > 0
    session.reset()
    assert session.pool_size == 0
    out = session.generate(REPETITIVE, max_new_tokens=60, lookahead="auto", keep_pool=True)
    assert out.token_ids == refs[tuple(REPETITIVE)]


def test_auto_replays_see_a_loaded_pool(tiny_llama: Path, tmp_path: Path) -> None:
    # A pool file carries its texts; load_pool seeds auto's replays with them, so with keep_pool=True auto
    # predicts from the n-grams the run will verify: on a prompt it has seen with its answer, more than a
    # session without the pool predicts. (A fixed cost table: no timing decides the plan.)
    source = Session(tiny_llama)
    ref = source.generate(
        MIXED, max_new_tokens=60, lookahead=LookaheadConfig(window_size=0, ngram_size=4, verification_set_size=2)
    )
    source.save_pool(tmp_path / "pool.bin")
    firsts = []
    for load in (True, False):
        session = Session(tiny_llama)
        session.calibrate(costs=list(CHEAP.items()))
        if load:
            session.load_pool(tmp_path / "pool.bin")
        out = session.generate(MIXED, max_new_tokens=60, lookahead="auto", keep_pool=True)
        assert out.token_ids == ref.token_ids
        firsts.append(out.stats.auto_decisions[0])
    assert firsts[0].predicted_speedup > firsts[1].predicted_speedup, (firsts[0].label, firsts[1].label)


def test_max_tokens_per_step_and_kv_room_cap_the_config(tiny_llama: Path) -> None:
    session = Session(tiny_llama, kv_capacity=REPETITIVE.__len__() + 40 + 12)
    session.calibrate(costs=CHEAP)
    ref = session.generate(REPETITIVE, max_new_tokens=40)
    out = session.generate(REPETITIVE, max_new_tokens=40, lookahead="auto")  # KV room: 12 tokens per step
    assert out.token_ids == ref.token_ids
    for d in out.stats.auto_decisions:
        if not d.greedy:
            assert _config_of(d).tokens_per_step <= 12
    big = Session(tiny_llama)
    big.calibrate(costs=CHEAP)
    out = big.generate(REPETITIVE, max_new_tokens=40, lookahead=AutoLookahead(max_tokens_per_step=8))
    for d in out.stats.auto_decisions:
        if not d.greedy:
            assert _config_of(d).tokens_per_step <= 8


def test_bad_arguments(session: Session) -> None:
    with pytest.raises(ValueError, match="lookahead must be"):
        session.generate(MIXED, max_new_tokens=4, lookahead="fast")
    with pytest.raises(ValueError, match="lookahead must be"):
        session.generate(MIXED, max_new_tokens=4, lookahead=3)
    with pytest.raises(ValueError, match="1 token"):
        session.calibrate(costs={4: 1.0})
    with pytest.raises(ValueError, match="> 0"):
        session.calibrate(costs={1: 0.0})
    with pytest.raises(ValueError, match="twice"):
        session.calibrate(costs=[(1, 1.0), (1, 2.0)])
    with pytest.raises(ValueError, match="replan_interval"):
        AutoLookahead(replan_interval=0)
    with pytest.raises(ValueError, match="min_gain"):
        AutoLookahead(min_gain=-1.0)
    assert session.step_costs() == []  # nothing was set by the failed calls


def test_cli_defaults_to_auto(tiny_llama: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess:
        return run_pylookahead(
            "generate", "--model", str(tiny_llama), "--prompt", "the cat sat on the mat",
            "--max-new-tokens", "8", "--threads", "1", *args,
        )  # fmt: skip

    result = run("--compare-greedy")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any(line.startswith("[auto] 8 new tokens") for line in lines), lines
    assert any(line.startswith("auto: ") and "0:" in line for line in lines), lines
    assert any(line.startswith("identical output") for line in lines), lines
    fixed = run("-W", "2")
    assert fixed.returncode == 0, fixed.stderr
    assert any(line.startswith("[lookahead LookaheadConfig(window_size=2") for line in fixed.stdout.splitlines())
    bad = run("--auto", "--greedy")
    assert bad.returncode == 2 and "--auto cannot be combined" in bad.stderr


@pytest.mark.slow
def test_auto_on_smollm2(smollm2_dir: Path) -> None:
    session = Session(smollm2_dir)
    prompt = session.tokenizer.apply_chat_template(
        [{"role": "user", "content": "Write a Python function is_even(n) and two asserts for it."}],
        add_generation_prompt=True,
    )
    ids = session.encode(prompt)
    ref = session.generate(ids, max_new_tokens=40)
    table = session.calibrate()  # the real measurement
    assert table[0][0] == 1 and all(s > 0 for _, s in table)
    out = session.generate(ids, max_new_tokens=40, lookahead="auto")
    assert out.token_ids == ref.token_ids
    # Told that wide steps are free, it runs lookahead on the real model; still greedy's output.
    session.calibrate(costs=CHEAP)
    out = session.generate(ids, max_new_tokens=40, lookahead="auto")
    assert out.token_ids == ref.token_ids
    assert out.stats.lookahead_steps > 0
    for d in out.stats.auto_decisions:
        if not d.greedy:
            _config_of(d)
