"""GGUF files loaded directly (`Model("x.gguf")`, docs/design.md "Quantized weights").

Tiny checkpoints are written as GGUF with gguf-py (the reference writer: llama.cpp's tensor names, its q/k row
order for the llama architecture, its quantizers), then checked through the public API:

* with `quantize="none"` the GGUF model is bitwise the model of a safetensors checkpoint holding gguf-py's own
  dequantization of the same tensors (names, row order, config and every block format's dequantization);
* with the default `quantize="auto"`, Q8_0 / Q5_0 / Q4_0 / Q4_1 linear weights run as they are, ModelInfo says so,
  and lookahead equals greedy exactly;
* K-quant blocks (Q4_K, Q5_K, Q6_K) dequantize as gguf-py does;
* the real SmolLM2 GGUF (Q4_1 + Q8_0) loads, equals the transformers-converted checkpoint bitwise when
  dequantized, and decodes exactly with lookahead in its own formats;
* corrupted copies are ModelLoadErrors naming the file and what is wrong.
"""

from __future__ import annotations

import json
import random
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from safetensors.numpy import load_file, save_file  # noqa: E402

import pylookahead  # noqa: E402
from pylookahead import LookaheadConfig, Model, Session, _core  # noqa: E402
from tiny_models import TINY_VOCAB_SIZE  # noqa: E402

pytestmark = pytest.mark.usefixtures("single_thread")

Q = gguf.GGMLQuantizationType

_PARTS = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.bias": "attn_output.bias",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
_TOP = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
        "lm_head.weight": "output.weight"}  # fmt: skip


def gguf_name(hf: str) -> str:
    if hf in _TOP:
        return _TOP[hf]
    _, _, index, rest = hf.split(".", 3)
    return f"blk.{index}.{_PARTS[rest]}"


