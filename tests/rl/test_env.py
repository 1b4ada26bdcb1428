"""DialogueEnv: Gymnasium's checker, policies over its actions, seeding, vector envs, logged runs as datasets."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from collections import defaultdict
from pathlib import Path

import pytest

gym = pytest.importorskip("gymnasium", reason="gymnasium is not installed (pip install 'dialogsim[rl]')")
np = pytest.importorskip("numpy", reason="numpy comes with gymnasium")

from gymnasium.utils.env_checker import check_env  # noqa: E402

from dialogsim.engine.cli import main  # noqa: E402
from dialogsim.engine.errors import UserError  # noqa: E402
from dialogsim.engine.log import read_episodes, read_events  # noqa: E402
from dialogsim.rl.env import ENV_ID, DialogueEnv  # noqa: E402
from dialogsim.rl.observation import AGENT_DIAACTS, USER_DIAACTS  # noqa: E402
from dialogsim.rl.policies import RandomPolicy, SchemaPolicy  # noqa: E402
from dialogsim.rl.stepper import ABANDONED  # noqa: E402
from dialogsim.testing import strip_wall  # noqa: E402

SPEC = "sgd:#Restaurants_1"


def play(env: DialogueEnv, policy, episodes: int, seed: int) -> list[dict]:
    """Run episodes; per episode: return, steps, spoken steps, actions, observations, outcome, success."""
    out = []
    for k in range(episodes):
        obs, info = env.reset(seed=seed) if k == 0 else env.reset()
        policy.reset(info)
        episode = {"return": 0.0, "steps": 0, "spoken": 0, "actions": [], "observations": [obs]}
        while True:
            action = policy(obs, info)
            obs, reward, terminated, truncated, info = env.step(action)
            episode["return"] += reward
            episode["steps"] += 1
            episode["spoken"] += "tool_result" not in info or terminated or truncated
            episode["actions"].append(action)
            episode["observations"].append(obs)
            if terminated or truncated:
                break
        episode.update(outcome=info["outcome"], success=info["success"], episode=env.episode_id)
        out.append(episode)
    return out


def rule(env: DialogueEnv, seed: int = 0) -> SchemaPolicy:
    return SchemaPolicy(env.actions, env.pack, seed=seed)


def test_gymnasiums_env_checker_passes():
    """check_env on an env made by gymnasium.make (so the ansi render mode is checked too), without warnings."""
    env = gym.make(ENV_ID, scenarios=SPEC)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped)
    env.close()
    module_env = gym.make("dialogsim.rl.env:" + ENV_ID, scenarios=SPEC, max_turns=20)  # imports the module itself
    assert module_env.unwrapped.max_turns == 20
    module_env.close()


def test_the_rule_policy_over_the_action_space_succeeds_and_random_does_not():
    """The schema agent as a policy over the env's ids: >= 80% success on one domain; random actions far below."""
    env = DialogueEnv(SPEC)
    episodes = play(env, rule(env), 30, seed=11)
    assert sum(e["success"] for e in episodes) / len(episodes) >= 0.8
    random_episodes = play(env, RandomPolicy(env.action_space.n, seed=11), 30, seed=11)
    assert sum(e["success"] for e in random_episodes) / len(random_episodes) <= 0.2
    env.close()


