"""Cost of the SGD data side on the hot path: goal draws, world calls and realize(), per call on one core.

Run: .venv/bin/python bench/bench_pack.py  (prints microseconds per call and the share of a 2,000
dialogues/s budget, i.e. 500 µs per dialogue, that a typical dialogue's draws, calls and turns take).
"""

from __future__ import annotations

import random
import time

from dialogsim.engine.events import Act
from dialogsim.scenarios.sgd.pack import load_pack
from dialogsim.scenarios.sgd.scenario_set import SgdScenarioSet
from dialogsim.scenarios.sgd.world import SgdWorld


def _best(fn, n: int, rounds: int = 5) -> float:
    """Best per-call CPU time in microseconds over a few rounds of n calls (CPU time of this process, so a
    busy machine inflates it less than wall time)."""
    best = float("inf")
    for _ in range(rounds):
        t0 = time.process_time()
        fn(n)
        best = min(best, (time.process_time() - t0) / n * 1e6)
    return best


def main() -> None:
    t0 = time.perf_counter()
    pack = load_pack()
    load_ms = (time.perf_counter() - t0) * 1e3
    sset = SgdScenarioSet(pack)
    rng = random.Random(0)
    scenarios = [sset.draw(i, 0)[0] for i in range(2000)]
    world = SgdWorld(pack, random.Random(1))
    calls = []
    for sc in scenarios:
        for sg in sc.data["goal"]["subgoals"]:
            params = dict(sg["constraints"])
            for slot in pack.service(sg["service"]).intents[sg["intent"]].required_slots:
                params.setdefault(slot, (pack.value_pool(sg["service"], slot) or ["x"])[0])
            calls.append((sg["service"], sg["intent"], params))
    turns = []
    for sc in scenarios[:500]:
        for sg in sc.data["goal"]["subgoals"]:
            svc = sg["service"]
            user = [Act(act="INFORM_INTENT", slot="intent", values=[sg["intent"]])] + [
                Act(act="INFORM", slot=k, values=[pack.spoken(svc, k, v, rng)]) for k, v in sg["constraints"].items()][:3]
            system = [Act(act="REQUEST", slot=s) for s in list(pack.service(svc).intents[sg["intent"]].required_slots)[:2]]
            turns += [("USER", svc, user), ("SYSTEM", svc, system)]
    realize = pack.realizer.realize
    for speaker, svc, acts in turns:  # warm the plan cache, as a long run would
        realize(speaker, svc, acts, rng)

    def draws(n):
        for i in range(n):
            sset.draw(i, 1)

    def world_calls(n):
        for i in range(n):
            world.call(*calls[i % len(calls)])

    def realizes(n):
        for i in range(n):
            speaker, svc, acts = turns[i % len(turns)]
            realize(speaker, svc, acts, rng)

    d, w, r = _best(draws, 2000), _best(world_calls, 20000), _best(realizes, 20000)
    print(f"pack load            {load_ms:8.1f} ms (once per process)")
    print(f"goal draw            {d:8.2f} µs/draw")
    print(f"world.call           {w:8.2f} µs/call")
    print(f"realize              {r:8.2f} µs/turn")
    per_dialogue = d + 3 * w + 20 * r  # a typical dialogue: one draw, ~3 calls, ~20 realized turns
    print(f"typical dialogue     {per_dialogue:8.1f} µs = {per_dialogue / 500:.1%} of the 500 µs budget of 2,000 dialogues/s")


if __name__ == "__main__":
    main()
