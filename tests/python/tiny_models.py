"""Tiny random checkpoints written with `transformers`, for loader, parity and greedy-equivalence tests.

`write_tiny_model(path, arch=...)` writes config.json + safetensors (+ generation_config.json and a word-level
tokenizer.json) that look like a real Hugging Face checkpoint of that architecture, only tiny:

* vocab 97, hidden 64, 2 layers, 4 query heads over 2 KV heads (GQA), max_position_embeddings 256;
* weights drawn from a `torch.Generator` seeded with `seed`, independent of transformers' own init, so the
  same arguments always give bitwise-identical files. Weights use std 0.2 (`initializer_range`) and the
  embedding/output matrices std 1.0, which makes logits peaky: greedy top-1/top-2 margins are far from rounding
  noise. RMSNorm weights are 1 +- 0.1 and biases +- 0.1, so a loader that drops either is caught;
* `rope_style="v5"` keeps transformers 5's `rope_parameters: {rope_theta, rope_type, ...}`; `"v4"`
  rewrites config.json the way transformers 4 checkpoints spell it: top-level `rope_theta` and an optional
  `rope_scaling` dict. Both describe the same model.

`load_hf(path, dtype)` loads one back as the reference transformers model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import torch

from pylookahead.tools.models import _transformers_progress

Arch = Literal["llama", "qwen2", "mistral"]
RopeStyle = Literal["v5", "v4"]

TINY_VOCAB_SIZE = 97
TINY_BOS_ID = 1
TINY_EOS_ID = 2
TINY_ROPE_THETA = 10000.0

LINEAR_ROPE_SCALING: dict[str, Any] = {"rope_type": "linear", "factor": 2.0}
LLAMA3_ROPE_SCALING: dict[str, Any] = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64,
}

_WEIGHT_STD = 0.2
_LM_HEAD_STD = 1.0
_NORM_JITTER = 0.1
_BIAS_STD = 0.1

# Word-level vocabulary for `write_tokenizer_json`: specials, chat roles, then plain words and characters.
_SPECIAL_TOKENS = ("<unk>", "<s>", "</s>")
_WORDS: tuple[str, ...] = tuple(
    (
        "system user assistant "
        "the a an of to and in is it that on for with as was at by be this are or from not but "
        "cat dog sat mat hello world yes no one two three four five six seven eight nine ten "
        "def return if else while print x y z = + - * / ( ) : , . ? !"
    ).split()
)


def _config_class(arch: Arch) -> type:
    from transformers import LlamaConfig, MistralConfig, Qwen2Config

    classes: dict[str, type] = {"llama": LlamaConfig, "qwen2": Qwen2Config, "mistral": MistralConfig}
    if arch not in classes:
        raise ValueError(f"arch must be one of {sorted(classes)} (got {arch!r})")
    return classes[arch]


def tiny_config(
    arch: Arch = "llama",
    *,
    tie_word_embeddings: bool = False,
    rope_scaling: dict[str, Any] | None = None,
    head_dim: int | None = None,
    num_hidden_layers: int = 2,
    num_attention_heads: int = 4,
    num_key_value_heads: int = 2,
    hidden_size: int = 64,
    intermediate_size: int = 128,
    vocab_size: int = TINY_VOCAB_SIZE,
    attention_bias: bool | None = None,
) -> Any:
    """A transformers config object for a tiny model (see the module docstring for the defaults)."""
    rope_parameters: dict[str, Any] = {"rope_type": "default", "rope_theta": TINY_ROPE_THETA}
    if rope_scaling is not None:
        rope_parameters = {**rope_scaling, "rope_theta": TINY_ROPE_THETA}
    kwargs: dict[str, Any] = dict(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads,
        head_dim=head_dim if head_dim is not None else hidden_size // num_attention_heads,
        max_position_embeddings=256,
        rms_norm_eps=1e-6,
        initializer_range=_WEIGHT_STD,
        tie_word_embeddings=tie_word_embeddings,
        rope_parameters=rope_parameters,
        bos_token_id=TINY_BOS_ID,
        eos_token_id=TINY_EOS_ID,
        pad_token_id=None,
    )
    if arch == "llama":
        kwargs["attention_bias"] = bool(attention_bias)
    elif arch == "qwen2":
        # Qwen2 always has q/k/v biases (and no o_proj bias); the config has no switch for it.
        if attention_bias is False:
            raise ValueError("qwen2 always has attention (q/k/v) biases")
        kwargs.update(use_sliding_window=False, sliding_window=None)
    elif arch == "mistral":
        if attention_bias:
            raise ValueError("mistral has no attention biases")
        kwargs["sliding_window"] = None  # full attention: the engine does not implement sliding windows
    return _config_class(arch)(**kwargs)


def _randomize(model: torch.nn.Module, seed: int) -> None:
    """Overwrite every parameter from a generator seeded with `seed` (names visited in sorted order)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in sorted(model.named_parameters(), key=lambda item: item[0]):
            noise = torch.randn(param.shape, generator=generator, dtype=torch.float64)
            if "norm" in name:
                value = 1.0 + _NORM_JITTER * noise
            elif name.endswith(".bias"):
                value = _BIAS_STD * noise
            elif name == "lm_head.weight" or "embed_tokens" in name:  # also the output matrix when tied
                value = _LM_HEAD_STD * noise
            else:
                value = _WEIGHT_STD * noise
            param.copy_(value.to(param.dtype))


