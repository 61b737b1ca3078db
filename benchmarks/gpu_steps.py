"""GPU benchmark of the CUDA decode step (docs/design.md, "CUDA"; results in docs/benchmarks.md).

Model weights cannot reach the GPU machine, so each model is built there: the config of a real checkpoint
(SmolLM2-135M, Qwen2.5-Coder-0.5B, Qwen2.5-Coder-1.5B), random bfloat16 weights from transformers' own init,
saved as safetensors. Step cost does not depend on the weights' values; acceptance does, so lookahead's speedup
is not measured here (benchmarks/gpu_projection.py combines these step costs with CPU-measured step counts).

(a) decode step latency against the step's rows T: a Session with cuda_step_rows=T runs greedy steps, each one
    T-row step (the real token and T-1 padding rows); CUDA graphs on and off; median over repetitions of
    decode_s / steps.
(b) greedy tok/s (128 new tokens after a 128-token prompt, wall time of the call, prefill included) of the engine
    with graphs (cuda_step_rows 64, the exact default, and 1) and without, against transformers' greedy
    `generate` on the same GPU and weights (its default dynamic cache, eager PyTorch).

Usage: python benchmarks/gpu_steps.py [--models a,b] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

SHAPES = {
    "smollm2-135m": dict(
        model_type="llama", hidden_size=576, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
        intermediate_size=1536, vocab_size=49152, rope_theta=100000.0, tie_word_embeddings=True,
        max_position_embeddings=8192, rms_norm_eps=1e-5,
    ),
    "qwen2.5-coder-0.5b": dict(
        model_type="qwen2", hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
        intermediate_size=4864, vocab_size=151936, rope_theta=1000000.0, tie_word_embeddings=True,
        max_position_embeddings=32768, rms_norm_eps=1e-6,
    ),
    "qwen2.5-coder-1.5b": dict(
        model_type="qwen2", hidden_size=1536, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
        intermediate_size=8960, vocab_size=151936, rope_theta=1000000.0, tie_word_embeddings=True,
        max_position_embeddings=32768, rms_norm_eps=1e-6,
    ),
}  # fmt: skip
ROWS = [1, 8, 16, 32, 64, 128]
TOK_S_ROWS = (1, 64)  # rows whose greedy tok/s is measured too
PROMPT_TOKENS = 128
STEP_TOKENS = 48  # new tokens per latency measurement (47 decode steps)
NEW_TOKENS = 128
REPS = 3


def build_checkpoint(name: str, shape: dict, root: Path):
    """Random bf16 weights of `shape` (transformers' init, on the GPU), saved under root/name; returns (dir, HF model)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    fields = dict(shape)
    config = AutoConfig.for_model(fields.pop("model_type"), **fields)
    config.eos_token_id = fields["vocab_size"] - 1  # random weights: rarely chosen; the runs stop on length
    torch.manual_seed(0)
    with torch.device("cuda"):
        try:
            model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
        except TypeError:  # transformers < 4.56 spells it torch_dtype
            model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.bfloat16)
    model.eval()
    path = root / name
    model.save_pretrained(path, safe_serialization=True)
    (path / "generation_config.json").unlink(missing_ok=True)
    return path, model


def engine_rows(model, prompt: list[int], rows: int) -> dict:
    """Greedy steps of a Session with cuda_step_rows=rows: median step time and tok/s."""
    from pylookahead import Session

    session = Session(model, cuda_step_rows=rows, kv_capacity=1024)
    session.generate(prompt, max_new_tokens=8)  # warm-up; captures the graph
    steps, walls = [], []
    for _ in range(REPS):
        out = session.generate(prompt, max_new_tokens=STEP_TOKENS)
        steps.append(out.stats.decode_s / out.stats.steps)
    for _ in range(REPS if rows in TOK_S_ROWS else 0):
        t0 = time.perf_counter()
        out = session.generate(prompt, max_new_tokens=NEW_TOKENS)
        walls.append(time.perf_counter() - t0)
        assert out.stats.new_tokens == NEW_TOKENS, out.stop_reason
    return {
        "rows": rows,
        "step_ms_median": 1e3 * statistics.median(steps),
        "step_ms_all": [1e3 * s for s in steps],
        "tok_s_median": NEW_TOKENS / statistics.median(walls) if walls else None,
        "cuda_graphs": out.stats.cuda_graphs,
        "cuda_graph_mib": out.stats.cuda_graph_bytes / 2**20,
    }


