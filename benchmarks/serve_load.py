"""Load test of `pylookahead serve` on loopback beside the library's own calls, in one process.

The server (`pylookahead.server.create_app`, uvicorn on 127.0.0.1, `--sessions` sessions over one Model) is driven
by 1, 2, ... concurrent clients (`--clients`), each streaming MT-Bench first-turn chat prompts (spread over the set)
one after another with httpx, greedy (temperature 0), for `lookahead` "greedy" and "auto". Per request it records
the time to first token (request sent to the first content event), the inter-token latency (the gaps between
content events, each divided by the tokens that event carried; the token counts come from the stream's usage
chunk and the library's own run of the same prompt), and the tokens. Reported: p50 / p99 of both, throughput
(tokens over wall time of the whole level), and at 1 client the server's decode time per token over the
library's (`Session.generate` on the same prompts, `stats.decode_s / (new_tokens - 1)`).

With `--llama-cpp` the same clients also drive llama-cpp-python's OpenAI server (`python -m llama_cpp.server`, a
subprocess on loopback with `--threads` threads, requests served one at a time as that server does) on the
model's GGUF file (`pylookahead pull --gguf`), greedy; needs `pip install "llama-cpp-python[server]"`.
`--engine-gguf` makes pylookahead load that same GGUF too (its blocks kept as they are): both then run the same
weights.

    python benchmarks/serve_load.py --model smollm2-135m-instruct --dtype bfloat16 --threads 1 --sessions 2 \\
        --clients 1,2,4,8 --prompts 8 --llama-cpp --out benchmarks/results/serve/smollm2-135m-instruct-bf16.json
"""

from __future__ import annotations

import argparse
import json
import shlex
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from statistics import median
from typing import Any


