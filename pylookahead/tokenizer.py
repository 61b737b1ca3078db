"""Text <-> token ids for a checkpoint directory, without `transformers`.

`TextTokenizer` wraps the Hugging Face `tokenizers` library over the checkpoint's tokenizer.json and
renders chat templates with jinja2 the way `transformers` does (sandboxed environment, `trim_blocks` and
`lstrip_blocks`, `raise_exception`, the special tokens as variables), so prompts built here produce the
same token ids as `AutoTokenizer.apply_chat_template(..., tokenize=True)`.

Streaming text (pieces that never split a character, stop strings) is `textstream.TextStream`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

__all__ = ["TextTokenizer", "read_eos_token_ids"]

Message = Mapping[str, Any]  # {"role": ..., "content": ...}, plus whatever the template reads

_SPECIAL_TOKEN_KEYS = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token")


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not valid JSON: {error}") from error
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object")
    return data


def _as_id_tuple(value: Any, source: Path) -> tuple[int, ...]:
    if value is None:
        return ()
    values = [value] if isinstance(value, int) else value
    if not isinstance(values, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise ValueError(f"{source}: eos_token_id must be an int or a list of ints (got {value!r})")
    return tuple(dict.fromkeys(values))  # drop duplicates, keep order


def read_eos_token_ids(model_dir: str | os.PathLike[str]) -> tuple[int, ...]:
    """End-of-sequence ids: generation_config.json's `eos_token_id`, else config.json's (int or list)."""
    model_dir = Path(model_dir)
    for name in ("generation_config.json", "config.json"):
        path = model_dir / name
        if path.is_file():
            ids = _as_id_tuple(_read_json(path).get("eos_token_id"), path)
            if ids:
                return ids
    return ()


def _token_content(value: Any) -> str | None:
    # tokenizer_config.json stores special tokens as plain strings or as serialized AddedToken dicts.
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def _read_chat_template(model_dir: Path, tokenizer_config: Mapping[str, Any]) -> str | None:
    # transformers >= 4.43 writes chat_template.jinja; older checkpoints keep it in tokenizer_config.json,
    # either as one string or as a list of named templates.
    jinja_path = model_dir / "chat_template.jinja"
    if jinja_path.is_file():
        return jinja_path.read_text(encoding="utf-8")
    template = tokenizer_config.get("chat_template")
    if isinstance(template, list):
        named = {item.get("name"): item.get("template") for item in template if isinstance(item, Mapping)}
        template = named.get("default")
    return template if isinstance(template, str) and template else None


def _compile_chat_template(source: str) -> Any:
    """Compile a chat template in an environment equivalent to transformers' (for the features templates use)."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
               separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:  # fmt: skip
        # Jinja's own tojson escapes HTML characters, which would change the prompt.
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format: str) -> str:
        return datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(source)


