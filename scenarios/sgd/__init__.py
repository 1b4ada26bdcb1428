"""Schema-Guided Dialogue scenarios: schemas, mined packs, NLG, the simulated world, goals and the scenario set."""
