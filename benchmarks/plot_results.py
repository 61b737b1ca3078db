"""Plots (PNG) and Markdown tables from benchmark JSON files written by `pylookahead bench` / benchmarks/sweep.py.

* ``speedup.png``: speedup over the engine's greedy decoding (tok/s, ratio of medians over prompts, of totals
  with ``--metric total``, or the median over prompts of the per-prompt ratio with ``--metric paired_median``) per
  method, grouped by model / dtype / dataset; one bar group per ``"kind": "bench"``
  file;
* ``scaling-<run>.png`` per sweep file: compression ratio (tokens per forward pass) against tokens per step
  ``(W + G) * (N - 1)`` on a log x-axis, one line per N (the paper's scaling law), with a least-squares fit of
  compression against log2(tokens per step);
* ``latency-<run>.png`` per sweep file: median milliseconds per step against tokens per step (greedy at 1).

``--markdown`` also prints one table per file for docs/benchmarks.md. Example::

    python benchmarks/plot_results.py benchmarks/results/*.json --out-dir docs/img --markdown
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any


def load_results(paths: list[Path]) -> list[tuple[Path, dict[str, Any]]]:
    results = []
    for path in paths:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as error:
            raise SystemExit(f"plot_results: cannot read {path}: {error}") from error
        if not isinstance(data, dict) or data.get("schema_version") != 1 or "methods" not in data:
            print(f"plot_results: skipping {path}: not a schema_version 1 benchmark file", file=sys.stderr)
            continue
        results.append((path, data))
    return results


def run_label(data: dict[str, Any]) -> str:
    s, d = data["settings"], data["dataset"]
    return f"{s['model']}\n{s['dtype']} {d['name']}"


def run_slug(path: Path, data: dict[str, Any]) -> str:
    s, d = data["settings"], data["dataset"]
    return f"{s['model']}-{s['dtype']}-{d['name']}"


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def paired_median(data: dict[str, Any], name: str) -> float | None:
    """The median over prompts of `name`'s tok/s over greedy's on the same prompt: the file's own figure, or,
    for files written before bench reported it, computed from the per-prompt results."""
    value = data["methods"][name]["speedup_vs_greedy"].get("paired_median")
    if value is not None:
        return value
    ratios = []
    for p in data.get("prompts", []):
        r, g = p["results"].get(name), p["results"].get("greedy")
        if r and g and r.get("tok_s") and g.get("tok_s"):
            ratios.append(r["tok_s"] / g["tok_s"])
    return statistics.median(ratios) if ratios else None


def plot_speedup(runs: list[tuple[Path, dict[str, Any]]], out: Path, metric: str) -> Path | None:
    """Grouped bars: one group per bench run, one bar per non-greedy method."""
    runs = [(p, r) for p, r in runs if r.get("kind") == "bench"]
    if not runs:
        return None
    plt = _plt()
    methods: list[str] = []
    for _, r in runs:
        for name in r["methods"]:
            if name != "greedy" and name not in methods:
                methods.append(name)
    width = 0.8 / max(1, len(methods))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(runs) * max(1, len(methods)) * 0.45 + 2), 4.5))
    cmap = plt.get_cmap("tab10")
    for j, name in enumerate(methods):
        xs, ys = [], []
        for i, (_, r) in enumerate(runs):
            m = r["methods"].get(name)
            value = m and (paired_median(r, name) if metric == "paired_median" else m["speedup_vs_greedy"].get(metric))
            if value is not None:
                xs.append(i - 0.4 + width * (j + 0.5))
                ys.append(value)
        bars = ax.bar(xs, ys, width=width, label=name, color=cmap(j % 10))
        for bar, y in zip(bars, ys):
            ax.annotate(f"{y:.2f}", (bar.get_x() + bar.get_width() / 2, y), ha="center", va="bottom", fontsize=7)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xticks(range(len(runs)))
    ax.set_xticklabels([run_label(r) for _, r in runs], fontsize=8)
    what = {"median": "ratio of medians", "total": "ratio of totals", "paired_median": "median of per-prompt ratios"}
    ax.set_ylabel(f"speedup over engine greedy (tok/s, {what[metric]})")
    ax.set_title("Decoding speed relative to the engine's greedy decoding")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=150)
    plt.close(fig)
    return out


def _lookahead_points(data: dict[str, Any]) -> list[dict[str, Any]]:
    points = []
    for name, m in data["methods"].items():
        la = m.get("lookahead")
        if isinstance(la, dict) and m.get("tokens_per_step") and m.get("compression") is not None:
            points.append({"name": name, "W": la["window_size"], "N": la["ngram_size"],
                           "G": la["verification_set_size"], "tokens_per_step": m["tokens_per_step"],
                           "compression": m["compression"], "step_ms": m.get("step_ms_median"),
                           "speedup": m["speedup_vs_greedy"].get("median")})  # fmt: skip
    return sorted(points, key=lambda p: (p["N"], p["tokens_per_step"]))


def _log_fit(points: list[dict[str, Any]]) -> tuple[float, float] | None:
    """Least squares compression = a + b * log2(tokens_per_step)."""
    xs = [math.log2(p["tokens_per_step"]) for p in points]
    ys = [p["compression"] for p in points]
    if len(set(xs)) < 2:
        return None
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - b * mx, b


def plot_sweep(path: Path, data: dict[str, Any], out_dir: Path) -> list[Path]:
    every = _lookahead_points(data)
    if not every:
        return []
    # The scaling law is about the window: verification-only points (W = 0) are drawn apart, unfitted.
    points = [p for p in every if p["W"] > 0]
    verify_only = [p for p in every if p["W"] == 0]
    plt = _plt()
    slug = run_slug(path, data)
    title = f"{data['settings']['model']} {data['settings']['dtype']}, {data['dataset']['name']} " \
            f"x {data['dataset']['prompts']}, {data['settings']['max_new_tokens']} tokens"  # fmt: skip
    cmap = plt.get_cmap("viridis")
    ns = sorted({p["N"] for p in points})
    written = []

    # (b) compression vs tokens per step
    fig, ax = plt.subplots(figsize=(6.4, 4.5))
    for k, n in enumerate(ns):
        pts = [p for p in points if p["N"] == n]
        color = cmap(k / max(1, len(ns) - 1))
        ax.plot([p["tokens_per_step"] for p in pts], [p["compression"] for p in pts], "o-", color=color,
                label=f"N={n}")  # fmt: skip
        for p in pts:
            ax.annotate(f"W{p['W']}G{p['G']}", (p["tokens_per_step"], p["compression"]), fontsize=6,
                        xytext=(3, 3), textcoords="offset points")  # fmt: skip
    if verify_only:
        ax.plot([p["tokens_per_step"] for p in verify_only], [p["compression"] for p in verify_only], "x",
                color="crimson", label="W=0 (verification only)")  # fmt: skip
        for p in verify_only:
            ax.annotate(f"N{p['N']}G{p['G']}", (p["tokens_per_step"], p["compression"]), fontsize=6,
                        xytext=(3, -8), textcoords="offset points")  # fmt: skip
    fit = _log_fit(points) if points else None
    if fit is not None:
        a, b = fit
        xs = sorted({p["tokens_per_step"] for p in points})
        ax.plot(xs, [a + b * math.log2(x) for x in xs], "--", color="gray",
                label=f"fit: {a:.2f} + {b:.2f}·log2(tokens/step)")  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_xlabel("tokens per step (W + G)(N - 1), or 1 + G(N - 1) for W = 0; log scale")
    ax.set_ylabel("compression ratio (tokens per forward pass)")
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out = out_dir / f"scaling-{slug}.png"
    fig.savefig(out, dpi=150)
    plt.close(fig)
    written.append(out)

    # (c) per-step latency vs tokens per step
    fig, ax = plt.subplots(figsize=(6.4, 4.5))
    greedy = data["methods"].get("greedy", {})
    if greedy.get("step_ms_median") is not None:
        ax.plot([1], [greedy["step_ms_median"]], "s", color="black", label="greedy (1 token)")
    for k, n in enumerate(ns):
        pts = [p for p in points if p["N"] == n and p["step_ms"] is not None]
        color = cmap(k / max(1, len(ns) - 1))
        ax.plot([p["tokens_per_step"] for p in pts], [p["step_ms"] for p in pts], "o", color=color,
                label=f"N={n}")  # fmt: skip
    vo = [p for p in verify_only if p["step_ms"] is not None]
    if vo:
        ax.plot([p["tokens_per_step"] for p in vo], [p["step_ms"] for p in vo], "x", color="crimson",
                label="W=0 (verification only; a CPU runs only the candidates the pool has)")  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_xlabel("tokens per step (W + G)(N - 1), or 1 + G(N - 1) for W = 0; log scale")
    ax.set_ylabel("median time per step (ms)")
    ax.set_ylim(bottom=0)
    ax.set_title(title + f"\n{data['machine'].get('cpu_model')}, {data['machine'].get('torch_threads')} threads",
                 fontsize=9)  # fmt: skip
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out = out_dir / f"latency-{slug}.png"
    fig.savefig(out, dpi=150)
    plt.close(fig)
    written.append(out)
    return written


def _f(value: Any, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def markdown_table(path: Path, data: dict[str, Any]) -> str:
    s, d, mach = data["settings"], data["dataset"], data["machine"]
    lines = [
        f"**{s['model']}, {s['dtype']}, {d['name']}** ({d['prompts']} prompts, up to {s['max_new_tokens']} new "
        f"tokens, {mach.get('torch_threads')} threads, {mach.get('cpu_model')}; `{path.name}`)",
        "",
        "| method | tok/s (median) | tok/s (total) | speedup (median) | speedup (total) | speedup (paired) | "
        "tokens/step | ms/step (median) | = greedy |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, m in data["methods"].items():
        sp = m["speedup_vs_greedy"]
        lines.append(
            f"| {name} | {_f(m['tok_s_median'], '.2f')} | {_f(m['tok_s_total'], '.2f')} | "
            f"{_f(sp['median'], '.2f')}x | {_f(sp['total'], '.2f')}x | {_f(paired_median(data, name), '.2f')}x | "
            f"{_f(m['compression'], '.2f')} | "
            f"{_f(m['step_ms_median'], '.1f')} | {m['equal_to_greedy']}/{m['prompts']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/plot_results.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", type=Path, help="JSON results (default: benchmarks/results/*.json)")
    parser.add_argument("--out-dir", type=Path, default=Path("benchmarks/results/plots"))
    parser.add_argument(
        "--metric",
        choices=["median", "total", "paired_median"],
        default="median",
        help="speedup.png: ratio of median tok/s, of total tok/s, or median of per-prompt ratios",
    )
    parser.add_argument("--markdown", action="store_true", help="also print Markdown tables")
    args = parser.parse_args(argv)
    files = args.files or sorted(Path("benchmarks/results").glob("*.json"))
    runs = load_results(files)
    if not runs:
        print("plot_results: no benchmark JSON files", file=sys.stderr)
        return 1
    args.out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    speedup = plot_speedup(runs, args.out_dir / "speedup.png", args.metric)
    if speedup is not None:
        written.append(speedup)
    for path, data in runs:
        if data.get("kind") == "sweep":
            written.extend(plot_sweep(path, data, args.out_dir))
    for out in written:
        print(f"wrote {out}", file=sys.stderr)
    if args.markdown:
        for path, data in runs:
            print(markdown_table(path, data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
