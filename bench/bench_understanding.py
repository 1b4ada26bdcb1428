"""Act recovery of the user's understanding step (users/understanding.py) on real SGD system turns.

Run: .venv/bin/python bench/bench_understanding.py [PACK_DIR] DIALOGUE_FILE...  (prints precision and
recall of (act, slot, value) triples, per act too, and the time per turn). With PACK_DIR a pack built
without the given files, the figures are on held-out dialogues.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from dialogsim.scenarios.sgd.pack import is_pack_dir, load_pack
from dialogsim.users.understanding import Understanding, measure


def main(argv: list[str]) -> None:
    pack = load_pack(argv[0]) if argv and is_pack_dir(argv[0]) else load_pack()
    files = argv[1:] if argv and is_pack_dir(argv[0]) else argv
    dialogues = [d for f in files for d in json.loads(Path(f).read_text())]
    u = Understanding(pack)
    t0 = time.perf_counter()
    got = measure(u, dialogues, pack.services)
    dt = time.perf_counter() - t0
    print(f"pack {pack.id}: {len(dialogues)} dialogues, {got['turns']} system frames, "
          f"{got['exact']} read exactly ({got['exact'] / max(1, got['turns']):.3f})")
    print(f"precision {got['precision']:.4f}  recall {got['recall']:.4f}  (tp {got['tp']}, fp {got['fp']}, "
          f"fn {got['fn']})  {dt / max(1, got['turns']) * 1e3:.2f} ms per turn")
    for act, (tp, fp, fn) in sorted(got["by_act"].items()):
        print(f"  {act:15s} precision {tp / max(1, tp + fp):.3f}  recall {tp / max(1, tp + fn):.3f}  "
              f"(tp {tp}, fp {fp}, fn {fn})")


if __name__ == "__main__":
    main(sys.argv[1:])
