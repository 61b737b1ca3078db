"""Inputs for the loader fuzzer: valid seed files of a tiny checkpoint and a pool, and hypothesis strategies
that mutate them (byte flips, truncation, splices of boundary values, JSON edits)."""

from __future__ import annotations

import json
import struct
from typing import Any

from hypothesis import strategies as st

TARGETS = ("safetensors", "config", "index", "pool")

# Values that break parsers: boundaries of the integer widths, wrong types, odd strings.
_ODD_JSON: list[Any] = [
    0,
    -1,
    1,
    2**31 - 1,
    2**31,
    2**32,
    2**32 + 1,
    2**53 + 1,
    2**63,
    2**64,
    -(2**63),
    1e308,
    -0.0,
    0.5,
    "",
    "\u0000",
    "\xff",
    "a" * 300,
    None,
    True,
    [],
    {},
    [1, 2],
    {"a": 1},
]
_ODD_U32 = [0, 1, 2, 0xFF, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF]


@st.composite
def byte_mutation(draw: st.DrawFn, data: bytes) -> bytes:
    """Up to 4 edits of `data`: flip a byte, truncate, insert bytes, or overwrite 4 bytes with a boundary u32."""
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "truncate", "insert", "u32", "u64"]))
        at = draw(st.integers(0, max(0, len(out) - 1)))
        if kind == "flip" and out:
            out[at] ^= draw(st.integers(1, 255))
        elif kind == "truncate":
            del out[at:]
        elif kind == "insert":
            out[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif kind == "u32" and len(out) >= at + 4:
            out[at : at + 4] = struct.pack("<I", draw(st.sampled_from(_ODD_U32)))
        elif kind == "u64" and len(out) >= at + 8:
            out[at : at + 8] = struct.pack("<Q", draw(st.sampled_from([0, 7, 2**31, 2**63, 2**64 - 1])))
    return bytes(out)


def _paths(obj: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key path of a JSON value (dict keys and list indices)."""
    out = [prefix] if prefix else []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _paths(v, prefix + (i,))
    return out


@st.composite
def json_mutation(draw: st.DrawFn, obj: Any) -> bytes:
    """Up to 3 edits of a JSON document: replace a value with an odd one, delete a key, rename a key; or bytes."""
    if draw(st.integers(0, 4)) == 0:
        return draw(byte_mutation(json.dumps(obj).encode()))
    doc = json.loads(json.dumps(obj))
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(doc)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        kind = draw(st.sampled_from(["value", "delete", "rename"]))
        if kind == "value":
            parent[path[-1]] = json.loads(json.dumps(draw(st.sampled_from(_ODD_JSON))))  # a copy: never shared
        elif kind == "delete" and isinstance(parent, dict):
            del parent[path[-1]]
        elif kind == "rename" and isinstance(parent, dict):
            parent[path[-1] + draw(st.sampled_from(["\u0000", "x", "\xff", ".weight"]))] = parent.pop(path[-1])
    return json.dumps(doc).encode()


def safetensors_parts(data: bytes) -> tuple[dict[str, Any], bytes]:
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8 : 8 + n]), data[8 + n :]


@st.composite
def safetensors_mutation(draw: st.DrawFn, data: bytes) -> bytes:
    """A mutated header (as JSON), a mutated length prefix, or mutated bytes anywhere."""
    header, body = safetensors_parts(data)
    kind = draw(st.sampled_from(["header", "bytes", "body"]))
    if kind == "header":
        new_header = draw(json_mutation(header))
        return struct.pack("<Q", len(new_header)) + new_header + body
    if kind == "body":
        cut = draw(st.integers(0, len(body)))
        return data[: 8 + len(data) - 8 - len(body)] + body[:cut]
    return draw(byte_mutation(data))