class TextTokenizer:
    """Encode/decode text for one checkpoint directory; see the module docstring.

    Thread-compatible: the underlying `tokenizers.Tokenizer` is used read-only.
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        *,
        eos_token_ids: Sequence[int] = (),
        chat_template: str | None = None,
        special_tokens: Mapping[str, str] | None = None,
    ) -> None:
        self._tokenizer = tokenizer
        self._eos_token_ids = tuple(int(i) for i in eos_token_ids)
        self._chat_template_source = chat_template
        self._chat_template: Any = None  # compiled lazily: most uses never render a chat
        self._special_tokens = dict(special_tokens or {})

    @classmethod
    def from_pretrained(cls, model_dir: str | os.PathLike[str]) -> TextTokenizer:
        """Load tokenizer.json, the eos ids, the chat template and the special tokens from `model_dir`."""
        model_dir = Path(model_dir)
        tokenizer_path = model_dir / "tokenizer.json"
        if not tokenizer_path.is_file():
            raise FileNotFoundError(f"no tokenizer.json in {model_dir}")
        try:
            tokenizer = Tokenizer.from_file(str(tokenizer_path))
        except Exception as error:  # tokenizers raises a bare Exception on malformed files
            raise ValueError(f"cannot load {tokenizer_path}: {error}") from error

        config_path = model_dir / "tokenizer_config.json"
        tokenizer_config = _read_json(config_path) if config_path.is_file() else {}
        special_tokens = {
            key: content for key in _SPECIAL_TOKEN_KEYS if (content := _token_content(tokenizer_config.get(key)))
        }
        return cls(
            tokenizer,
            eos_token_ids=read_eos_token_ids(model_dir),
            chat_template=_read_chat_template(model_dir, tokenizer_config),
            special_tokens=special_tokens,
        )

    @classmethod
    def from_gguf(cls, gguf_path: str | os.PathLike[str], *, eos_token_ids: Sequence[int] = ()) -> TextTokenizer:
        """The tokenizer and chat template a GGUF file carries, converted by `transformers` (needs it installed).

        `eos_token_ids`: the ids that end generation (the engine reads them from the file's metadata).
        """
        gguf_path = Path(gguf_path)
        try:
            from transformers import AutoTokenizer
        except ImportError as error:  # pragma: no cover - transformers is a dependency of the model tools
            raise ImportError(f"reading the tokenizer of a GGUF file needs transformers ({error})") from error
        try:
            hf = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
        except Exception as error:  # transformers raises assorted types on a malformed file
            raise ValueError(f"cannot read the tokenizer of GGUF file {gguf_path}: {error}") from error
        special_tokens = {key: str(value) for key in _SPECIAL_TOKEN_KEYS if (value := getattr(hf, key, None))}
        return cls(
            Tokenizer.from_str(hf.backend_tokenizer.to_str()),
            eos_token_ids=eos_token_ids,
            chat_template=hf.chat_template if isinstance(hf.chat_template, str) else None,
            special_tokens=special_tokens,
        )

    @property
    def backend(self) -> Tokenizer:
        """The wrapped `tokenizers.Tokenizer`."""
        return self._tokenizer

    @property
    def vocab_size(self) -> int:
        """Number of ids the tokenizer knows, added tokens included (may be < the model's vocab_size)."""
        return self._tokenizer.get_vocab_size(with_added_tokens=True)

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        """Ids that end generation (generation_config.json, else config.json); may be empty."""
        return self._eos_token_ids

    @property
    def special_tokens(self) -> dict[str, str]:
        """bos_token / eos_token / ... strings from tokenizer_config.json, as chat templates see them."""
        return dict(self._special_tokens)

    @property
    def chat_template(self) -> str | None:
        return self._chat_template_source

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of `text`. `add_special_tokens` applies the tokenizer's post-processor (e.g. a BOS)."""
        return self._tokenizer.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        return self._tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def token_to_id(self, token: str) -> int | None:
        return self._tokenizer.token_to_id(token)

    def apply_chat_template(
        self, messages: Sequence[Message], add_generation_prompt: bool = True, **template_kwargs: Any
    ) -> str:
        """Render `messages` with the checkpoint's chat template; returns the prompt string.

        Encode the result with `add_special_tokens=False` (or use `encode_chat`): the template already
        contains every special token, as in transformers. Extra keyword arguments become template variables.
        """
        if self._chat_template_source is None:
            raise ValueError(
                "this checkpoint has no chat template (neither chat_template.jinja nor tokenizer_config.json has one)"
            )
        if not messages:
            raise ValueError("cannot apply a chat template to an empty conversation")
        if self._chat_template is None:
            self._chat_template = _compile_chat_template(self._chat_template_source)
        # Like transformers: keys whose value is None are dropped, and explicit kwargs override special tokens.
        plain_messages = [{k: v for k, v in dict(m).items() if v is not None} for m in messages]
        variables = {**self._special_tokens, **template_kwargs}
        return self._chat_template.render(
            messages=plain_messages, add_generation_prompt=add_generation_prompt, tools=None, documents=None,
            **variables,
        )  # fmt: skip

    def encode_chat(self, messages: Sequence[Message], add_generation_prompt: bool = True) -> list[int]:
        """`apply_chat_template` then `encode(..., add_special_tokens=False)`."""
        return self.encode(self.apply_chat_template(messages, add_generation_prompt), add_special_tokens=False)
