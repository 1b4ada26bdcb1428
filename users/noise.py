"""A TC-Bot-style error model for simulated users: wrong slot values, dropped slots, wrong intents.

TC-Bot corrupts the user's dialogue acts with a slot error rate (per informed slot: replace the value,
or drop the slot) and an intent error rate. Here the user actually says the corrupted acts (utterance
and actions agree, so the annotations stay exact) and repairs them on its next turn, as a person
correcting a slip would: "No, I meant ...". The user's dialogue state always holds what it means.
"""

from __future__ import annotations

import random
from typing import Any

Item = tuple[str, str, str, Any]  # (service, act, slot, canonical value or None)

MODES = ("value", "drop", "mixed")


class NoiseModel:
    """Slot and intent errors at given rates; ``mode`` picks how a slot error looks."""

    def __init__(self, slot_error: float = 0.0, intent_error: float = 0.0, mode: str = "mixed") -> None:
        if not 0.0 <= slot_error <= 1.0 or not 0.0 <= intent_error <= 1.0:
            raise ValueError("noise rates must lie in [0, 1]")
        if mode not in MODES:
            raise ValueError(f"noise mode must be one of {', '.join(MODES)}")
        self.slot_error = slot_error
        self.intent_error = intent_error
        self.mode = mode

    def corrupt(self, acts: list[Item], user: Any, rng: random.Random) -> tuple[list[Item], list[Item]]:
        """The acts as actually said, and the acts that repair the errors on the next turn."""
        noisy: list[Item] = []
        repair: list[Item] = []
        for item in acts:
            service, act, slot, value = item
            if (act == "INFORM" and value not in (None, "dontcare") and self.slot_error
                    and rng.random() < self.slot_error):
                mode = self.mode if self.mode != "mixed" else ("value" if rng.random() < 0.5 else "drop")
                other = None
                if mode == "value":
                    pool = [v for v in user.pack.value_pool(service, slot) if v.lower() != str(value).lower()]
                    other = rng.choice(pool) if pool else None
                if other is not None:
                    noisy.append((service, act, slot, other))
                    if not repair:
                        repair.append((service, "NEGATE", "", None))
                repair.append(item)
                if other is None and noisy == [] and acts[-1] is item:
                    noisy.append(item)  # never drop the only act: a silent turn helps nobody
                    repair.pop()
                continue
            if act == "INFORM_INTENT" and self.intent_error and rng.random() < self.intent_error:
                others = [i for i in user.intents_of(service) if i != value]
                if others:
                    noisy.append((service, act, slot, rng.choice(others)))
                    repair.append(item)
                    continue
            noisy.append(item)
        return noisy, repair


def from_options(options: dict[str, Any]) -> NoiseModel | None:
    """A noise model from CLI-style options (``slot_error``, ``intent_error``, ``noise_mode``), or None."""
    slot = float(options.get("slot_error", 0) or 0)
    intent = float(options.get("intent_error", 0) or 0)
    if not slot and not intent:
        return None
    return NoiseModel(slot, intent, str(options.get("noise_mode", "mixed")))