def test_seeding_makes_episodes_reproducible(tmp_path):
    """The same seed and actions give the same observations, rewards and logged events (wall stamps aside);
    reset(seed) starts that seed's episodes again; another seed meets other users."""
    first = DialogueEnv(SPEC, log_dir=str(tmp_path / "a"))
    episodes = play(first, rule(first), 5, seed=3)
    again = play(first, rule(first), 2, seed=3)  # reset(seed=3) again, in the same env
    first.close()
    second = DialogueEnv(SPEC, log_dir=str(tmp_path / "b"))
    replayed = []
    for k, episode in enumerate(episodes):
        obs, _ = second.reset(seed=3) if k == 0 else second.reset()
        observations, total = [obs], 0.0
        for action in episode["actions"]:
            obs, reward, *_ = second.step(action)
            observations.append(obs)
            total += reward
        assert all(np.array_equal(a, b) for a, b in zip(observations, episode["observations"], strict=True))
        replayed.append(total)
    play(second, rule(second), 2, seed=3)
    second.close()
    assert replayed == [e["return"] for e in episodes]
    assert [e["actions"] for e in again] == [e["actions"] for e in episodes[:2]]
    assert strip_wall(list(read_events(tmp_path / "a"))) == strip_wall(list(read_events(tmp_path / "b")))
    other = DialogueEnv(SPEC)
    firsts = [other.reset(seed=4)[0]] + [other.reset()[0] for _ in range(4)]
    other.close()
    assert not all(np.array_equal(a, e["observations"][0]) for a, e in zip(firsts, episodes))
    starts = [e.scenario["data"]["goal"] for e in read_events(tmp_path / "a", types={"episode_started"})]
    assert starts[5:] == starts[:2] and starts[0] != starts[1]


def test_a_logged_env_run_is_a_dataset_every_projection_reads(tmp_path):
    """Episodes logged through the env project to valid SGD dialogues and to rl transitions whose rewards sum
    to the env's returns, one transition per spoken step."""
    from dialogsim.scenarios.sgd.corpus import dialogue_files, read_dialogue_file, validate_dialogue
    from dialogsim.scenarios.sgd.schema import load_schemas

    run = tmp_path / "run"
    env = DialogueEnv(SPEC, log_dir=str(run), max_turns=40)
    episodes = play(env, rule(env), 8, seed=2) + play(env, RandomPolicy(env.action_space.n, seed=2), 4, seed=9)
    env.close()
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["counts"]["episodes"] == 12
    assert manifest["config"]["command"] == "rl env" and manifest["config"]["max_turns"] == 40
    assert main(["project", str(run), "--to", "sgd", "--no-progress"]) == 0
    out = run / "projections" / "sgd@v1"
    schemas = {s["service_name"]: s for s in load_schemas(out / "schema.json")}
    dialogues = [d for path in dialogue_files(out) for d in read_dialogue_file(path)]
    assert len(dialogues) == 12 and all(validate_dialogue(d, schemas) is None for d in dialogues)
    assert any(f.service_call for d in dialogues for t in d.turns for f in t.frames)
    assert main(["project", str(run), "--to", "rl", "--no-progress"]) == 0
    sums: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    with open(run / "projections" / "rl@v1" / "transitions.jsonl", encoding="utf-8") as f:
        for line in f:
            t = json.loads(line)
            sums[t["episode"]] += t["reward"]
            counts[t["episode"]] += 1
    assert [sums[e["episode"]] for e in episodes] == [e["return"] for e in episodes]
    assert [counts[e["episode"]] for e in episodes] == [e["spoken"] for e in episodes]
    outcomes = {events[-1].ep: events[-1].outcome for events in read_episodes(run)}
    assert [outcomes[e["episode"]] for e in episodes] == [e["outcome"] for e in episodes]
    assert main(["run", "--resume", str(run)]) == 2  # not a dialogsim run: nothing to resume


def test_closing_in_mid_episode_logs_its_end():
    """An episode cut short by close() (or a reset) ends in the log as an agent failure; every one ends once."""
    env = DialogueEnv(SPEC)
    env.reset(seed=0)
    env.step(0)
    env.reset()
    env.close()
    env.close()  # closing twice is allowed
    assert env.stepper.counts == {"error": 2}
    assert env.stepper.ended.reason.endswith(ABANDONED)
    with pytest.raises(RuntimeError):
        env.reset()


