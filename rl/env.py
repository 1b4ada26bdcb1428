"""``DialogueEnv``, ``gymnasium.make("dialogsim/SGD-v0")``: a Gymnasium environment in which the learner is the agent.

The environment is a scenario pack's agenda-based user, world and judge, run by the real engine
(rl/stepper.py): every ``step`` is one decision of the agent, an action id of rl/actions.py (a move the
environment fills from its belief and realizes with the pack's templates), and the observation is the TC-Bot
state tracker as a vector (rl/observation.py). Rewards are the ``rl`` projection's (rl/rewards.py): a step
that says a turn gets ``per_turn`` (-1), a call step (a tool round inside a turn) 0, and the step that ends
the episode ``success`` (2 * max_turns) if the judged outcome is success, else ``failure`` (-max_turns); so
an episode's return is the sum of its transitions' rewards in the ``rl`` projection of its log. An episode
cut by the turn limit is truncated, any other end terminates it. With ``log_dir`` every episode is logged
into a run directory like any run's, which every projection reads (docs/rl.md).

Importing this module registers ``dialogsim/SGD-v0`` with Gymnasium (``gymnasium.make`` can also import it:
``gymnasium.make("dialogsim.rl.env:dialogsim/SGD-v0")``).
"""

from __future__ import annotations

import json
import time
from typing import Any

import msgspec

try:
    import gymnasium as gym
    import numpy as np
    from gymnasium import spaces
except ModuleNotFoundError as exc:  # an optional extra: say how to get it
    raise ModuleNotFoundError(f"dialogsim.rl.DialogueEnv needs gymnasium ({exc}): pip install 'dialogsim[rl]'") from exc

from .. import __version__
from ..engine import registry
from ..engine.errors import UserError
from ..engine.events import RunEnded, RunStarted
from ..engine.log import DURABILITY_CHOICES, LogWriter, RunDir
from ..engine.runner import BatchSettings, episode_id
from ..engine.seeding import stable_hash
from ..engine.session import absolute_scenarios
from ..engine.timing import parse_delay
from .actions import ActionSet
from .observation import Layout, Observer
from .rewards import reward_rule
from .stepper import Discard, EpisodeStepper

ENV_ID = "dialogsim/SGD-v0"
AGENT_SPEC = "rl-env"  # the agent of the environment's episodes, as episode_started and the manifest name it
_MAX_SILENT = 1000  # episodes in a row that end before the agent is asked: the user set never lets it speak