def _rewrite_rope_v4(config_path: Path) -> None:
    """Turn transformers 5's `rope_parameters` into transformers 4's `rope_theta` (+ `rope_scaling`)."""
    config = json.loads(config_path.read_text())
    rope = dict(config.pop("rope_parameters"))
    config["rope_theta"] = rope.pop("rope_theta")
    if rope.get("rope_type", "default") != "default":
        config["rope_scaling"] = rope
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def write_tiny_model(
    path: str | Path,
    arch: Arch = "llama",
    *,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    tie_word_embeddings: bool = False,
    sharded: bool = False,
    rope_style: RopeStyle = "v5",
    rope_scaling: dict[str, Any] | None = None,
    head_dim: int | None = None,
    num_hidden_layers: int = 2,
    num_attention_heads: int = 4,
    num_key_value_heads: int = 2,
    hidden_size: int = 64,
    vocab_size: int = TINY_VOCAB_SIZE,
    attention_bias: bool | None = None,
    with_tokenizer: bool = True,
) -> Path:
    """Write a tiny random checkpoint of `arch` into directory `path` (created) and return it.

    `sharded=True` forces several model-0000K-of-0000N.safetensors files plus model.safetensors.index.json.
    `head_dim` different from hidden_size / num_attention_heads (64 / 4 = 16) exercises a decoupled head size.
    `rope_scaling` is None, `LINEAR_ROPE_SCALING` or `LLAMA3_ROPE_SCALING` (or any transformers rope dict).
    """
    from transformers import AutoModelForCausalLM

    if rope_style not in ("v4", "v5"):
        raise ValueError(f"rope_style must be 'v4' or 'v5' (got {rope_style!r})")
    path = Path(path)
    config = tiny_config(
        arch,
        tie_word_embeddings=tie_word_embeddings,
        rope_scaling=rope_scaling,
        head_dim=head_dim,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads,
        hidden_size=hidden_size,
        vocab_size=vocab_size,
        attention_bias=attention_bias,
    )
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    _randomize(model, seed)
    model = model.to(dtype).eval()
    # ~150 KB of weights per layer in float32: 60 KB shards give several files for any dtype.
    max_shard_size = "60KB" if sharded else "2GB"
    with _transformers_progress(enabled=False):
        model.save_pretrained(path, safe_serialization=True, max_shard_size=max_shard_size)
    if rope_style == "v4":
        _rewrite_rope_v4(path / "config.json")
    if with_tokenizer:
        write_tokenizer_json(path, vocab_size=vocab_size)
    return path


def load_hf(path: str | Path, dtype: torch.dtype = torch.float32) -> Any:
    """The transformers reference model for a checkpoint directory, in eval mode, on CPU, eager attention."""
    from transformers import AutoModelForCausalLM

    with _transformers_progress(enabled=False):
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation="eager")
    return model.eval()


def tiny_vocab(vocab_size: int = TINY_VOCAB_SIZE) -> dict[str, int]:
    """The word-level vocabulary of `write_tokenizer_json`: specials, words, then `<tok_K>` fillers."""
    tokens = list(dict.fromkeys(_SPECIAL_TOKENS + _WORDS))  # unique, in order
    if vocab_size < len(_SPECIAL_TOKENS):
        raise ValueError(f"vocab_size must be >= {len(_SPECIAL_TOKENS)} (got {vocab_size})")
    tokens = tokens[:vocab_size]
    tokens += [f"<tok_{k}>" for k in range(len(tokens), vocab_size)]
    return {token: index for index, token in enumerate(tokens)}


TINY_CHAT_TEMPLATE = (
    "{% for message in messages %}{{ bos_token }} {{ message['role'] }} {{ message['content'] }} "
    "{{ eos_token }} {% endfor %}{% if add_generation_prompt %}{{ bos_token }} assistant {% endif %}"
)


def write_tokenizer_json(path: str | Path, vocab_size: int = TINY_VOCAB_SIZE) -> Path:
    """Write a whitespace-split word-level tokenizer.json (+ tokenizer_config.json with a chat template).

    Unknown words map to <unk> (id 0); <s>=1 and </s>=2 are special. Decoding joins tokens with spaces.
    Returns the tokenizer.json path.
    """
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.WordLevel(vocab=tiny_vocab(vocab_size), unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.add_special_tokens([AddedToken(t, special=True) for t in _SPECIAL_TOKENS])
    tokenizer_path = path / "tokenizer.json"
    tokenizer.save(str(tokenizer_path))
    tokenizer_config = {
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "chat_template": TINY_CHAT_TEMPLATE,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    (path / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n")
    return tokenizer_path
