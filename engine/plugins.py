"""The composition root: every built-in plug-in by kind, name, import path and a line of help.

This table is the one place under engine/ that names the implementers (agents/, users/, scenarios/): by
path, as strings, so that nothing here is imported until it is used (``engine/registry.py``). A new
built-in user, agent, scenario set, projection or command is one line here; see docs/architecture.md.
"""

from __future__ import annotations

DEFAULT_SCENARIOS = "sgd"  # --scenarios left out, or a bare pack directory
DEFAULT_CORPUS = "sgd"  # the format of a dialogue directory given to ``stats --compare``

BUILTINS: list[tuple[str, str, str | None, str]] = [
    # kind, name, target, help
    ("scenarios", "sgd", "dialogsim.scenarios.sgd.scenario_set:load_scenario_set",
     "SGD goals over a scenario pack (sgd, sgd:PACK_DIR, sgd:#Svc_1,Svc_2)"),
    ("scenarios", "builtin", "dialogsim.scenarios.builtin:load", "two tiny scripted scenarios, for tests and demos"),
    ("user", "agenda", "dialogsim.users.agenda:make_factory", "agenda-based SGD user"),
    ("user", "scripted", "dialogsim.users.scripted:make_factory", "says the scenario's scripted lines"),
    ("agent", "schema", "dialogsim.agents.schema_agent:make_factory", "rule-based schema-guided SGD agent"),
    ("agent", "scripted", "dialogsim.agents.scripted:make_factory", "says the scenario's scripted lines"),
    ("agent", "http", "dialogsim.agents.http.native:NativeAgentFactory", "a live agent speaking dialogsim/1 (http:URL)"),
    ("agent", "openai", "dialogsim.agents.http.openai_chat:OpenAIAgentFactory",
     "a live OpenAI-compatible chat-completions agent (openai:URL)"),
    ("projection", "sgd", "dialogsim.scenarios.sgd.projection:SgdProjection", "SGD dialogues and schema.json"),
    ("projection", "dst_metrics", "dialogsim.scenarios.sgd.dst_metrics:DstMetricsProjection",
     "official SGD DST metrics of the agent's tracked state"),
    ("corpus", "sgd", "dialogsim.scenarios.sgd.corpus:read_corpus", "an SGD split directory"),
    ("command", "run", "dialogsim.engine.commands.run", "simulate episodes into a run directory (or --resume one)"),
    ("command", "events", "dialogsim.engine.commands.events", "print a run's events, filtered"),
    ("command", "project", "dialogsim.engine.commands.project",
     "derive a dataset or metrics from a run's events (incremental)"),
    ("command", "stats", "dialogsim.engine.commands.stats",
     "success rate, turns, acts, intents and diversity of a run, optionally beside a real corpus"),
    ("command", "import", None, "turn an external corpus into an event log"),
    ("command", "import sgd", "dialogsim.scenarios.sgd.import_command",
     "import an SGD split directory (dialogues_*.json + schema.json)"),
    ("command", "eval-dst", "dialogsim.scenarios.sgd.eval_dst_command",
     "official SGD DST metrics of any model's SGD-format output against a reference"),
    ("command", "pack", None, "scenario packs"),
    ("command", "pack build", "dialogsim.scenarios.sgd.pack_command",
     "build an SGD scenario pack from dialogues and schemas"),
    ("command", "serve-agent", "dialogsim.agents.http.serve_command",
     "serve a built-in agent over HTTP (native or OpenAI protocol)"),
]
