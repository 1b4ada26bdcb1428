"""Agent-evaluation traces: golden datasets and evalsets as scenario sets, the golden / eval_csv / otel
projections, OpenTelemetry GenAI spans of an episode, and the metrics of ``dialogsim eval`` (docs/evals.md)."""
