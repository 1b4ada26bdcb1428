"""The one shape of an HTTP agent factory: ``--agent PROTOCOL:URL`` makes one per run, for every protocol.

The factory reads the agent options once (the common ones of ``client.COMMON_OPTIONS`` here, its
protocol's own in ``read_options``), owns the HTTP pool that every episode of the run shares, and makes
a fresh agent of its protocol's class for each episode. A protocol is a subclass naming its spec,
options, headers and agent class (``native.NativeAgentFactory``, ``openai_chat.OpenAIAgentFactory``). A
model-driven user has the same shape (``users/llm.py``): ``role`` says whose options and requests they are.
"""

from __future__ import annotations

import os
from typing import Any, Callable

from ...engine.errors import UserError
from .client import COMMON_OPTIONS, HttpPool, HttpSettings, check_options, number_option


def price_options(options: dict[str, Any], who: str = "agent") -> tuple[float | None, float | None]:
    """The price table from options: USD per 1000 input and output tokens (None when not given)."""
    p_in = number_option(options, "price_in_per_1k", -1.0, who=who)
    p_out = number_option(options, "price_out_per_1k", -1.0, who=who)
    return (None if p_in < 0 else p_in), (None if p_out < 0 else p_out)


def api_key(options: dict[str, Any], who: str = "agent") -> str | None:
    """The API key from the environment variable named by option ``api_key_env`` (never from options)."""
    name = options.get("api_key_env")
    if not name:
        return None
    value = os.environ.get(str(name))
    if not value:
        raise UserError(f"{who} option api_key_env={name}: environment variable {name} is not set or empty")
    return value


def model_option(options: dict[str, Any], who: str = "the openai agent", role: str = "agent") -> str:
    """The model a chat participant asks for (option ``model``, given as ``--agent-model``/``--user-model``)."""
    model = str(options.get("model") or "")
    if not model:
        raise UserError(f"{who} needs a model: pass --{role}-model NAME ({role} option model=NAME)")
    return model


def latency_mode(options: dict[str, Any], who: str = "agent") -> bool:
    """True when the agent turn's virtual latency is the measured wall time (option latency=measured)."""
    mode = str(options.get("latency") or "model")
    if mode not in ("model", "measured"):
        raise UserError(f"bad {who} option latency={mode!r}: expected 'model' or 'measured'")
    return mode == "measured"


class HttpAgentFactory:
    """A run's live agent behind ``--agent PROTOCOL:URL``: the options read once, one HTTP pool for all episodes.

    Called as the registry calls an agent factory, ``factory(arg, scenarios, options)``, with the URL as
    ``arg``; calling the factory makes one episode's agent, ``agent(factory)``.
    """

    role = "agent"  # whose factory this is ("agent", or "user" for a model-driven user)
    protocol = ""  # the spec's name, as in ``--agent PROTOCOL:URL``
    usage = ""  # the spec as it should look, for the error on a bad URL
    own_options: frozenset[str] = frozenset()  # the protocol's options besides client.COMMON_OPTIONS
    common_options: frozenset[str] = COMMON_OPTIONS
    extra_headers: dict[str, str] = {}  # sent with every request, after the JSON content headers
    agent: Callable[[Any], Any]  # the protocol's per-episode agent class

    def __init__(self, arg: str | None, scenarios: Any = None, options: dict[str, Any] | None = None) -> None:
        url = arg or ""
        options = dict(options or {})
        role = self.role
        if not url.startswith(("http://", "https://")):
            raise UserError(f"bad {role} spec '{self.protocol}:{url}': expected {self.usage}")
        check_options(options, self.protocol + ":", self.own_options, role, self.common_options)
        self.read_options(options)
        self.url = self.endpoint(url)
        self.settings = HttpSettings.from_options(options, role)
        self.concurrency = self.settings.concurrency  # requests in flight at most: the run keeps them busy
        key = api_key(options, role)
        self.prices = price_options(options, role)
        self.measured_latency = latency_mode(options, role)
        self.headers = {"Content-Type": "application/json", "Accept": "application/json", **self.extra_headers}
        if key:
            self.headers["Authorization"] = f"Bearer {key}"
        self.pool = HttpPool(self.settings, secrets=(key,) if key else (), headers=self.headers, who=role)

    def read_options(self, options: dict[str, Any]) -> None:
        """Read the protocol's own options (``own_options``); a bad value is a UserError naming it."""

    def endpoint(self, url: str) -> str:
        """The URL requests go to, from the one given in the spec."""
        return url

    def __call__(self) -> Any:
        """A fresh agent for one episode."""
        return self.agent(self)

    async def aclose(self) -> None:
        """Close the shared HTTP session at run end."""
        await self.pool.aclose()

    def __repr__(self) -> str:
        # Never show the headers (they hold the key).
        return f"{type(self).__name__}(url={self.url!r})"
