"""The bundled default SGD pack: loads, is small, carries its attribution, covers every split's services."""

from __future__ import annotations

from pathlib import Path

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
