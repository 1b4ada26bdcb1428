"""Homes_2, the SGD service with a slot named "intent": import, round trips, pack build, SGD-X, simulation."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import msgspec
import pytest

from dialogsim.agents.nlu import ValueMatcher
from dialogsim.engine.cli import main
from dialogsim.scenarios.sgd.build import build_pack
from dialogsim.scenarios.sgd.pack import load_pack
from dialogsim.scenarios.sgd.schema import load_schemas, names_intents
from dialogsim.scenarios.sgd.corpus import SgdDialogue, read_dialogue_file, validate_dialogue
from dialogsim.scenarios.sgd.sgdx import VARIANTS, load_sgdx
from dialogsim.users.understanding import Context, Understanding

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "sgd_homes"
SPLIT = FIXTURE / "test"  # hand-written Homes_2 dialogues and the real test-split schema of Homes_2
SGDX_V1 = ["--sgdx", "v1", "--sgdx-dir", str(FIXTURE / "sgd_x"), "--sgdx-originals", str(FIXTURE)]
HOMES_INTENTS = {"FindHomeByArea", "ScheduleVisit"}


def _schemas(path: Path) -> dict[str, dict]:
    return {s["service_name"]: s for s in load_schemas(path)}


def _acts(dialogues: list[dict]) -> set[tuple[str, str, tuple[str, ...]]]:
    return {(a["act"], a["slot"], tuple(a["values"])) for d in dialogues for t in d["turns"] for f in t["frames"]
            for a in f["actions"]}


def test_intent_acts_name_intents_and_a_slot_named_intent_is_a_slot():
    """INFORM_INTENT/OFFER_INTENT name intents; other acts on "intent" inform a slot the schema defines, and
    name intents only where the schema has no such slot."""
    homes, restaurants = {"intent", "area"}, {"city", "cuisine"}
    assert names_intents("INFORM_INTENT", "intent", homes) and names_intents("OFFER_INTENT", "intent", homes)
    assert not names_intents("INFORM", "intent", homes) and not names_intents("REQUEST", "intent", homes)
    assert names_intents("INFORM_INTENT", "intent", restaurants) and names_intents("INFORM", "intent", restaurants)
    assert not names_intents("INFORM", "area", homes) and not names_intents("GOODBYE", "", restaurants)


def test_the_fixture_has_the_acts_that_were_refused():
    """The hand-written dialogues carry what real Homes_2 dialogues carry: REQUEST(intent=[rent, buy]),
    INFORM(intent=[buy]) and, in one frame, INFORM_INTENT(intent=[FindHomeByArea]) beside INFORM(intent=[rent])."""
    dialogues = json.loads((SPLIT / "dialogues_001.json").read_text())
    acts = _acts(dialogues)
    assert {("REQUEST", "intent", ("rent", "buy")), ("INFORM", "intent", ("buy",)),
            ("OFFER_INTENT", "intent", ("ScheduleVisit",))} <= acts
    first = dialogues[1]["turns"][0]["frames"][0]["actions"]
    assert [(a["act"], a["values"]) for a in first if a["slot"] == "intent"] == [
        ("INFORM_INTENT", ["FindHomeByArea"]), ("INFORM", ["rent"])]


def test_homes_dialogues_import_and_project_back_byte_identical(tmp_path, capsys):
    """`import sgd` takes the Homes_2 dialogues whole; projecting the run gives the same file bytes back."""
    run, out = tmp_path / "run", tmp_path / "sgd"
    assert main(["import", "sgd", str(SPLIT), "--out", str(run)]) == 0
    assert "imported 2 dialogues (20 turns)" in capsys.readouterr().out
    assert main(["project", str(run), "--to", "sgd", "--out", str(out), "--no-progress"]) == 0
    assert (out / "dialogues_001.json").read_bytes() == (SPLIT / "dialogues_001.json").read_bytes()
    assert (out / "schema.json").read_bytes() == (SPLIT / "schema.json").read_bytes()


@pytest.mark.parametrize("act, slot, values, element", [
    ("INFORM_INTENT", "intent", ["rent"], "actions[3] (INFORM_INTENT): unknown intent 'rent'"),
    ("OFFER_INTENT", "intent", ["buy"], "actions[3] (OFFER_INTENT): unknown intent 'buy'"),
    ("INFORM", "purpose", ["buy"], "actions[3] (INFORM): unknown slot 'purpose'"),
])
def test_homes_names_outside_the_schema_are_still_refused(tmp_path, act, slot, values, element):
    """The slot "intent" being a slot does not open the door: intent acts must name Homes_2 intents, other
    slots must be Homes_2 slots."""
    data = json.loads((SPLIT / "dialogues_001.json").read_text())
    data[0]["turns"][0]["frames"][0]["actions"].append(
        {"act": act, "canonical_values": values, "slot": slot, "values": values})
    (tmp_path / "dialogues_001.json").write_text(json.dumps(data))
    problem = validate_dialogue(read_dialogue_file(tmp_path / "dialogues_001.json")[0], _schemas(SPLIT / "schema.json"))
    assert problem == f"dialogue H2_00000, turn 0: frame for Homes_2: {element} (not in the schema)"


def test_pack_build_mines_the_intent_slot_as_a_slot(tmp_path):
    """`pack build` accepts the Homes_2 dialogues (the import's checker) and mines rent/buy as the spoken
    values of the slot "intent", never an intent name."""
    manifest = build_pack([SPLIT], [SPLIT / "schema.json"], tmp_path / "pack")
    assert manifest["counts"]["dialogues"] == 2 and manifest["mined_services"] == ["Homes_2"]
    pack = load_pack(tmp_path / "pack")
    values = msgspec.json.decode(gzip.decompress((pack.path / "values.json.gz").read_bytes()))
    assert set(values["spoken"]["Homes_2"]["intent"]) == {"rent", "buy"}


def _sgdx_dialogues(tmp_path: Path) -> list[dict]:
    run, out = tmp_path / "renamed", tmp_path / "renamed_sgd"
    assert main(["import", "sgd", str(SPLIT), "--out", str(run), *SGDX_V1]) == 0
    assert main(["project", str(run), "--to", "sgd", "--out", str(out), "--no-progress"]) == 0
    return json.loads((out / "dialogues_001.json").read_text())


def test_sgdx_renames_the_intent_slot_like_any_slot_and_intent_acts_as_intents(tmp_path):
    """SGD-X v1 (Homes_21): the slot "intent" becomes "purpose" everywhere, while the values of INFORM_INTENT
    and OFFER_INTENT become the variant's intent names; the result passes the checker under the variant schema."""
    dialogues = _sgdx_dialogues(tmp_path)
    acts = _acts(dialogues)
    assert {("REQUEST", "purpose", ("rent", "buy")), ("INFORM", "purpose", ("buy",)),
            ("INFORM_INTENT", "intent", ("FindAHome",)), ("OFFER_INTENT", "intent", ("SchedulePropertyVisit",))} <= acts
    assert all(a[0] in ("INFORM_INTENT", "OFFER_INTENT") for a in acts if a[1] == "intent")
    user = dialogues[0]["turns"][2]["frames"][0]
    assert user["state"]["slot_values"]["purpose"] == ["buy"] and "intent" not in user["state"]["slot_values"]
    system = dialogues[0]["turns"][3]["frames"][0]
    assert system["service_call"]["method"] == "FindAHome" and system["service_call"]["parameters"]["purpose"] == "buy"
    assert all(row["purpose"] == "buy" and "intent" not in row for row in system["service_results"])
    variant = _schemas(FIXTURE / "sgd_x" / "v1" / "test" / "schema.json")
    for d in dialogues:
        assert validate_dialogue(msgspec.convert(d, SgdDialogue), variant) is None


def test_sgdx_on_the_projection_equals_sgdx_on_import(tmp_path):
    """Renaming while projecting a plain import gives the bytes of renaming while importing."""
    plain, out = tmp_path / "plain", tmp_path / "plain_sgd"
    assert main(["import", "sgd", str(SPLIT), "--out", str(plain)]) == 0
    assert main(["project", str(plain), "--to", "sgd", "--out", str(out), "--no-progress", *SGDX_V1]) == 0
    _sgdx_dialogues(tmp_path)
    assert (out / "dialogues_001.json").read_bytes() == (tmp_path / "renamed_sgd" / "dialogues_001.json").read_bytes()


def test_real_sgdx_variants_rename_homes_2(shared_sgd):
    """Under each of the five real SGD-X variants, the Homes_2 dialogues come out in the variant's names
    and pass the checker under the variant's test-split schemas."""
    dialogues = read_dialogue_file(SPLIT / "dialogues_001.json")
    originals = _schemas(shared_sgd / "schemas" / "test" / "schema.json")
    for variant in VARIANTS:
        mapping = load_sgdx(variant, shared_sgd / "sgd_x")
        slot = mapping.slots["Homes_2"]["intent"]
        assert slot != "intent"
        schemas = {mapping.service(name): mapping.schema(name) for name in originals}
        for d in dialogues:
            renamed = mapping.dialogue(d)
            assert validate_dialogue(renamed, schemas) is None, variant
            informs = {a.values[0] for t in renamed.turns for f in t.frames for a in f.actions
                       if a.act == "INFORM" and a.slot == slot}
            assert informs in ({"buy"}, {"rent"}), variant


@pytest.mark.parametrize("listen", ["acts", "text"])
def test_simulated_homes_dialogues_round_trip(tmp_path, listen):
    """`run --scenarios 'sgd:#Homes_2'` (the agent reading acts, or text), projected to SGD, imports and
    projects back byte-identical; users inform the slot "intent" with rent/buy and name only Homes_2 intents."""
    run, out, back, again = (tmp_path / n for n in ("run", "sgd", "back", "again"))
    assert main(["run", "--scenarios", "sgd:#Homes_2", "--episodes", "30", "--seed", "5", "--out", str(run),
                 "--agent-opt", f"listen={listen}", "--no-progress"]) == 0
    assert main(["project", str(run), "--to", "sgd", "--out", str(out), "--no-progress"]) == 0
    assert main(["import", "sgd", str(out), "--out", str(back)]) == 0
    assert main(["project", str(back), "--to", "sgd", "--out", str(again), "--no-progress"]) == 0
    assert (again / "dialogues_001.json").read_bytes() == (out / "dialogues_001.json").read_bytes()
    dialogues = json.loads((out / "dialogues_001.json").read_text())
    acts = _acts(dialogues)
    assert {v for a, s, vs in acts if a == "INFORM" and s == "intent" for v in vs} == {"rent", "buy"}
    assert {v for a, s, vs in acts if a in ("INFORM_INTENT", "OFFER_INTENT") for v in vs} <= HOMES_INTENTS


def test_agent_reads_only_homes_intents_from_text(pack):
    """Read from text, a Homes_2 user turn names Homes_2's intents only (other services' INFORM_INTENT
    templates are not templates of its slot "intent"), and rent/buy inform that slot."""
    nlu = ValueMatcher(pack, ["Homes_2"])
    texts = ["I'm looking for an apartment to rent in Fremont.", "I would like to book an appointment to see it.",
             "Not now, thanks. Bye."]
    texts += [t["utterance"] for d in json.loads((SPLIT / "dialogues_001.json").read_text()) for t in d["turns"]
              if t["speaker"] == "USER"]
    for text in texts:
        for service, intent in ((None, None), ("Homes_2", "FindHomeByArea")):
            got = nlu.parse(text, service, intent, set(), [])
            named = {v for _, a in got if a.act == "INFORM_INTENT" for v in a.canonical_values}
            assert named <= HOMES_INTENTS, (text, named)
    got = nlu.parse("I'm looking for an apartment to rent in Fremont.", "Homes_2", "FindHomeByArea", set(), [])
    assert ("INFORM", "intent", ["rent"]) in [(a.act, a.slot, a.canonical_values) for _, a in got]


def test_user_reads_only_homes_intent_offers_from_text(pack):
    """The agenda user's text reading offers Homes_2's intents only in Homes_2 (not other services' offers)."""
    reader = Understanding(pack)
    ctx = Context("Homes_2", "FindHomeByArea")
    for text in ("Would you like to transfer money?", "Do you want me to play the song?",
                 "Should I rent the movie for you?", "Would you like to schedule a visit?"):
        offered = {v for a in reader.understand(text, ctx) if a.act == "OFFER_INTENT" for v in a.values}
        assert offered <= HOMES_INTENTS, (text, offered)
    got = reader.understand("Would you like to schedule a visit?", ctx)
    assert [(a.act, a.values) for a in got] == [("OFFER_INTENT", ["ScheduleVisit"])]
