"""DialogueEnv throughput, in environment steps per second on one core, with logging off and on.

Records the actions of the rule-based schema policy over some episodes (rl/policies.py), then replays them
on fresh environments with the same seed, timing ``reset`` and ``step`` only: the replayed episodes must end
as the recorded ones did (seeding makes episodes reproducible), so the policy's own cost is left out of the
figure. Logging on: a run directory in a temporary folder, durability "batch". Target: >= 3,000 steps/s with
logging off.

    python bench/bench_env.py [--scenarios 'sgd:#Restaurants_1'] [--episodes 300] [--rounds 3]
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import time
from pathlib import Path

from dialogsim.engine.oplog import configure_logging
from dialogsim.rl.env import DialogueEnv
from dialogsim.rl.policies import SchemaPolicy

TARGET = 3_000


def record(scenarios: str, episodes: int, seed: int) -> tuple[list[list[int]], list[str], float]:
    """The rule policy's actions and outcomes per episode, and its own CPU seconds per step."""
    env = DialogueEnv(scenarios)
    policy = SchemaPolicy(env.actions, env.pack, seed=seed)
    actions: list[list[int]] = []
    outcomes: list[str] = []
    spent = 0.0
    for k in range(episodes):
        obs, info = env.reset(seed=seed) if k == 0 else env.reset()
        policy.reset(info)
        taken: list[int] = []
        while True:
            start = time.process_time()
            action = policy(obs, info)
            spent += time.process_time() - start
            taken.append(action)
            obs, _, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                break
        actions.append(taken)
        outcomes.append(info["outcome"])
    env.close()
    return actions, outcomes, spent / sum(map(len, actions))


def replay(scenarios: str, actions: list[list[int]], outcomes: list[str], seed: int,
           log_dir: Path | None) -> tuple[float, float]:
    """Wall and CPU seconds of the episodes replayed (reset and steps; building and closing the env excluded)."""
    env = DialogueEnv(scenarios, log_dir=str(log_dir) if log_dir else None)
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    for k, taken in enumerate(actions):
        if k == 0:
            env.reset(seed=seed)
        else:
            env.reset()
        for action in taken:
            _, _, terminated, truncated, info = env.step(action)
        if info["outcome"] != outcomes[k]:
            raise SystemExit(f"episode {k} ended {info['outcome']!r}, recorded {outcomes[k]!r}: not reproducible")
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    env.close()
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", default="sgd:#Restaurants_1", help="scenario spec (default sgd:#Restaurants_1)")
    parser.add_argument("--episodes", type=int, default=300, help="episodes per round (default 300)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; the best is reported (default 3)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    configure_logging("console", "warning")
    actions, outcomes, policy_cpu = record(args.scenarios, args.episodes, args.seed)
    steps = sum(map(len, actions))
    success = outcomes.count("success") / len(outcomes)
    inf = (float("inf"), float("inf"))
    best = {"off": inf, "on": inf}
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.rounds):
            best["off"] = min(best["off"], replay(args.scenarios, actions, outcomes, args.seed, None))
            best["on"] = min(best["on"], replay(args.scenarios, actions, outcomes, args.seed, Path(tmp) / f"log{k}"))
    print(f"{args.scenarios}: {len(actions)} episodes of the rule policy (success {success:.3f}), {steps} steps, "
          f"{steps / len(actions):.1f} per episode; the policy itself: {policy_cpu * 1e6:.0f} µs CPU per step")
    print("best of the rounds; wall time, and CPU time of this process (steadier on a busy machine)")
    for label, key in (("logging off", "off"), ("logging on ", "on")):
        wall, cpu = best[key]
        rate, cpu_rate = steps / wall, steps / cpu
        print(f"{label}: wall {wall:6.3f} s {rate:7,.0f} steps/s ({rate / TARGET:4.2f}x the {TARGET:,} target); "
              f"CPU {cpu:6.3f} s {cpu_rate:7,.0f} steps/s ({cpu_rate / TARGET:4.2f}x)")
    off, on = best["off"][1], best["on"][1]
    print(f"logging costs {100 * (on - off) / off:.0f}% more CPU per step")


if __name__ == "__main__":
    main()