class DialogueEnv(gym.Env):
    """The learner is the agent; a scenario pack's user, world and judge are the environment."""

    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(self, scenarios: str = "sgd", *, max_turns: int = 50, seed: int | None = None,
                 log_dir: str | None = None, user: str = "agenda", user_options: dict[str, Any] | None = None,
                 reward: dict[str, Any] | None = None, think: str = "0", latency: str = "0",
                 durability: str = "batch", render_mode: str | None = None) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise UserError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        if max_turns < 2:
            raise UserError(f"max_turns must be >= 2, got {max_turns}")
        if seed is not None and not 0 <= seed < 2**63:
            raise UserError(f"seed must be an integer in [0, 2**63), got {seed}")
        if durability not in DURABILITY_CHOICES:
            raise UserError(f"durability must be one of {', '.join(DURABILITY_CHOICES)}, got {durability!r}")
        scenario_set = registry.load_scenarios(scenarios)
        pack = getattr(scenario_set, "pack", None)
        if pack is None:
            raise UserError(f"DialogueEnv needs SGD scenarios (sgd, sgd:#Service_1, a pack directory), "
                            f"not {scenarios!r}")
        names = scenario_set.services or sorted(pack.schemas)
        schemas = [pack.schemas[name] for name in names]
        self.render_mode = render_mode
        self.pack = pack  # the scenario pack (a policy that realizes acts, like SchemaPolicy, needs it)
        self.actions = ActionSet(schemas)
        self.layout = Layout(schemas)
        self.action_space = spaces.Discrete(len(self.actions))
        self.observation_space = spaces.Box(0.0, 1.0, shape=(self.layout.size,), dtype=np.float32)
        self.max_turns = max_turns
        self.rule = reward_rule(reward, {"max_turns": max_turns})
        settings = BatchSettings(concurrency=1, max_turns=max_turns, think=parse_delay(think, "think"),
                                 latency=parse_delay(latency, "latency"))
        make_user = registry.user_factory(user, scenario_set, user_options)
        config = {"command": "rl env", "scenarios": absolute_scenarios(scenarios), "user": user,
                  "user_options": dict(user_options or {}), "agent": AGENT_SPEC, "max_turns": max_turns,
                  "seed": seed, "think": think, "latency": latency, "reward": dict(reward or {}),
                  "actions": len(self.actions), "observation": self.layout.size}
        self.run_id = f"env-{stable_hash(json.dumps(config, sort_keys=True, default=str)):016x}"
        self.run: RunDir | None = None
        self.writer: LogWriter | None = None
        if log_dir is not None:
            self.run = run = RunDir.create(log_dir, run_id=self.run_id, config=config, seed=seed or 0)
            self.writer = LogWriter(run.path / run.manifest["shards"][0], durability)
            self.writer.append(RunStarted(run=self.run_id, ep="", seq=0, t=0.0, wall=time.time_ns(), config=config,
                                          code_version=__version__, seed=seed or 0))
        self.stepper = EpisodeStepper(scenario_set, make_user, settings, self.writer or Discard(), run_id=self.run_id,
                                      user_spec=user, agent_spec=AGENT_SPEC)
        self.observer = Observer(self.layout, max_turns)
        self.master_seed = seed
        self.index = 0  # of the next episode since the last seeding: what it is drawn by
        self.episodes = 0  # episodes started: the next one's number in the log
        self.episode_id = ""
        self._call: tuple[str, str] = ("", "")
        self._transcript: list[str] = []
        self._closed = False

    # -- the Gymnasium API ------------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        """Start the next episode (with ``seed``: the first of that master seed); an unfinished one ends as an
        agent failure."""
        super().reset(seed=seed)
        if self._closed:
            raise RuntimeError("the environment is closed")
        if seed is not None:
            self.master_seed, self.index = seed, 0
        elif self.master_seed is None:
            self.master_seed = int(self.np_random.integers(2**63 - 1))
        for _ in range(_MAX_SILENT):
            self.observer.reset()
            self._transcript = []
            self.episode_id = episode_id(self.episodes)
            self.stepper.start(self.master_seed, self.index, self.episodes)
            self.index += 1
            self.episodes += 1
            if self.stepper.request is not None:
                break
        else:
            raise RuntimeError(f"{_MAX_SILENT} episodes in a row ended before the agent was asked anything")
        self._heard()
        ctx = self.stepper.context
        info = self._info(filled=True)
        info["scenario"], info["tools"] = ctx.scenario, list(ctx.tools)
        return self.observer.vector(self.stepper.voice), info

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        """Say (or call) ``action``, and run the engine to the agent's next decision or the episode's end."""
        stepper = self.stepper
        if stepper.request is None:
            raise RuntimeError("no episode is running: call reset()")
        action = int(action)
        if not 0 <= action < len(self.actions):
            raise ValueError(f"action {action} is not in Discrete({len(self.actions)})")
        reply, filled = self.actions.realize(action, stepper.voice)
        spoken = not reply.tool_calls
        if spoken:
            reply.action = self.actions.actions[action].name
            self.observer.agent_turn(reply.frames)
            if self.render_mode == "ansi":
                self._transcript.append(f"agent: {reply.utterance}")
        else:
            self._call = (reply.tool_calls[0].service, reply.tool_calls[0].method)
        stepper.answer(reply)
        ended = stepper.ended
        if ended is None:
            self._heard()
            return (self.observer.vector(stepper.voice), float(self.rule.per_turn) if spoken else 0.0, False, False,
                    self._info(filled))
        rule = self.rule
        if rule.success_slot is not None:
            succeeded = rule.success_slot in self.observer.tracker.inform_slots
        else:
            succeeded = ended.outcome == "success"
        info = self._info(filled)
        info.update(outcome=ended.outcome, reason=ended.reason, success=succeeded)
        truncated = ended.outcome == "max_turns"
        return (self.observer.vector(stepper.voice), float(rule.final(succeeded, ended.turns)), not truncated,
                truncated, info)

    def render(self) -> str | None:
        """The episode so far as text, one turn a line (render_mode "ansi")."""
        if self.render_mode != "ansi":
            return None
        return "\n".join(self._transcript) + "\n"

    def close(self) -> None:
        """End the running episode (as an agent failure) and finish the run directory, if logging."""
        if self._closed:
            return
        self._closed = True
        self.stepper.close()
        if self.writer is not None and self.run is not None:
            counts = dict(self.stepper.counts)
            counts["episodes"] = sum(self.stepper.counts.values())
            self.writer.append(RunEnded(run=self.run_id, ep="", seq=1, t=0.0, wall=time.time_ns(),
                                        status="completed", counts=counts))
            self.writer.close()
            self.run.manifest.update(status="completed", counts=counts)
            self.run.save_manifest()

    # -- helpers ----------------------------------------------------------------------------------

    def action_names(self) -> list[str]:
        """Every action's name, in id order (rl/actions.py)."""
        return self.actions.names()

    def _heard(self) -> None:
        """Fold the pending request (a user turn, or the result of the call just made) into the observer."""
        request = self.stepper.request
        if request.call is None:
            user = request.observation.user
            self.observer.user_turn(user.frames)
            if self.render_mode == "ansi":
                self._transcript.append(f"user: {user.utterance}")
        else:
            self.observer.tool_result(*self._call, request.call)

    def _info(self, filled: bool) -> dict[str, Any]:
        request = self.stepper.request
        info: dict[str, Any] = {"state": self.observer.state(), "filled": filled}
        if request is None:  # the episode is over: whatever comes next is not said (a vector env resets)
            info["action_mask"] = np.ones(len(self.actions), dtype=np.int8)
        else:
            info["action_mask"] = np.frombuffer(self.actions.mask(self.stepper.voice), dtype=np.int8)
            # the envelope's run, episode and wall stamp left out: info is the same for the same seed and actions
            info["user_turn"] = msgspec.structs.replace(request.observation.user, run="", ep="", wall=0)
            if request.call is not None:
                info["tool_result"] = msgspec.structs.replace(request.call, call_id="")
        return info


if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point="dialogsim.rl.env:DialogueEnv")
