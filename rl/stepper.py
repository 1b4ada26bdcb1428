"""Engine episodes run one agent decision at a time: the machinery under the Gymnasium environment.

Each episode is a one-job ``Batch`` of the real engine (engine/runner.py) on an event loop the stepper owns,
so an environment episode is simulated, judged and logged exactly like an episode of ``dialogsim run``. Its
agent, a ``LearnerAgent``, hears the user through a schema agent's belief (agents/schema_agent.py) and answers
each request with a future, which the engine awaits as it awaits a live agent; the stepper runs the loop
until the agent is asked again (``request``) or the episode has ended (``ended``), and ``answer`` resolves
the future with the learner's reply. Virtual time does not matter here (think time and latency are 0 by
default); the log's order is the engine's.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, NamedTuple

import msgspec

from ..agents.schema_agent import SchemaAgent, ServiceSchema
from ..engine.contracts import AgentFailure, AgentReply, EpisodeContext, Observation, ToolResult
from ..engine.events import EpisodeEnded, Event
from ..engine.runner import Batch, BatchSettings, Job, Sink

ABANDONED = "the learner reset or closed the environment before the episode ended"


class Request(NamedTuple):
    """The agent is asked: the engine's observation, and the result of the call just made (a tool round)."""

    observation: Observation
    call: ToolResult | None


class Discard(Sink):
    """A sink that keeps nothing (an environment that does not log)."""

    def append(self, event: Event) -> None:
        pass

    def append_many(self, events: list[Event]) -> None:
        pass


class LearnerAgent:
    """The agent of an environment episode: its belief and voice are a schema agent's, its decisions the learner's."""

    deterministic = False  # its replies come from outside the engine

    def __init__(self, stepper: EpisodeStepper, voice: SchemaAgent) -> None:
        self.stepper = stepper
        self.voice = voice

    def start(self, ctx: EpisodeContext) -> None:
        """Start the belief for this episode."""
        self.voice.start(ctx)
        self.stepper.context = ctx

    def respond(self, obs: Observation) -> asyncio.Future[AgentReply]:
        """Fold the user's turn (or the call's result) into the belief and wait for the learner's reply."""
        voice = self.voice
        call = None
        if obs.tool_results and voice.pending is not None:
            call = obs.tool_results[0]
            voice.take_results(call)
        else:
            voice.listen(obs)
        return self.stepper.ask(Request(obs, call))


class _Drawn:
    """A scenario set whose every draw is the ``index``-th scenario of ``scenarios`` (the episode ids of a log
    run on across seeds, while an episode is drawn by its index since the last seeding)."""

    def __init__(self, scenarios: Any, index: int) -> None:
        self.scenarios, self.index = scenarios, index
        self.name = scenarios.name
        self.world = getattr(scenarios, "world", None)
        self.tools = getattr(scenarios, "tools", None)
        self.judge = getattr(scenarios, "judge", None)

    def draw(self, index: int, seed: int) -> Any:
        return self.scenarios.draw(self.index, seed)


class EpisodeStepper:
    """Runs one episode at a time, stopping whenever its agent is asked."""

    def __init__(self, scenarios: Any, make_user: Callable[[], Any], settings: BatchSettings, sink: Sink, *,
                 run_id: str, user_spec: str, agent_spec: str) -> None:
        self.scenarios = scenarios
        self.make_user = make_user
        self.settings = settings
        self.sink = sink
        self.run_id, self.user_spec, self.agent_spec = run_id, user_spec, agent_spec
        self.loop = asyncio.new_event_loop()
        self._schemas: dict[str, ServiceSchema] = {}  # shared by the episodes' voices, as in a run
        self.voice = SchemaAgent(scenarios.pack, services=self._schemas)
        self.context: EpisodeContext | None = None
        self.request: Request | None = None  # the pending request, while the agent waits for an answer
        self.ended: EpisodeEnded | None = None  # the last episode's end, once it has ended
        self.counts: Counter[str] = Counter()  # episodes ended, by outcome
        self._future: asyncio.Future[AgentReply] | None = None
        self._pause: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self._thread: ThreadPoolExecutor | None = None  # runs the loop when the caller's thread runs one already

    def start(self, seed: int, index: int, episode: int) -> None:
        """Start the ``index``-th episode of master seed ``seed``, logged as episode number ``episode``, and run it
        to its first request (or its end); an episode still running is ended first (outcome error)."""
        self.abandon()
        self.voice = SchemaAgent(self.scenarios.pack, services=self._schemas)
        self.ended = self.request = self.context = None
        agent = LearnerAgent(self, self.voice)
        batch = Batch(run_id=self.run_id, scenarios=_Drawn(self.scenarios, index), make_user=self.make_user,
                      make_agent=lambda: agent, settings=msgspec.structs.replace(self.settings, seed=seed),
                      sink=self.sink, user_spec=self.user_spec, agent_spec=self.agent_spec,
                      on_episode_end=self._on_end)
        self._task = self.loop.create_task(batch.run([Job(episode)]))
        self._task.add_done_callback(self._wake)
        self._run()

    def answer(self, reply: AgentReply) -> None:
        """Give the agent's reply to the pending request, and run to the next request or the episode's end."""
        future = self._future
        if future is None or future.done():
            raise RuntimeError("no request is pending: start an episode first")
        self.request = self._future = None
        future.set_result(reply)
        self._run()

    def abandon(self) -> None:
        """End the running episode, if any, as an agent failure (logged like any episode's end)."""
        if self._future is not None and not self._future.done():
            self.request = None
            self._future.set_exception(AgentFailure(ABANDONED))
            self._future = None
            self._run()

    def close(self) -> None:
        """End the running episode, if any, and close the event loop."""
        if not self.loop.is_closed():
            self.abandon()
            self.loop.close()
        if self._thread is not None:
            self._thread.shutdown()
            self._thread = None

    # -- the loop ---------------------------------------------------------------------------------

    def ask(self, request: Request) -> asyncio.Future[AgentReply]:
        """The agent is asked: note the request and pause the loop (the agent's answer is the future)."""
        self.request = request
        self._future = future = self.loop.create_future()
        self._wake()
        return future

    def _wake(self, *_: Any) -> None:
        pause = self._pause
        if pause is not None and not pause.done():
            pause.set_result(None)

    def _on_end(self, event: EpisodeEnded) -> None:
        self.ended = event
        self.counts[event.outcome] += 1

    def _run(self) -> None:
        """Run the loop until the agent is asked or the episode's batch has finished."""
        task = self._task
        if task is None or task.done():
            return
        self._pause = self.loop.create_future()
        if _loop_running():  # a notebook's, say: an event loop cannot run inside another in one thread
            if self._thread is None:
                self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dialogsim-env")
            self._thread.submit(self.loop.run_until_complete, self._pause).result()
        else:
            self.loop.run_until_complete(self._pause)
        self._pause = None
        if task.done():
            self._task = None
            task.result()  # an engine failure (not an episode's: those end the episode) is raised here


def _loop_running() -> bool:
    """Whether this thread is running an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
