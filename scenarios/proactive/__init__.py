"""The preference-trajectory family (ProactiveLLM's format): states (MBPP, synthetic, files), personas and
their rule-based reactions, the action prompts, trajectory records, the reward step and its projections,
and ``dialogsim import trajectories``. See docs/trajectories.md."""
