"""Success rates of three policies over DialogueEnv's action space: uniformly random actions, random actions
the environment can fill now (``info["action_mask"]``), and the rule-based schema agent as a policy.

    pip install 'dialogsim[rl]'
    python examples/rl_policies.py [--scenarios 'sgd:#Restaurants_1'] [--episodes 200] [--seed 0] [--log-dir DIR]

With ``--log-dir DIR`` each policy's episodes are logged into DIR/<policy> (a run directory: ``dialogsim
project DIR/rule --to sgd`` or ``--to rl`` make datasets of them).
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from pathlib import Path

from dialogsim.rl.env import DialogueEnv
from dialogsim.rl.policies import RandomPolicy, SchemaPolicy


def evaluate(env: DialogueEnv, policy, episodes: int, seed: int) -> dict:
    """Run ``episodes`` episodes from master seed ``seed``: success rate, mean return, steps, outcomes."""
    outcomes: Counter[str] = Counter()
    successes = steps = 0
    total = 0.0
    for k in range(episodes):
        obs, info = env.reset(seed=seed) if k == 0 else env.reset()
        policy.reset(info)
        while True:
            obs, reward, terminated, truncated, info = env.step(policy(obs, info))
            total += reward
            steps += 1
            if terminated or truncated:
                break
        outcomes[info["outcome"]] += 1
        successes += info["success"]
    return {"success": successes / episodes, "return": total / episodes, "steps": steps / episodes,
            "outcomes": dict(outcomes)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", default="sgd:#Restaurants_1", help="scenario spec (default sgd:#Restaurants_1)")
    parser.add_argument("--episodes", type=int, default=200, help="episodes per policy (default 200)")
    parser.add_argument("--seed", type=int, default=0, help="master seed: every policy meets the same users")
    parser.add_argument("--max-turns", type=int, default=50, help="turn limit per episode, both sides (default 50)")
    parser.add_argument("--log-dir", type=Path, help="log each policy's episodes into LOG_DIR/<policy>")
    args = parser.parse_args()
    print(f"{args.scenarios}, {args.episodes} episodes per policy, seed {args.seed}, max turns {args.max_turns}")
    for name in ("random", "random-masked", "rule"):
        log_dir = str(args.log_dir / name) if args.log_dir else None
        env = DialogueEnv(args.scenarios, max_turns=args.max_turns, log_dir=log_dir)
        if name == "rule":
            policy = SchemaPolicy(env.actions, env.pack, seed=args.seed)
        else:
            policy = RandomPolicy(env.action_space.n, seed=args.seed, masked=name == "random-masked")
        start = time.perf_counter()
        result = evaluate(env, policy, args.episodes, args.seed)
        elapsed = time.perf_counter() - start
        env.close()
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(result["outcomes"].items()))
        print(f"{name:14s} success {result['success']:.3f}  mean return {result['return']:7.1f}  "
              f"steps/episode {result['steps']:5.1f}  ({outcomes}; {elapsed:.1f} s)")


if __name__ == "__main__":
    main()
