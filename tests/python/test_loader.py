"""Checkpoint loading: name mapping, layouts, dtypes, rope spellings, and typed errors."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

import pylookahead
from tiny_models import load_hf, write_tiny_model


def _logits(model_dir: Path, ids: list[int], dtype: str = "float64") -> np.ndarray:
    s = pylookahead.Session(model_dir, dtype=dtype)
    return s.prompt_logits(ids)


def _hf_logits(model_dir: Path, ids: list[int], dtype=torch.float64) -> np.ndarray:
    hf = load_hf(model_dir, dtype)
    with torch.no_grad():
        return hf(torch.tensor([ids])).logits[0].float().numpy()


IDS = [3, 17, 5, 42, 8, 1, 60, 23]


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(arch="llama"),
        dict(arch="llama", tie_word_embeddings=True),
        dict(arch="qwen2"),
        dict(arch="qwen2", tie_word_embeddings=False, rope_style="v4"),
        dict(arch="mistral"),
        dict(arch="llama", rope_style="v4"),
        dict(arch="llama", rope_scaling={"rope_type": "linear", "factor": 2.0}),
        dict(
            arch="llama",
            rope_scaling={
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
            },
        ),
        dict(arch="llama", sharded=True),
        dict(arch="llama", dtype=torch.bfloat16),
        dict(arch="llama", dtype=torch.float16),
        dict(arch="qwen2", dtype=torch.float64),
    ],
    ids=lambda kw: (
        "-".join(f"{k}={v}" for k, v in kw.items() if k != "rope_scaling")
        + ("-rope_scaling=" + kw["rope_scaling"]["rope_type"] if "rope_scaling" in kw else "")
    ),
)
def test_layouts_load_and_match_transformers(tmp_path, kwargs):
    d = write_tiny_model(tmp_path / "m", **kwargs)
    ours = _logits(d, IDS, "float64")
    ref = _hf_logits(d, IDS, torch.float64)
    # fp64 on both sides; transformers normalises in fp32 even in fp64, we stay fp64.
    np.testing.assert_allclose(ours, ref, atol=1e-5, rtol=0)


def test_sharded_checkpoint_has_several_shards(tmp_path):
    d = write_tiny_model(tmp_path / "m", arch="llama", sharded=True)
    index = json.loads((d / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_float32_logits_match_transformers(tmp_path, arch):
    d = write_tiny_model(tmp_path / "m", arch=arch)
    ours = _logits(d, IDS, "float32")
    ref = _hf_logits(d, IDS, torch.float32)
    np.testing.assert_allclose(ours, ref, atol=1e-4, rtol=0)


# ---- errors --------------------------------------------------------------------------------


def _expect_load_error(model_dir: Path, *needles: str) -> str:
    with pytest.raises(pylookahead.ModelLoadError) as ei:
        pylookahead.Session(model_dir)
    msg = str(ei.value)
    for n in needles:
        assert n in msg, f"{n!r} not in {msg!r}"
    return msg


def test_model_load_error_is_a_runtime_error():
    assert issubclass(pylookahead.ModelLoadError, RuntimeError)


def test_missing_directory_or_config(tmp_path):
    (tmp_path / "empty").mkdir()
    _expect_load_error(tmp_path / "empty", "config.json")


def test_missing_weights_file(tmp_path):
    d = write_tiny_model(tmp_path / "m", arch="llama")
    (d / "model.safetensors").unlink()
    _expect_load_error(d, "model.safetensors")


def _rewrite_header(path: Path, edit) -> None:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    edit(header)
    new = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(new)) + new + raw[8 + n :])


def test_truncated_file(tmp_path):
    d = write_tiny_model(tmp_path / "m", arch="llama")
    (d / "model.safetensors").write_bytes(b"\x01\x02")
    _expect_load_error(d, "model.safetensors", "truncated")


def test_header_length_past_end(tmp_path):
    d = write_tiny_model(tmp_path / "m", arch="llama")
    p = d / "model.safetensors"
    raw = p.read_bytes()
    p.write_bytes(struct.pack("<Q", len(raw) * 2) + raw[8:])
    _expect_load_error(d, "model.safetensors", "header length")


def test_header_not_json(tmp_path):
    d = write_tiny_model(tmp_path / "m", arch="llama")
    p = d / "model.safetensors"
    raw = p.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    p.write_bytes(raw[:8] + b"{" * n + raw[8 + n :])
    _expect_load_error(d, "model.safetensors", "not valid JSON")


def test_offsets_out_of_range(tmp_path):
    d = write_tiny_model(tmp_path / "m", arch="llama")

    def edit(h):
        e = h["model.norm.weight"]
        e["data_offsets"] = [e["data_offsets"][0], 10**12]

    _rewrite_header(d / "model.safetensors", edit)
    _expect_load_error(d, "model.norm.weight", "out of range")


def test_unsupported_stored_dtype(tmp_path):
    d = write_tiny_model(tmp_path / "m", arch="llama")
    t = load_file(d / "model.safetensors")
    t["model.norm.weight"] = t["model.norm.weight"].to(torch.int32)
    save_file(t, d / "model.safetensors")
    _expect_load_error(d, "model.norm.weight", "I32")


def test_missing_tensor(tmp_path):
    d = write_tiny_model(tmp_path / "m", arch="llama")
    t = load_file(d / "model.safetensors")
    del t["model.layers.1.mlp.up_proj.weight"]
    save_file(t, d / "model.safetensors")
    _expect_load_error(d, "missing tensor", "model.layers.1.mlp.up_proj.weight")


def test_unexpected_tensor(tmp_path):
    d = write_tiny_model(tmp_path / "m", arch="llama")
    t = load_file(d / "model.safetensors")
    t["model.layers.0.self_attn.extra.weight"] = torch.zeros(3)
    save_file(t, d / "model.safetensors")
    _expect_load_error(d, "unexpected tensor", "model.layers.0.self_attn.extra.weight")


def test_shape_mismatch(tmp_path):
    d = write_tiny_model(tmp_path / "m", arch="llama")
    t = load_file(d / "model.safetensors")
    w = t["model.layers.0.mlp.down_proj.weight"]
    t["model.layers.0.mlp.down_proj.weight"] = w[:, :-1].contiguous()
    save_file(t, d / "model.safetensors")
    msg = _expect_load_error(d, "model.layers.0.mlp.down_proj.weight", "expected")
    assert str(list(w.shape)).replace(" ", "") in msg.replace(" ", "")


def test_missing_shard(tmp_path):
    d = write_tiny_model(tmp_path / "m", arch="llama", sharded=True)
    shard = sorted(d.glob("model-*.safetensors"))[-1]
    shard.unlink()
    _expect_load_error(d, shard.name, "missing")


def test_unsupported_architecture(tmp_path):
    d = write_tiny_model(tmp_path / "m", arch="llama")
    cfg = json.loads((d / "config.json").read_text())
    cfg["architectures"] = ["GPT2LMHeadModel"]
    (d / "config.json").write_text(json.dumps(cfg))
    _expect_load_error(d, "config.json", "GPT2LMHeadModel", "LlamaForCausalLM")


def test_missing_config_key(tmp_path):
    d = write_tiny_model(tmp_path / "m", arch="llama")
    cfg = json.loads((d / "config.json").read_text())
    del cfg["hidden_size"]
    (d / "config.json").write_text(json.dumps(cfg))
    _expect_load_error(d, "config.json", "hidden_size")


def test_config_not_json(tmp_path):
    d = write_tiny_model(tmp_path / "m", arch="llama")
    (d / "config.json").write_text("{not json")
    _expect_load_error(d, "config.json", "not valid JSON")


def test_bad_engine_options_are_value_errors(tmp_path):
    d = write_tiny_model(tmp_path / "m", arch="llama")
    with pytest.raises(ValueError, match="dtype"):
        pylookahead.Session(d, dtype="int8")
    with pytest.raises(ValueError, match="device"):
        pylookahead.Session(d, device="tpu")
    with pytest.raises(ValueError, match="kv_capacity"):
        pylookahead.Session(d, kv_capacity=10**9)


def test_eos_ids_from_generation_config(tmp_path):
    d = write_tiny_model(tmp_path / "m", arch="llama")
    (d / "generation_config.json").write_text(json.dumps({"eos_token_id": [5, 7]}))
    assert list(pylookahead.Model(d).info.eos_token_ids) == [5, 7]
