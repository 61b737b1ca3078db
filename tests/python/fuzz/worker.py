"""The fuzzer's worker process: loads each case it is sent and reports how the engine answered.

Protocol (stdin/stdout, one case at a time): the parent writes one JSON line {"target": ..., "dir": ...}
naming a case directory it prepared; the worker answers one JSON line {"outcome": "ok" | "typed" |
"untyped", "detail": ...}. "typed" is a ModelLoadError or ValueError whose message is valid, NUL-free text;
anything else raised is "untyped". A crash or a hang shows as the worker dying or not answering (the parent
restarts it): every case runs in this separate process, so a crash is a finding, not a lost run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def run_case(target: str, case_dir: Path) -> tuple[str, str]:
    import pylookahead

    try:
        if target == "pool":
            session = pylookahead.Session(case_dir / "model")
            session.load_pool(str(case_dir / "pool.bin"))
            lookahead = pylookahead.LookaheadConfig(window_size=0, ngram_size=3, verification_set_size=2)
            session.generate([1, 5, 6], max_new_tokens=4, lookahead=lookahead, keep_pool=True)
        else:
            model = pylookahead.Model(case_dir / "model.gguf" if target == "gguf" else case_dir, dtype="float32")
            pylookahead.Session(model).generate([1, 5, 6], max_new_tokens=2)
    except (pylookahead.ModelLoadError, ValueError) as e:
        message = str(e)
        if "\x00" in message:
            return "untyped", f"{type(e).__name__} with a NUL: {message!r}"
        try:
            message.encode("utf-8")
        except UnicodeEncodeError:
            return "untyped", f"{type(e).__name__} that is not valid text: {message!r}"[:500]
        return "typed", f"{type(e).__name__}: {message[:200]}"
    except BaseException as e:  # noqa: BLE001 - every other outcome is a finding
        return "untyped", f"{type(e).__name__}: {e!r}"[:500]
    return "ok", ""


def main() -> int:
    import torch

    torch.set_num_threads(1)
    for line in sys.stdin:
        request = json.loads(line)
        outcome, detail = run_case(request["target"], Path(request["dir"]))
        sys.stdout.write(json.dumps({"outcome": outcome, "detail": detail}) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
