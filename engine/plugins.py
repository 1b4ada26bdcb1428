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
    ("scenarios", "golden", "dialogsim.scenarios.evals.scenario_set:load_golden_scenarios",
     "a golden dataset's questions, their user inputs said in order (golden:FILE)"),
    ("scenarios", "evalset", "dialogsim.scenarios.evals.scenario_set:load_evalset_scenarios",
     "an evalset's conversation scenarios, for a model-driven user (evalset:FILE)"),
    ("scenarios", "proactive", "dialogsim.scenarios.proactive.scenario_set:load",
     "clarify-or-answer tasks: proactive:mbpp[:sanitized], proactive:synthetic[:coding|planning], proactive:FILE"),
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
    ("projection", "rl", "dialogsim.rl.projection:RlProjection", "TC-Bot-style RL transitions and feasible actions"),
    ("projection", "rl_compat", "dialogsim.rl.compat:RlCompatProjection",
     "four.json and feasible_action.json exactly as the seed converter writes them"),
    ("projection", "golden", "dialogsim.scenarios.evals.golden_projection:GoldenProjection",
     "any run as a golden dataset (user inputs, reference tool calls, trajectory, state)"),
    ("projection", "eval_csv", "dialogsim.scenarios.evals.eval_csv:EvalCsvProjection",
     "one simulation-CSV row per episode, with its trace as OpenTelemetry GenAI spans"),
    ("projection", "otel", "dialogsim.scenarios.evals.otel:OtelProjection", "the run as OTLP/JSON traces"),
    ("projection", "trajectories", "dialogsim.scenarios.proactive.projections:TrajectoriesProjection",
     "preference-trajectory records, mainline first, then its branches"),
    ("projection", "preference_pairs", "dialogsim.scenarios.proactive.projections:PreferencePairsProjection",
     "preference pairs scored by running the code (pairs, DPO and action-token DPO files)"),
    ("corpus", "sgd", "dialogsim.scenarios.sgd.corpus:read_corpus", "an SGD split directory"),
    ("metric", "dst_joint_goal_accuracy", "dialogsim.scenarios.sgd.dst_metrics:episode_joint_goal_accuracy",
     "SGD DST joint goal accuracy of the agent's tracked state, over the user frames"),
    ("command", "run", "dialogsim.engine.commands.run", "simulate episodes into a run directory (or --resume one)"),
    ("command", "events", "dialogsim.engine.commands.events", "print a run's events, filtered"),
    ("command", "project", "dialogsim.engine.commands.project",
     "derive a dataset or metrics from a run's events (incremental)"),
    ("command", "stats", "dialogsim.engine.commands.stats",
     "success rate, turns, acts, intents and diversity of a run, optionally beside a real corpus"),
    ("command", "verify", "dialogsim.engine.commands.verify",
     "re-simulate a run's episodes from their seeds and compare every event with the log"),
    ("command", "replay", "dialogsim.engine.commands.replay",
     "the users of a run against another agent, into a new run"),
    ("command", "fork", "dialogsim.engine.commands.fork",
     "new episodes that copy a run's first turns and go on live (branches with their own options)"),
    ("command", "diff", "dialogsim.engine.commands.diff",
     "two runs' episodes paired: outcome transitions, first differing turns, metric deltas with paired statistics"),
    ("command", "import", None, "turn an external corpus into an event log"),
    ("command", "import sgd", "dialogsim.scenarios.sgd.import_command",
     "import an SGD split directory (dialogues_*.json + schema.json)"),
    ("command", "import tcbot", "dialogsim.rl.import_command",
     "import a TC-Bot-style simulated-dialogue file ({episode_id: [act, ...]})"),
    ("command", "import trajectories", "dialogsim.scenarios.proactive.import_command",
     "import a JSONL file of preference-trajectory records"),
    ("command", "eval-dst", "dialogsim.scenarios.sgd.eval_dst_command",
     "official SGD DST metrics of any model's SGD-format output against a reference"),
    ("command", "eval", "dialogsim.scenarios.evals.eval_command",
     "score a run's episodes: latency, tools, tokens, cost, golden references"),
    ("command", "pack", None, "scenario packs"),
    ("command", "pack build", "dialogsim.scenarios.sgd.pack_command",
     "build an SGD scenario pack from dialogues and schemas"),
    ("command", "serve-agent", "dialogsim.agents.http.serve_command",
     "serve a built-in agent over HTTP (native or OpenAI protocol)"),
]