def _percentile(values: list[float], q: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(round(q * (len(v) - 1))))] if v else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--sessions", type=int, default=2)
    parser.add_argument("--clients", default="1,2,4")
    parser.add_argument("--prompts", type=int, default=8, help="MT-Bench first turns, spread over the set")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--llama-cpp", action="store_true", help="also load-test llama-cpp-python's server")
    parser.add_argument("--engine-gguf", action="store_true", help="pylookahead serves the GGUF file too")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    import httpx
    import torch
    import uvicorn

    from pylookahead import Model, Session
    from pylookahead.server import ServerOptions, create_app
    from pylookahead.tools import bench, datasets
    from pylookahead.tools.models import pull, pull_gguf

    torch.set_num_threads(args.threads)
    gguf = pull_gguf(args.model, progress=False) if args.llama_cpp or args.engine_gguf else None
    weights = gguf if args.engine_gguf else pull(args.model, progress=False)
    model = Model(weights, dtype=args.dtype, num_threads=args.threads)
    questions = datasets.load_mtbench()
    step = max(1, len(questions) // args.prompts)
    messages = [datasets.mtbench_turn1_messages(q) for q in questions[::step][: args.prompts]]
    n = args.max_new_tokens

    # The library's own runs: reference tokens and decode time per token.
    lib = Session(model)
    lib.calibrate()
    library: dict[str, list[dict[str, Any]]] = {}
    for mode in ("greedy", "auto"):
        runs = []
        for m in messages:
            ids = model.tokenizer.encode_chat(m, add_generation_prompt=True)
            out = lib.generate(ids, max_new_tokens=n, lookahead=None if mode == "greedy" else "auto")
            runs.append(
                {
                    "tokens": len(out.token_ids),
                    "decode_s_per_token": out.stats.decode_s / max(1, out.stats.new_tokens - 1),
                }
            )
        library[mode] = runs

    app = create_app(model, ServerOptions(model_name=args.model, sessions=args.sessions, max_queue=64))
    for slot in app.state.pool._slots:  # the same step-cost table as the library's session: no calibration inside
        slot.session.calibrate(lib.step_costs())
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    url = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}/v1/chat/completions"

    def one(client: httpx.Client, url: str, m: list[dict[str, str]], mode: str) -> dict[str, Any]:
        body = {"model": args.model, "messages": m, "max_tokens": n, "temperature": 0, "stream": True,
                "stream_options": {"include_usage": True}}  # fmt: skip
        if mode != "llama.cpp":
            body["lookahead"] = mode
        sent = time.perf_counter()
        times, texts, usage = [], [], None
        with client.stream("POST", url, json=body) as r:
            r.raise_for_status()
            for line in r.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                event = json.loads(line[6:])
                if event.get("usage"):
                    usage = event["usage"]
                if event.get("choices") and event["choices"][0]["delta"].get("content"):
                    times.append(time.perf_counter())
                    texts.append(event["choices"][0]["delta"]["content"])
        tokens = usage["completion_tokens"] if usage else len(texts)  # llama.cpp: one token per event
        gaps = [b - a for a, b in zip(times, times[1:])]
        # Tokens per event are not sent; spread each gap over the mean tokens per event after the first.
        per_event = (tokens - 1) / max(1, len(gaps))
        return {"ttft_s": times[0] - sent if times else float("nan"), "itl_s": [g / per_event for g in gaps],
                "tokens": tokens, "decode_s_per_token": (times[-1] - times[0]) / max(1, tokens - 1) if times else 0.0}  # fmt: skip

    def run_level(url: str, mode: str, clients: int) -> dict[str, Any]:
        work = [messages[i % len(messages)] for i in range(max(len(messages), clients * 2))]
        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=clients) as ex, httpx.Client(timeout=600) as client:
            results = list(ex.map(lambda m: one(client, url, m, mode), work))
        wall = time.perf_counter() - started
        itl = [x for r in results for x in r["itl_s"]]
        level = {
            "clients": clients, "requests": len(results),
            "ttft_p50_s": _percentile([r["ttft_s"] for r in results], 0.5),
            "ttft_p99_s": _percentile([r["ttft_s"] for r in results], 0.99),
            "itl_p50_s": _percentile(itl, 0.5), "itl_p99_s": _percentile(itl, 0.99),
            "throughput_tok_s": sum(r["tokens"] for r in results) / wall,
            "decode_s_per_token_median": median(r["decode_s_per_token"] for r in results),
            "tokens": [r["tokens"] for r in results],
        }  # fmt: skip
        if clients == 1 and mode in library:
            lib_med = median(r["decode_s_per_token"] for r in library[mode])
            level["library_decode_s_per_token_median"] = lib_med
            level["server_over_library"] = level["decode_s_per_token_median"] / lib_med
            level["tokens_equal_library"] = level["tokens"][: len(messages)] == [r["tokens"] for r in library[mode]]
        print(f"{mode:9s} {clients} clients: TTFT p50 {level['ttft_p50_s'] * 1e3:.0f} ms p99 "
              f"{level['ttft_p99_s'] * 1e3:.0f} ms, ITL p50 {level['itl_p50_s'] * 1e3:.1f} ms p99 "
              f"{level['itl_p99_s'] * 1e3:.1f} ms, {level['throughput_tok_s']:.1f} tok/s"
              + (f", server/library per token {level['server_over_library']:.3f}" if "server_over_library" in level else ""),
              flush=True)  # fmt: skip
        return level

    def warm_up(url: str, mode: str) -> None:  # one untimed request: first-request costs stay out of the levels
        with httpx.Client(timeout=600) as client:
            one(client, url, messages[0], mode)

    client_levels = [int(c) for c in args.clients.split(",")]
    levels: dict[str, Any] = {}
    warm_up(url, "greedy")
    for mode in ("greedy", "auto"):
        for clients in client_levels:
            levels[f"{mode}-{clients}"] = run_level(url, mode, clients)
    server.should_exit = True
    thread.join(30)

    llama_note = "not run (pass --llama-cpp)"
    if args.llama_cpp:
        llama_note = _run_llama_cpp_server(
            args,
            gguf,
            lambda u: warm_up(u, "llama.cpp"),
            lambda u, c: run_level(u, "llama.cpp", c),
            client_levels,
            levels,
        )

    for clients in client_levels:
        g, a = levels[f"greedy-{clients}"], levels[f"auto-{clients}"]
        line = f"{clients} clients: auto / greedy throughput {a['throughput_tok_s'] / g['throughput_tok_s']:.2f}"
        if f"llama.cpp-{clients}" in levels:
            ll = levels[f"llama.cpp-{clients}"]["throughput_tok_s"]
            line += f", auto / llama.cpp {a['throughput_tok_s'] / ll:.2f}, greedy / llama.cpp {g['throughput_tok_s'] / ll:.2f}"
        print(line)

    record = {
        "benchmark": "serve_load",
        "command": "python " + " ".join(shlex.quote(a) for a in [sys.argv[0], *(argv if argv is not None else sys.argv[1:])]),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": bench.machine_info(),
        "model": args.model, "weights": str(weights), "dtype": args.dtype, "threads": args.threads,
        "sessions": args.sessions, "max_new_tokens": n, "prompts": len(messages), "levels": levels,
        "llama_cpp_server": llama_note,
    }  # fmt: skip
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=2) + "\n")
        print(f"wrote {args.out}")
    return 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_llama_cpp_server(
    args: argparse.Namespace, gguf: Path, warm_up, run_level, client_levels: list[int], levels: dict
) -> str:
    """Starts llama-cpp-python's server on `gguf`, runs every client level against it into `levels`
    ("llama.cpp-K"), stops it; returns what ran (version, command) or why it did not."""
    import httpx

    try:
        import llama_cpp
        import llama_cpp.server.app  # noqa: F401  (its [server] extras)
    except ImportError as e:
        return f"not run: llama-cpp-python's server is not installed ({e})"
    port = _free_port()
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1", "--port", str(port),
           "--n_threads", str(args.threads), "--n_threads_batch", str(args.threads), "--n_ctx", "2048", "--interrupt_requests", "False",
           "--verbose", "False"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                return f"not run: llama_cpp.server exited with {proc.returncode}: {proc.stderr.read()[-2000:]}"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                return "not run: llama_cpp.server did not answer within 180 s"
            time.sleep(0.5)
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        warm_up(url)
        for clients in client_levels:
            levels[f"llama.cpp-{clients}"] = run_level(url, clients)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    return f"llama-cpp-python {llama_cpp.__version__}: " + " ".join(shlex.quote(c) for c in cmd)


if __name__ == "__main__":
    raise SystemExit(main())