def hf_greedy(model, prompt: list[int]) -> dict:
    ids = torch.tensor([prompt], device="cuda")
    walls = []
    with torch.inference_mode():
        model.generate(ids, max_new_tokens=8, min_new_tokens=8, do_sample=False)  # warm-up
        for _ in range(REPS):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = model.generate(ids, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False)
            torch.cuda.synchronize()
            walls.append(time.perf_counter() - t0)
    assert out.shape[1] == len(prompt) + NEW_TOKENS
    return {"tok_s_median": NEW_TOKENS / statistics.median(walls), "seconds": walls}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(SHAPES), help="comma-separated names of SHAPES")
    parser.add_argument("--out", default="benchmarks/results/gpu/gpu_steps.json")
    args = parser.parse_args(argv)
    from pylookahead import Model
    from pylookahead.tools.bench import script_result_header

    result = script_result_header("gpu_steps", "benchmarks/gpu_steps.py", argv)
    result["gpu"] = {
        "name": torch.cuda.get_device_name(),
        "capability": list(torch.cuda.get_device_capability()),
        "torch_cuda": torch.version.cuda,
    }
    result["settings"] = dict(
        rows=ROWS, prompt_tokens=PROMPT_TOKENS, step_tokens=STEP_TOKENS, new_tokens=NEW_TOKENS, reps=REPS,
        dtype="bfloat16",
    )  # fmt: skip
    result["models"] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            t0 = time.perf_counter()
            path, hf = build_checkpoint(name, SHAPES[name], Path(tmp))
            prompt = torch.randint(0, SHAPES[name]["vocab_size"] - 1, (PROMPT_TOKENS,), generator=torch.Generator().manual_seed(1)).tolist()  # fmt: skip
            entry: dict = {"shape": SHAPES[name]}
            for graphs in (True, False):
                model = Model(path, device="cuda", dtype="bfloat16", use_cuda_graphs=graphs)
                runs = [engine_rows(model, prompt, rows) for rows in ROWS]
                entry["graphs" if graphs else "eager"] = runs
                del model
                torch.cuda.empty_cache()
            entry["hf_greedy"] = hf_greedy(hf, prompt)
            del hf
            torch.cuda.empty_cache()
            by_rows = {r["rows"]: r for r in entry["graphs"]}
            entry["summary"] = {
                "step_ms_graphs": {r: by_rows[r]["step_ms_median"] for r in ROWS},
                "step_ms_eager": {r["rows"]: r["step_ms_median"] for r in entry["eager"]},
                "step64_over_step1_graphs": by_rows[64]["step_ms_median"] / by_rows[1]["step_ms_median"],
                "greedy64_tok_s_graphs": by_rows[64]["tok_s_median"],
                "greedy1_tok_s_graphs": by_rows[1]["tok_s_median"],
                "greedy64_tok_s_eager": {r["rows"]: r for r in entry["eager"]}[64]["tok_s_median"],
                "hf_greedy_tok_s": entry["hf_greedy"]["tok_s_median"],
            }
            s = entry["summary"]
            s["greedy64_graphs_over_hf"] = s["greedy64_tok_s_graphs"] / s["hf_greedy_tok_s"]
            entry["seconds"] = time.perf_counter() - t0
            result["models"][name] = entry
            print(name, json.dumps(s, indent=1), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print("wrote", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