def test_sync_vector_env_runs_with_autoreset():
    """SyncVectorEnv of three envs: batched observations and masks, episodes reset as they end."""
    vec = gym.vector.SyncVectorEnv([lambda: DialogueEnv(SPEC, max_turns=20) for _ in range(3)])
    obs, info = vec.reset(seed=5)
    single = DialogueEnv(SPEC, max_turns=20)
    first, _ = single.reset(seed=6)  # SyncVectorEnv seeds its second env with seed + 1
    single.close()
    assert obs.shape == (3, vec.single_observation_space.shape[0]) and np.array_equal(obs[1], first)
    rng = np.random.default_rng(0)
    ended = 0
    for _ in range(120):
        actions = np.array([rng.choice(np.flatnonzero(mask)) for mask in info["action_mask"]])
        obs, reward, terminated, truncated, info = vec.step(actions)
        ended += int(terminated.sum() + truncated.sum())
        assert obs.shape[0] == 3 and reward.shape == (3,)
    vec.close()
    assert ended >= 3


def test_the_observation_encodes_the_tracker_state():
    """The first observation: the user's diaact and informed slots, the greeting as the agent's act, turn 1."""
    env = DialogueEnv(SPEC, max_turns=40)
    obs, info = env.reset(seed=0)
    layout = env.layout
    assert [size for _, _, size in layout.blocks()] and sum(s for *_, s in layout.blocks()) == layout.size
    assert obs.shape == env.observation_space.shape and obs.dtype == np.float32 and obs in env.observation_space
    state = info["state"]
    user = state["user_action"]

    def block(name: str) -> np.ndarray:
        start = layout.start[name]
        return obs[start:start + dict((n, s) for n, _, s in layout.blocks())[name]]

    assert block("user_act")[USER_DIAACTS.index(user["diaact"])] == 1 and block("user_act").sum() == 1
    assert {layout.slots[i] for i in np.flatnonzero(block("user_inform"))} == set(user["inform_slots"])
    assert block("agent_act")[AGENT_DIAACTS.index("greeting")] == 1
    assert block("turn")[0] == pytest.approx(1 / 40)
    assert block("call")[0] == 1 and block("results")[0] == 1
    env.close()


def test_the_env_works_where_an_event_loop_is_running_already():
    """Called from a coroutine (a notebook's cell runs in the kernel's loop), the env runs its own loop in a
    thread of its own, and episodes come out as they do elsewhere."""
    import asyncio

    def episode() -> tuple[list, float]:
        env = DialogueEnv(SPEC)
        (result,) = play(env, rule(env), 1, seed=8)
        env.close()
        return result["actions"], result["return"]

    async def inside() -> tuple[list, float]:
        return episode()

    assert asyncio.run(inside()) == episode()


def test_bad_options_are_one_line_errors():
    """Scenarios without an SGD pack, a turn limit below 2, an unknown render mode: UserError."""
    with pytest.raises(UserError, match="needs SGD scenarios"):
        DialogueEnv("builtin")
    with pytest.raises(UserError, match="max_turns"):
        DialogueEnv(SPEC, max_turns=1)
    with pytest.raises(UserError, match="render_mode"):
        DialogueEnv(SPEC, render_mode="human")


def test_importing_dialogsim_does_not_import_gymnasium():
    """Gymnasium is imported when the environment is, not by dialogsim, its rl package or its projections."""
    code = ("import sys, dialogsim.rl, dialogsim.rl.projection, dialogsim.engine.cli\n"
            "print('gymnasium' in sys.modules)\nimport dialogsim.rl as rl\nrl.DialogueEnv\n"
            "print('gymnasium' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).parent)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]


@pytest.mark.slow
def test_the_example_runs_as_the_readme_prints_it(tmp_path):
    """examples/rl_policies.py prints a success rate per policy, the rule policy's well above the random ones'."""
    script = Path(__file__).resolve().parents[2] / "examples" / "rl_policies.py"
    done = subprocess.run([sys.executable, str(script), "--scenarios", SPEC, "--episodes", "10",
                           "--log-dir", str(tmp_path / "logs")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rates = {line.split()[0]: float(line.split()[2]) for line in done.stdout.splitlines()[1:]}
    assert set(rates) == {"random", "random-masked", "rule"} and rates["rule"] >= 0.8 > rates["random"]
    assert json.loads((tmp_path / "logs" / "rule" / "manifest.json").read_text())["counts"]["episodes"] == 10

