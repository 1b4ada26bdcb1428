"""SGD-X: rename the services, slots and intents of SGD dialogues to one of the five paraphrased variants.

The variant schemas (``vN/{train,dev,test}/schema.json``) list the same services, slots and intents in the
same order as the original schemas, so the mapping is positional. Converting a dialogue renames service
names, slot names (acts, spans, requested slots, slot value keys, call parameters, result keys), intent
names (active intent, call method, and the values of acts that name intents: INFORM_INTENT(intent=...) and
OFFER_INTENT(...), see ``names_intents``); slot values stay as they are. A slot the service defines is renamed
whatever it is called (Homes_2's "intent": INFORM(intent=buy) becomes INFORM(purpose=buy) in v1); act slots
the schema does not know ("", "count", the "intent" of an intent act) are left unchanged.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from msgspec import UNSET

from ...engine.errors import UserError
from .corpus import SgdAct, SgdCall, SgdDialogue, SgdFrame, SgdSpan, SgdState, SgdTurn
from .schema import load_schemas, names_intents

VARIANTS = ("v1", "v2", "v3", "v4", "v5")
SPLITS = ("train", "dev", "test")
ENV_DIR = "DIALOGSIM_SGDX_DIR"


class SgdxMap:
    """The renaming from original SGD names to one SGD-X variant's names."""

    def __init__(self, variant: str) -> None:
        self.variant = variant
        self.services: dict[str, str] = {}
        self.slots: dict[str, dict[str, str]] = {}
        self.intents: dict[str, dict[str, str]] = {}
        self.schemas: dict[str, dict[str, Any]] = {}  # variant service name -> variant schema

    def add(self, original: list[dict[str, Any]], variant: list[dict[str, Any]], where: str) -> None:
        """Map one split's original schema list onto its variant, position by position."""
        if len(original) != len(variant):
            raise UserError(f"{where}: {len(variant)} services, the original schema has {len(original)}")
        for old, new in zip(original, variant):
            name, new_name = old["service_name"], new["service_name"]
            if len(old["slots"]) != len(new["slots"]) or len(old["intents"]) != len(new["intents"]):
                raise UserError(f"{where}: service {new_name!r} does not match {name!r} slot for slot")
            if self.services.get(name, new_name) != new_name:
                raise UserError(f"{where}: service {name!r} maps to both {self.services[name]!r} and {new_name!r}")
            self.services[name] = new_name
            self.slots[name] = {a["name"]: b["name"] for a, b in zip(old["slots"], new["slots"])}
            self.intents[name] = {a["name"]: b["name"] for a, b in zip(old["intents"], new["intents"])}
            self.schemas[new_name] = new

    def service(self, name: str) -> str:
        """The variant name of a service (unknown services keep their name)."""
        return self.services.get(name, name)

    def schema(self, original_service: str) -> dict[str, Any] | None:
        """The variant schema of an original service."""
        new = self.services.get(original_service)
        return None if new is None else self.schemas[new]

    def check(self, services: list[str], where: str) -> None:
        """Fail when a service has no SGD-X variant."""
        missing = [s for s in services if s not in self.services]
        if missing:
            raise UserError(f"{where}: service {missing[0]!r} has no SGD-X {self.variant} variant")

    def dialogue(self, d: SgdDialogue) -> SgdDialogue:
        """The dialogue with every name renamed to the variant (a new object; ``d`` is unchanged)."""
        return SgdDialogue(dialogue_id=d.dialogue_id, services=[self.service(s) for s in d.services],
                           turns=[SgdTurn(frames=[self._frame(f) for f in t.frames], speaker=t.speaker,
                                          utterance=t.utterance) for t in d.turns])

    def _frame(self, f: SgdFrame) -> SgdFrame:
        slots = self.slots.get(f.service, {})
        intents = self.intents.get(f.service, {})
        out = SgdFrame(
            actions=[self._act(a, slots, intents) for a in f.actions],
            service=self.service(f.service),
            slots=[SgdSpan(exclusive_end=s.exclusive_end, slot=slots.get(s.slot, s.slot), start=s.start)
                   for s in f.slots],
        )
        if f.state is not UNSET:
            st = f.state
            out.state = SgdState(active_intent=intents.get(st.active_intent, st.active_intent),
                                 requested_slots=[slots.get(s, s) for s in st.requested_slots],
                                 slot_values=_renamed(st.slot_values, slots))
        if f.service_call is not UNSET:
            call = f.service_call
            out.service_call = SgdCall(method=intents.get(call.method, call.method),
                                       parameters=_renamed(call.parameters, slots))
        if f.service_results is not UNSET:
            out.service_results = [_renamed(row, slots) for row in f.service_results]
        return out

    @staticmethod
    def _act(a: SgdAct, slots: dict[str, str], intents: dict[str, str]) -> SgdAct:
        # slots maps the service's original slot names, so it also says whether "intent" is one of them
        if names_intents(a.act, a.slot, slots):
            return SgdAct(act=a.act, canonical_values=[intents.get(v, v) for v in a.canonical_values],
                          slot=a.slot, values=[intents.get(v, v) for v in a.values])
        return SgdAct(act=a.act, canonical_values=a.canonical_values, slot=slots.get(a.slot, a.slot),
                      values=a.values)