def _permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's converter: each head's rows with the two RoPE halves interleaved."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _unpermute(w: np.ndarray, heads: int) -> np.ndarray:
    return w.reshape(heads, w.shape[0] // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(hf_dir: Path, out: Path, linear_type=Q.F32, embed_type=Q.F32, *, ref_dir: Path | None = None) -> Path:
    """`hf_dir` as a GGUF file; linear weights in `linear_type`, the embedding in `embed_type`.

    With `ref_dir`, also writes the safetensors checkpoint of gguf-py's dequantization of what the GGUF holds.
    """
    cfg = json.loads((hf_dir / "config.json").read_text())
    arch = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2"}[cfg["architectures"][0]]
    tensors = load_file(str(hf_dir / "model.safetensors"))
    w = gguf.GGUFWriter(str(out), arch)
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_key_length(cfg["head_dim"])
    w.add_rope_freq_base(cfg.get("rope_theta") or cfg["rope_parameters"]["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_eos_token_id(2)
    reference = {}
    for name, value in sorted(tensors.items()):
        value = value.astype(np.float32)
        heads = None
        if arch == "llama" and name.endswith(("q_proj.weight", "k_proj.weight")):
            heads = cfg["num_attention_heads"] if "q_proj" in name else cfg["num_key_value_heads"]
            value = _permute(value, heads)
        qtype = Q.F32
        if value.ndim == 2:
            qtype = embed_type if name == "model.embed_tokens.weight" else linear_type
        if qtype == Q.F32:
            w.add_tensor(gguf_name(name), value)
            stored = value
        else:
            data = gguf.quants.quantize(value, qtype)
            w.add_tensor(gguf_name(name), data, raw_dtype=qtype)
            stored = gguf.quants.dequantize(data, qtype).reshape(value.shape).astype(np.float32)
        reference[name] = _unpermute(stored, heads) if heads else stored
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    if ref_dir is not None:
        ref_dir.mkdir(parents=True, exist_ok=True)
        for f in ("config.json", "generation_config.json"):
            shutil.copy(hf_dir / f, ref_dir / f)
        save_file({k: np.ascontiguousarray(v) for k, v in reference.items()}, str(ref_dir / "model.safetensors"))
    return out


def tiny_prompt(seed: int) -> list[int]:
    rng = random.Random(seed)
    phrase = [rng.randrange(3, TINY_VOCAB_SIZE) for _ in range(5)]
    return [1] + phrase * 2 + [rng.randrange(3, TINY_VOCAB_SIZE) for _ in range(4)] + phrase[:2]


FORMATS = [(Q.F32, Q.F32), (Q.Q8_0, Q.Q8_0), (Q.Q4_0, Q.F32), (Q.Q4_1, Q.Q8_0), (Q.Q5_0, Q.F32), (Q.Q5_1, Q.F32)]


@pytest.mark.parametrize("linear_type, embed_type", FORMATS, ids=lambda t: t.name)
@pytest.mark.parametrize("arch, tied", [("llama", False), ("llama", True), ("qwen2", False)])
def test_tiny_gguf_dequantized_is_the_reference_checkpoint(tiny_model_factory, tmp_path, arch, tied,
                                                           linear_type, embed_type) -> None:  # fmt: skip
    hf_dir = tiny_model_factory(arch, seed=31, tie_word_embeddings=tied)
    path = write_gguf(hf_dir, tmp_path / "tiny.gguf", linear_type, embed_type, ref_dir=tmp_path / "ref")
    ours = Session(Model(path, dtype="float32", quantize="none"))
    ref = Session(Model(tmp_path / "ref", dtype="float32"))
    for seed in range(2):
        prompt = tiny_prompt(seed)
        assert np.array_equal(ours.prompt_logits(prompt), ref.prompt_logits(prompt)), (arch, linear_type.name)
        assert ours.generate(prompt, max_new_tokens=16).token_ids == ref.generate(prompt, max_new_tokens=16).token_ids


KEPT = {Q.Q8_0: "int8-g32", Q.Q5_0: "int8-g32", Q.Q4_0: "int4", Q.Q4_1: "int4"}


@pytest.mark.parametrize("linear_type", list(KEPT), ids=lambda t: t.name)
@pytest.mark.parametrize("arch, tied", [("llama", True), ("qwen2", False)])
def test_tiny_gguf_runs_blocks_as_they_are_and_lookahead_is_exact(tiny_model_factory, tmp_path, arch, tied,
                                                                  linear_type) -> None:  # fmt: skip
    hf_dir = tiny_model_factory(arch, seed=37, tie_word_embeddings=tied)
    path = write_gguf(hf_dir, tmp_path / "tiny.gguf", linear_type, Q.Q8_0)
    model = Model(path, dtype="float32")
    info = model.info
    assert info.quantize == "gguf" and info.quantize_lm_head
    # 2 layers x (qkv, o, gate_up, down), and the lm_head: the tied Q8_0 embedding, or its own copy.
    head = "Q8_0" if tied else linear_type.name
    want = {linear_type.name: 8}
    want[head] = want.get(head, 0) + 1
    kinds = {"Q8_0": "int8-g32", **{t.name: f for t, f in KEPT.items()}}
    assert sorted(info.weight_notes) == sorted(f"{t}: {n} as they are ({kinds[t]})" for t, n in want.items())
    dense = Session(Model(path, dtype="float32", quantize="none"))
    session = Session(model)
    for seed in range(3):
        prompt = tiny_prompt(seed)
        # The same weights in another summation order: close, not equal.
        assert np.abs(session.prompt_logits(prompt) - dense.prompt_logits(prompt)).max() < 1e-3
        greedy = session.generate(prompt, max_new_tokens=40)
        for w, n, g in [(0, 4, 2), (3, 3, 3), (5, 5, 3)]:
            cfg = LookaheadConfig(window_size=w, ngram_size=n, verification_set_size=g)
            out = session.generate(prompt, max_new_tokens=40, lookahead=cfg)
            assert out.token_ids == greedy.token_ids, (arch, linear_type.name, seed, (w, n, g))


@pytest.mark.parametrize("linear_type", [Q.Q8_0, Q.Q5_0], ids=lambda t: t.name)
def test_tiny_gguf_w8a8_keeps_int8_blocks(tiny_model_factory, tmp_path, linear_type) -> None:
    """quantize="w8a8" runs Q8_0 / Q5_0 blocks as they are on the int8-activation kernel: the same model as the
    reference checkpoint (gguf-py's dequantization) quantized at load, whose groups quantize back to those blocks."""
    hf_dir = tiny_model_factory("qwen2", seed=43)
    path = write_gguf(hf_dir, tmp_path / "tiny.gguf", linear_type, Q.Q8_0, ref_dir=tmp_path / "ref")
    model = Model(path, dtype="float32", quantize="w8a8")
    assert model.info.quantize == "w8a8"
    assert f"{linear_type.name}: 9 as they are (w8a8)" in list(model.info.weight_notes)
    session = Session(model)
    for seed in range(2):
        prompt = tiny_prompt(seed)
        greedy = session.generate(prompt, max_new_tokens=32)
        for w, n, g in [(0, 4, 2), (3, 3, 3)]:
            cfg = LookaheadConfig(window_size=w, ngram_size=n, verification_set_size=g)
            assert session.generate(prompt, max_new_tokens=32, lookahead=cfg).token_ids == greedy.token_ids
    if linear_type == Q.Q8_0:
        ref = Session(Model(tmp_path / "ref", dtype="float32", quantize="w8a8"))
        prompt = tiny_prompt(5)
        assert np.array_equal(session.prompt_logits(prompt), ref.prompt_logits(prompt))


def test_tiny_gguf_int4_requantizes_only_what_is_not_int4(tiny_model_factory, tmp_path) -> None:
    path = write_gguf(tiny_model_factory("llama", seed=41), tmp_path / "tiny.gguf", Q.Q4_1, Q.Q8_0)
    notes = list(Model(path, dtype="float32", quantize="int4").info.weight_notes)
    assert "Q4_1: 9 as they are (int4)" in notes  # 8 layer weights + the untied lm_head
    notes = list(Model(path, dtype="float32", quantize="int8").info.weight_notes)
    assert "Q4_1: 9 quantized to int8" in notes
    # int8 (one scale per column) keeps Q8_0 blocks in their own groups of 32 rather than rounding them again.
    path = write_gguf(tiny_model_factory("llama", seed=41), tmp_path / "tiny8.gguf", Q.Q8_0, Q.Q8_0)
    notes = list(Model(path, dtype="float32", quantize="int8").info.weight_notes)
    assert "Q8_0: 9 as they are (int8-g32)" in notes


@pytest.mark.parametrize("qtype", [Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.Q8_0, Q.Q5_1, Q.F16, Q.BF16], ids=lambda t: t.name)
def test_gguf_blocks_dequantize_as_gguf_py_does(tmp_path, qtype) -> None:
    rng = np.random.default_rng(int(qtype))
    block_size, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    rows, blocks = 3, 2
    if qtype in (Q.F16, Q.BF16):
        values = rng.standard_normal((rows, 64)).astype(np.float32)
        data = gguf.quants.quantize(values, qtype)
    else:
        data = rng.integers(0, 256, size=(rows, blocks * block_bytes), dtype=np.uint8)
        # Keep the fp16 scales finite and moderate: byte pairs at the scale offsets set to 0x2c00 +- small.
        scale_offsets = {Q.Q4_K: (0, 2), Q.Q5_K: (0, 2), Q.Q6_K: (208,), Q.Q8_0: (0,), Q.Q5_1: (0, 2)}[qtype]
        for b in range(blocks):
            for off in scale_offsets:
                data[:, b * block_bytes + off] = rng.integers(0, 256, size=rows)
                data[:, b * block_bytes + off + 1] = 0x2C
    path = tmp_path / "blocks.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tensor("t", data, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    want = gguf.quants.dequantize(data, qtype).astype(np.float32)
    got = _core.read_gguf_tensor(str(path), "t")
    assert got.shape == want.shape
    assert np.array_equal(got, want), np.abs(got - want).max()


# ---- the real SmolLM2 GGUF ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smollm2_gguf() -> Path:
    from pylookahead.catalog import DEFAULT_MODEL
    from pylookahead.tools.models import pull_gguf

    return pull_gguf(DEFAULT_MODEL, progress=False)


def test_smollm2_gguf_loads_as_the_converted_checkpoint(smollm2_gguf, smollm2_dir) -> None:
    ours = Model(smollm2_gguf, dtype="float32", quantize="none")
    assert list(ours.info.weight_notes) == ["Q4_1: 120 dequantized to float32", "Q8_0: 1 dequantized to float32"]
    converted = Model(smollm2_dir, dtype="float32")
    prompt = converted.tokenizer.encode('def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n')
    assert ours.tokenizer.encode('def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n') == prompt
    assert np.array_equal(Session(ours).prompt_logits(prompt), Session(converted).prompt_logits(prompt))


def test_smollm2_gguf_as_stored_lookahead_equals_greedy(smollm2_gguf) -> None:
    model = Model(smollm2_gguf, dtype="float32")
    assert model.info.quantize == "gguf"
    assert list(model.info.weight_notes) == ["Q4_1: 120 as they are (int4)", "Q8_0: 1 as they are (int8-g32)"]
    assert model.info.weight_bytes < 210 * 2**20  # the fp32 embedding (113 MB) + 4.5-bit layers
    session = Session(model)
    for text in ["def quicksort(arr):", "The three primary colors are"]:
        prompt = model.tokenizer.encode(text)
        greedy = session.generate(prompt, max_new_tokens=48)
        for w, n, g in [(0, 4, 4), (4, 4, 4), (6, 5, 4)]:
            cfg = LookaheadConfig(window_size=w, ngram_size=n, verification_set_size=g)
            out = session.generate(prompt, max_new_tokens=48, lookahead=cfg)
            assert out.token_ids == greedy.token_ids, (text, (w, n, g))
        assert session.generate(prompt, max_new_tokens=48, lookahead="auto").token_ids == greedy.token_ids


# ---- corrupted copies -----------------------------------------------------------------------------------------


def _tensor_info_at(data: bytes, name: str) -> int:
    """Offset of the u32 dims field that follows tensor `name`'s name in the tensor table."""
    key = struct.pack("<Q", len(name)) + name.encode()
    at = data.find(key)
    assert at > 0
    return at + len(key)


def _field(data: bytearray, name: str, what: str) -> int:
    at = _tensor_info_at(bytes(data), name)
    dims = struct.unpack_from("<I", data, at)[0]
    type_at = at + 4 + 8 * dims
    return {"dims": at, "shape": at + 4, "type": type_at, "offset": type_at + 4}[what]


def _corrupt(kind: str, data: bytearray) -> bytearray:
    name = "blk.0.attn_q.weight"
    if kind == "magic":
        data[0:4] = b"GGUX"
    elif kind == "version":
        struct.pack_into("<I", data, 4, 99)
    elif kind == "truncated":
        data = data[: len(data) // 2]
    elif kind == "tensor-count":
        struct.pack_into("<Q", data, 8, 2**40)
    elif kind == "type":
        struct.pack_into("<I", data, _field(data, name, "type"), 77)
    elif kind == "misaligned":
        at = _field(data, name, "offset")
        struct.pack_into("<Q", data, at, struct.unpack_from("<Q", data, at)[0] + 4)
    elif kind == "past-end":
        struct.pack_into("<Q", data, _field(data, name, "offset"), 2**40)
    elif kind == "overlap":
        other = _field(data, "blk.0.attn_k.weight", "offset")
        struct.pack_into("<Q", data, _field(data, name, "offset"), struct.unpack_from("<Q", data, other)[0])
    elif kind == "zero-dim":
        struct.pack_into("<Q", data, _field(data, name, "shape"), 0)
    elif kind == "shape":
        struct.pack_into("<Q", data, _field(data, name, "shape") + 8, 32)  # 64 rows -> 32 (data still fits)
    elif kind == "dims":
        struct.pack_into("<I", data, _field(data, name, "dims"), 9)
    return data


CORRUPTIONS = {
    "magic": r"not a GGUF file \(bad magic\)",
    "version": r"unsupported GGUF version 99",
    "truncated": r"truncated|past the data section|past the end",
    "tensor-count": r"tensor count 1099511627776 .* exceeds what the file can hold",
    "type": r"tensor 'blk\.0\.attn_q\.weight': unsupported ggml type 77",
    "misaligned": r"tensor 'blk\.0\.attn_q\.weight': offset \d+ is not a multiple of the alignment 32",
    "past-end": r"tensor 'blk\.0\.attn_q\.weight': bytes \[\d+, \d+\) lie past the data section",
    "overlap": r"overlaps tensor",
    "zero-dim": r"tensor 'blk\.0\.attn_q\.weight': dim 0 = 0 is zero",
    "shape": r"tensor 'blk\.0\.attn_q\.weight' has shape \[32, 64\], expected \[64, 64\]",
    "dims": r"tensor 'blk\.0\.attn_q\.weight': 9 dims \(expected 1 to 4\)",
}


@pytest.mark.parametrize("kind", list(CORRUPTIONS))
def test_tiny_corrupted_gguf_is_a_model_load_error(tiny_model_factory, tmp_path, kind) -> None:
    good = write_gguf(tiny_model_factory("llama", seed=43), tmp_path / "good.gguf", Q.Q8_0, Q.Q8_0)
    bad = tmp_path / f"{kind}.gguf"
    bad.write_bytes(bytes(_corrupt(kind, bytearray(good.read_bytes()))))
    with pytest.raises(pylookahead.ModelLoadError, match=CORRUPTIONS[kind]) as error:
        Model(bad, dtype="float32")
    assert str(bad) in str(error.value)


def test_tiny_gguf_with_a_missing_or_extra_tensor(tiny_model_factory, tmp_path) -> None:
    hf_dir = tiny_model_factory("llama", seed=43)
    tensors = load_file(str(hf_dir / "model.safetensors"))
    for case in ("missing", "extra"):
        variant = tmp_path / case
        shutil.copytree(hf_dir, variant)
        changed = dict(tensors)
        if case == "missing":
            del changed["model.layers.1.mlp.down_proj.weight"]
        else:
            changed["model.layers.0.self_attn.o_proj.bias"] = np.zeros(64, np.float32)
        save_file(changed, str(variant / "model.safetensors"))
        path = write_gguf(variant, tmp_path / f"{case}.gguf")
        pattern = (
            r"missing tensor 'blk\.1\.ffn_down\.weight'"
            if case == "missing"
            else r"unexpected tensor 'blk\.0\.attn_output\.bias'"
        )
        with pytest.raises(pylookahead.ModelLoadError, match=pattern):
            Model(path, dtype="float32")


def test_tiny_gguf_of_another_architecture(tmp_path) -> None:
    path = tmp_path / "gpt2.gguf"
    w = gguf.GGUFWriter(str(path), "gpt2")
    w.add_tensor("token_embd.weight", np.zeros((4, 8), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(
        pylookahead.ModelLoadError, match=r"unsupported GGUF architecture 'gpt2' \(supported: llama, qwen2\)"
    ):
        Model(path)


def test_tiny_gguf_q4_0_scale_without_an_int4_offset(tiny_model_factory, tmp_path) -> None:
    """A Q4_0 scale whose -8 d overflows fp16 cannot be kept as int4 (found by the fuzzer): a typed error naming
    the file and tensor; the same file loads dequantized."""
    path = write_gguf(tiny_model_factory("llama", seed=43), tmp_path / "q4_0.gguf", Q.Q4_0, Q.F32)
    offset = int(next(t for t in gguf.GGUFReader(str(path)).tensors if t.name == "blk.0.attn_q.weight").data_offset)
    data = bytearray(path.read_bytes())
    data[offset : offset + 2] = struct.pack("<H", 0x7400)  # d = 16384: -8 d = -131072 is beyond fp16
    path.write_bytes(bytes(data))
    with pytest.raises(
        pylookahead.ModelLoadError, match=r"q4_0\.gguf: tensor 'blk\.0\.attn_q\.weight': a Q4_0 scale of 16384"
    ):
        Model(path, dtype="float32")
    assert Model(path, dtype="float32", quantize="none").info.quantize == "none"
