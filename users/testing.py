"""A loopback OpenAI-compatible model server that plays a user, for tests of model-driven users (``--user llm:``).

``user_model_app(pack)`` answers ``POST /v1/chat/completions`` as a model given the llm user's system prompt
would: it reads the SGD goal back from the prompt (``llm_prompt.read_goal``) and plays it with the agenda user
(``users/agenda.py``), which understands an agent's words (``users/understanding.py``). The conversation comes
in every request, as chat messages (the user's turns as the assistant's, the agent's as the user's); the agenda
user of a conversation is kept between requests and rebuilt by replaying the conversation when a request does
not continue it (a resumed run, another process), seeded by the prompt, so the answers do not depend on which.
It ends the dialogue with the stop marker, reports usage (words as tokens), and, with ``plan(key, attempt)``
(as ``agents.http.testing.faulty_app``), injects faults: ``500``, ``429`` (Retry-After), ``malformed``, ``hang``.
``app[REQUESTS]`` holds every request body received, in order, ``app[TIMES]`` when each came
(``time.monotonic()``) and ``app[AUTHORIZATION]`` the Authorization headers seen (for tests of keys); every
answer waits ``delay`` seconds first (``app[CONTROL]["delay"]``, which a test may change while it serves).

    with serve_in_thread(user_model_app(pack)) as url:
        ... dialogsim run --user llm:{url} --user-model fake ...
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import time
from typing import Any, Callable

from aiohttp import web

from ..agents.http.chat import canonical_request, request_digest
from ..agents.http.testing import inject_fault
from ..engine.contracts import EpisodeContext, Scenario
from ..engine.events import AgentTurn
from ..engine.seeding import stable_hash
from .agenda import AgendaUser
from .llm_prompt import STOP, read_goal

REQUESTS = web.AppKey("requests", list)
TIMES = web.AppKey("times", list)
AUTHORIZATION = web.AppKey("authorization", set)
CONTROL = web.AppKey("control", dict)
CLOSING = "Thank you, goodbye."  # what the played user says when the agenda user leaves without a word


class _Played:
    """The agenda user of one conversation and how many agent turns it has heard."""

    def __init__(self, pack: Any, system: str) -> None:
        goal = read_goal(system, pack.schemas)
        schemas = {s: pack.schemas[s] for s in goal["services"]}
        seed = stable_hash("user-model", system)
        self.user = AgendaUser(pack)
        self.user.start(EpisodeContext(episode_id="played", scenario=Scenario(
            id="played", kind="sgd", data={"goal": goal, "schemas": schemas}), tools=[],
            rng=random.Random(seed), seed=seed))
        self.heard = -1  # the opening is the answer to "no agent turn yet"

    def answer(self, agent_texts: list[str], stop: str) -> str:
        """The user's next message after the agent's turns ``agent_texts`` (all of them, in order)."""
        reply = None
        while self.heard < len(agent_texts):
            self.heard += 1
            agent = (None if self.heard == 0 else AgentTurn(run="", ep="", seq=0, t=0.0, wall=0, turn=2 * self.heard - 1,
                                                            utterance=agent_texts[self.heard - 1]))
            reply = self.user.respond(agent)
        if reply is None:
            return f"{CLOSING} {stop}"
        return f"{reply.utterance} {stop}" if reply.end else reply.utterance


def user_model_app(pack: Any, *, plan: Callable[[str, int], str | None] | None = None, stop: str = STOP,
                   hang_seconds: float = 3.0, retry_after: str = "0", max_sessions: int = 4096,
                   delay: float = 0.0) -> web.Application:
    """An aiohttp app playing the user of the SGD goal in each request's system prompt (module docstring)."""
    sessions: dict[str, _Played] = {}
    attempts: dict[str, int] = {}
    requests: list[dict[str, Any]] = []
    times: list[float] = []
    authorization: set[str] = set()
    control = {"delay": delay}

    async def answer(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        messages = body["messages"]
        system = messages[0]["content"]
        agent_texts = [m["content"] for m in messages[2:] if m["role"] == "user"]
        key = hashlib.sha256(system.encode()).hexdigest()
        played = sessions.pop(key, None)
        if played is None or played.heard != len(agent_texts) - 1:
            played = _Played(pack, system)
        content = played.answer(agent_texts, stop)
        sessions[key] = played
        while len(sessions) > max_sessions:
            sessions.pop(next(iter(sessions)))
        prompt_tokens = sum(len(str(m.get("content") or "").split()) for m in messages)
        return web.json_response({
            "id": f"fake-{len(requests)}", "object": "chat.completion", "created": 0, "model": body.get("model"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": len(content.split()),
                      "total_tokens": prompt_tokens + len(content.split())}})

    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        requests.append(body)
        times.append(time.monotonic())
        if "Authorization" in request.headers:
            authorization.add(request.headers["Authorization"])
        if control["delay"]:
            await asyncio.sleep(control["delay"])
        fault = None
        if plan is not None:
            key = f"{body.get('user', '')}/{len(body.get('messages', ()))}"
            attempts[key] = attempt = attempts.get(key, 0) + 1
            fault = plan(key, attempt)
        if fault is None:
            return await answer(request)
        return await inject_fault(request, fault, answer, hang=hang_seconds, retry_after=retry_after)

    app = web.Application()
    app[REQUESTS] = requests
    app[TIMES] = times
    app[AUTHORIZATION] = authorization
    app[CONTROL] = control
    app.router.add_post("/v1/chat/completions", handle)
    return app


def request_digests(bodies: list[dict[str, Any]]) -> list[str]:
    """The digests of requests as received (``app[REQUESTS]``): what their ``model_called`` events would name."""
    return [request_digest(canonical_request({k: v for k, v in b.items() if k != "stream"})) for b in bodies]
