"""The bundled default SGD pack: loads, is small, carries its attribution, covers every split's services."""

from __future__ import annotations

from pathlib import Path

import pytest

from dialogsim.scenarios.sgd.pack import DEFAULT_PACK, load_pack


def test_bundled_pack_loads_and_is_small():
    """The default pack loads offline, lists the 45 SGD services and stays well under 10 MB."""
    pack = load_pack()
    assert pack.id.startswith("sgd-")
    assert len(pack.services) == 45
    assert len(pack.mined_services) == 17
    size = sum(p.stat().st_size for p in Path(DEFAULT_PACK).rglob("*") if p.is_file())
    assert size < 5 * 1024 * 1024, size


def test_bundled_pack_has_attribution():
    """The derived data names its source and its CC BY-SA 4.0 licence."""
    notice = (Path(DEFAULT_PACK) / "NOTICE").read_text()
    assert "Schema-Guided Dialogue" in notice and "CC BY-SA 4.0" in notice


def test_every_service_has_entities_for_each_search_intent():
    """Mined or generated, every search intent of every service has entity rows to search."""
    pack = load_pack()
    for name in pack.services:
        for intent in pack.service(name).search_intents:
            assert pack.entities(name, intent.name), (name, intent.name)


@pytest.mark.slow
def test_bundled_pack_is_current(tmp_path):
    """Rebuilding from ../shared/sgd with today's builder gives the bundled pack, byte for byte."""
    shared = Path(__file__).resolve().parents[3].parent / "shared" / "sgd"
    if not (shared / "dev").is_dir():
        pytest.skip("../shared/sgd is not available")
    from dialogsim.scenarios.sgd.pack import build_pack

    schemas = [shared / "schemas" / split / "schema.json" for split in ("train", "dev", "test")]
    manifest = build_pack([shared / "dev"], schemas, tmp_path / "pack")
    assert manifest["id"] == load_pack().id, "rebuild scenarios/packs/sgd with `dialogsim pack build`"


def test_bundled_entity_tables_hold_no_duplicate_rows():
    """No two rows of a table are equal, nor equal but for the echo columns the world overwrites."""
    pack = load_pack()
    for name in pack.services:
        for intent in pack.service(name).search_intents:
            echo = set(pack.echo.get(name, {}).get(intent.name, ()))
            rows = pack.entities(name, intent.name)
            exact = {tuple(sorted(r.items())) for r in rows}
            entities = {tuple(sorted((k, v) for k, v in r.items() if k not in echo)) for r in rows}
            assert len(exact) == len(entities) == len(rows), (name, intent.name, len(rows) - len(entities))