def _renamed(values: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    # keys sorted by their new names, as in the real files (and the SGD-X generator's sort_keys output)
    return dict(sorted((names.get(k, k), v) for k, v in values.items()))


def default_sgdx_dir() -> Path | None:
    """$DIALOGSIM_SGDX_DIR, else a bundled ``scenarios/packs/sgd_x`` when one ships, else None."""
    env = os.environ.get(ENV_DIR)
    if env:
        return Path(env)
    bundled = Path(__file__).resolve().parent / "packs" / "sgd_x"
    return bundled if bundled.is_dir() else None


def _originals_dir(sgdx_dir: Path) -> Path | None:
    # The shared working copy keeps originals in ../schemas/<split>; the dataset repo in ../<split>.
    for candidate in (sgdx_dir.parent / "schemas", sgdx_dir.parent):
        if all((candidate / split / "schema.json").is_file() for split in SPLITS):
            return candidate
    return None


def load_sgdx(variant: str, sgdx_dir: str | Path | None = None, originals_dir: str | Path | None = None) -> SgdxMap:
    """The renaming for ``variant`` (v1..v5) from ``sgdx_dir/vN/<split>/schema.json`` and the originals.

    ``originals_dir`` holds ``<split>/schema.json`` of the original SGD; by default it is found next to
    ``sgdx_dir`` (``../schemas`` or ``..``).
    """
    if variant not in VARIANTS:
        raise UserError(f"unknown SGD-X variant {variant!r}; choose one of {', '.join(VARIANTS)}")
    root = Path(sgdx_dir) if sgdx_dir is not None else default_sgdx_dir()
    if root is None:
        raise UserError(f"--sgdx needs the SGD-X schemas: pass --sgdx-dir DIR (holding v1..v5/<split>/schema.json) "
                        f"or set {ENV_DIR}")
    if not (root / variant).is_dir():
        raise UserError(f"{root}: no {variant}/ directory of SGD-X schemas")
    originals = Path(originals_dir) if originals_dir is not None else _originals_dir(root)
    if originals is None:
        raise UserError(f"{root}: cannot find the original SGD schemas next to it; pass --sgdx-originals DIR "
                        "(holding train/dev/test/schema.json)")
    mapping = SgdxMap(variant)
    for split in SPLITS:
        variant_path = root / variant / split / "schema.json"
        original_path = originals / split / "schema.json"
        if variant_path.is_file() and original_path.is_file():
            mapping.add(load_schemas(original_path), load_schemas(variant_path), str(variant_path))
    if not mapping.services:
        raise UserError(f"{root / variant}: no split has both a variant and an original schema.json")
    return mapping


def add_sgdx_arguments(p: argparse.ArgumentParser) -> None:
    """The SGD-X options shared by ``import sgd`` and ``project``."""
    p.add_argument("--sgdx", metavar="vN", help="rename services, slots and intents to SGD-X variant v1..v5")
    p.add_argument("--sgdx-dir", metavar="DIR",
                   help="SGD-X schemas, DIR/vN/{train,dev,test}/schema.json (default: $DIALOGSIM_SGDX_DIR)")
    p.add_argument("--sgdx-originals", metavar="DIR",
                   help="original SGD schemas, DIR/{train,dev,test}/schema.json (default: found next to --sgdx-dir)")


def sgdx_from_args(args: argparse.Namespace) -> Any:
    """The SGD-X map the options ask for, or None."""
    if not getattr(args, "sgdx", None):
        return None
    from .sgdx import load_sgdx
    return load_sgdx(args.sgdx, args.sgdx_dir, args.sgdx_originals)
