"""The Scenario model and the protocols a scenario set and its world implement."""

from __future__ import annotations

import random
from typing import Any, Protocol

import msgspec

from ..engine.events import ToolCalled, ToolReturned


class Scenario(msgspec.Struct, kw_only=True):
    """One thing to simulate: an id, a kind ("scripted", "sgd", ...) and the data users and agents read.

    ``data`` is snapshotted into ``episode_started`` so that a log never needs the pack it came from.
    """

    id: str
    kind: str
    data: dict[str, Any] = {}

    def agent_view(self) -> "Scenario":
        """The scenario as an agent may see it: without the parts only the user knows (its goal, its lines)."""
        if USER_ONLY_KEYS.isdisjoint(self.data):
            return self
        return Scenario(id=self.id, kind=self.kind,
                        data={k: v for k, v in self.data.items() if k not in USER_ONLY_KEYS})


# The user's goal and script are the answer key of an episode: an agent that saw them could "track" the
# user's state by copying it, so no agent, in process or over HTTP, is ever handed these keys.
USER_ONLY_KEYS = frozenset({"goal", "user"})


class ToolSpec(msgspec.Struct, kw_only=True):
    """A tool the agent may call: an SGD service intent, its parameters as a JSON Schema object."""

    service: str
    method: str
    description: str = ""
    parameters: dict[str, Any] = {}
    transactional: bool = False


class ToolResult(msgspec.Struct, kw_only=True):
    """What a tool call gave back: result rows, or an error message."""

    call_id: str
    results: list[dict[str, Any]] | None = None
    error: str | None = None


class Call(msgspec.Struct, kw_only=True):
    """A tool call an episode made and what it returned: the evidence a judge checks claims against."""

    service: str
    method: str
    parameters: dict[str, Any] = {}
    results: list[dict[str, Any]] | None = None
    error: str | None = None


def completed_calls(events: list[Any]) -> list[Call]:
    """The tool calls among an episode's events, each with what it returned."""
    called: dict[str, ToolCalled] = {}
    out: list[Call] = []
    for event in events:
        if type(event) is ToolCalled:
            called[event.call_id] = event
        elif type(event) is ToolReturned and event.call_id in called:
            c = called.pop(event.call_id)
            out.append(Call(service=c.service, method=c.method, parameters=c.parameters, results=event.results,
                            error=event.error))
    return out


class Claim(msgspec.Struct, kw_only=True):
    """What a user believes it achieved for one goal intent: the values it holds and the entity it took."""

    service: str
    intent: str
    transactional: bool = False
    constraints: dict[str, str] = {}  # canonical values the user holds at the end (after any relaxation)
    entity: dict[str, str] | None = None  # a search: the offered values of the entity the user selected


class World(Protocol):
    """The simulated backend of one episode: executes service calls, deterministically per seed."""

    def call(self, service: str, method: str, parameters: dict[str, Any]) -> tuple[list[dict[str, Any]] | None, str | None]:
        """Run one call: (results, None) on success or (None, error message) when it fails."""
        ...


class ScenarioSet(Protocol):
    """A named source of scenarios with the user and agent it runs by default.

    A set may also define ``judge(scenario, claims, events) -> str | None``: why the episode's events so far
    (its turns, tool calls and returns, in order) do not back a user's claimed success (None when they do);
    the runner then fails the episode.
    """

    name: str
    default_user: str
    default_agent: str

    def draw(self, index: int, seed: int) -> tuple[Scenario, int]:
        """The scenario of the ``index``-th episode of a run with master seed ``seed``, and its trial."""
        ...

    def world(self, scenario: Scenario, rng: random.Random) -> World:
        """A fresh world for one episode of ``scenario``."""
        ...

    def tools(self, scenario: Scenario) -> list[ToolSpec]:
        """The tools an agent may call in ``scenario``."""
        ...


class EpisodeContext(msgspec.Struct, kw_only=True):
    """What a user or agent is told when its episode starts; ``rng`` is its own random stream."""

    episode_id: str
    scenario: Scenario
    tools: list[ToolSpec]
    rng: random.Random
    seed: int
