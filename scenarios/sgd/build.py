"""Building SGD packs: mine dialogues and schemas, generate data for services without dialogues, write.

``build_pack`` writes into a temporary sibling directory and renames it at the end, so a failed build
leaves nothing behind; the same inputs give byte-identical files (gzip without timestamps).
"""

from __future__ import annotations

import gzip
import hashlib
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable

import msgspec

from ...engine.errors import UserError
from .corpus import dialogue_files, read_dialogue_file, validate_dialogue
from .mine import Miner
from .pack import FORMAT, MANIFEST, VERSION, is_pack_dir
from .pairs import order_dates, slot_pairs
from .schema import ServiceSchema, load_schemas
from .values import ANY_VALUES, generate, slot_kind, value_kind

GENERATED_ROWS = 40
POOL_SIZE = 16
NOTICE = """This scenario pack is derived from the Schema-Guided Dialogue (SGD) dataset
(Rastogi, Zang, Sunkara, Gupta, Khaitan: "Towards Scalable Multi-domain Conversational Agents: The
Schema-Guided Dialogue Dataset", AAAI 2020; SGD-X: Lee et al., AAAI 2022), released by Google under the
Creative Commons Attribution-ShareAlike 4.0 International licence (CC BY-SA 4.0).
Source: https://github.com/google-research-datasets/dstc8-schema-guided-dialogue
The derived data in this directory (schemas, entity tables, surface forms, delexicalised templates and
statistics) is itself licensed under CC BY-SA 4.0: https://creativecommons.org/licenses/by-sa/4.0/
Changes: entity rows, value variants and utterance templates were extracted from the dialogues and
de-duplicated; entities for services without dialogues were generated.
"""


def _dialogue_files(dirs: Iterable[str | Path]) -> list[Path]:
    files: list[Path] = []
    for d in dirs:
        d = Path(d)
        if d.is_file():
            files.append(d)
        elif d.is_dir():
            found = dialogue_files(d)
            if not found:
                raise UserError(f"{d}: no dialogues_*.json files in this directory")
            files.extend(found)
        else:
            raise UserError(f"{d}: no such dialogue directory or file")
    return files


def _read_dialogues(path: Path, schemas: dict[str, Any]) -> list[dict[str, Any]]:
    """The dialogues of one file as plain JSON for the miner, read and checked as ``import sgd`` reads them (SGD's
    shape, the schemas' names); a problem is a UserError naming the file, dialogue, turn and element."""
    dialogues = read_dialogue_file(path)
    for dialogue in dialogues:
        problem = validate_dialogue(dialogue, schemas)
        if problem is not None:
            raise UserError(f"{path}: {problem}")
    return msgspec.to_builtins(dialogues)


def _merge_schemas(paths: Iterable[str | Path]) -> tuple[list[dict[str, Any]], list[str]]:
    merged: dict[str, dict[str, Any]] = {}
    origin: dict[str, str] = {}
    sources = []
    for p in paths:
        for svc in load_schemas(p):
            name = svc["service_name"]
            if name in merged and merged[name] != svc:
                raise UserError(f"{p}: service {name!r} differs from the schema of the same name in {origin[name]}")
            merged.setdefault(name, svc)
            origin.setdefault(name, str(p))
        sources.append("/".join(Path(p).parts[-2:]))
    if not merged:
        raise UserError("pack build: no schemas given (--schemas SCHEMA_JSON...)")
    return [merged[k] for k in sorted(merged)], sources


def _seeded(*parts: str) -> random.Random:
    digest = hashlib.blake2b("\x1f".join(parts).encode(), digest_size=8).digest()
    return random.Random(int.from_bytes(digest, "big"))


def build_pack(dialogue_dirs: Iterable[str | Path], schema_paths: Iterable[str | Path], out_dir: str | Path,
               progress: Callable[[Iterable[Any]], Iterable[Any]] | None = None) -> dict[str, Any]:
    """Mine dialogues under the given schemas and write a pack to ``out_dir``; returns its manifest."""
    schemas, schema_sources = _merge_schemas(schema_paths)
    services = {s["service_name"]: ServiceSchema(s) for s in schemas}
    files = _dialogue_files(dialogue_dirs)
    out = Path(out_dir)
    if out.exists() and not (out.is_dir() and (is_pack_dir(out) or not any(out.iterdir()))):
        raise UserError(f"{out}: exists and is not a pack directory; refusing to overwrite it")
    miner = Miner(services)
    by_name = {s["service_name"]: s for s in schemas}
    for f in (progress(files) if progress else files):
        where = str(f)
        for d in _read_dialogues(f, by_name):
            miner.add(d, where)
    entities, generated = _entities(miner, services)
    spoken, glob = miner.spoken_out()
    pools = _pools(miner, services, entities)
    templates = {sp: miner.templates_out(sp) for sp in ("USER", "SYSTEM")}
    templates["generic"] = {sp: miner.generic_out(sp) for sp in ("USER", "SYSTEM")}
    templates["slot"] = {sp: miner.by_slot_out(sp) for sp in ("USER", "SYSTEM")}
    blobs = {
        "schemas.json": msgspec.json.encode(schemas),
        "entities.json.gz": msgspec.json.encode(entities),
        "values.json.gz": msgspec.json.encode({"spoken": spoken, "global": glob, "pools": pools}),
        "templates.json.gz": msgspec.json.encode(templates),
        "stats.json": msgspec.json.encode(miner.stat.out()),
    }
    h = hashlib.blake2b(digest_size=6)
    for name in sorted(blobs):
        h.update(name.encode() + b"\0" + blobs[name])
    mined = sorted(s for s in services if s in miner.stat.svc)
    manifest = {
        "format": FORMAT, "version": VERSION, "id": f"sgd-{h.hexdigest()}",
        "license": "CC BY-SA 4.0 (derived from the Schema-Guided Dialogue dataset; see NOTICE)",
        "sources": {"schemas": schema_sources, "dialogue_files": ["/".join(f.parts[-2:]) for f in files]},
        "counts": {"services": len(services), "mined_services": len(mined), "dialogues": miner.dialogues,
                   "turns": miner.turns, "templated_turns": miner.delex_ok,
                   "entity_rows": sum(len(t["rows"]) for i in entities.values() for t in i.values()),
                   "signatures": sum(len(s) for sp in ("USER", "SYSTEM") for s in templates[sp].values())},
        "mined_services": mined, "generated_services": generated,
        "files": {"schemas": "schemas.json", "entities": "entities.json.gz", "values": "values.json.gz",
                  "templates": "templates.json.gz", "stats": "stats.json"},
    }
    _write_atomically(out, blobs, manifest)
    return manifest


def _mined_values(miner: Miner, services: dict[str, ServiceSchema], rows: bool) -> dict[tuple[str, str], list[str]]:
    """Values seen per (slot name, kind) in service calls (and result rows): material for generation.

    A slot's kind is judged from its values too, so that a taxi's "destination" (addresses, restaurants)
    never lends values to a flight's destination city; categorical slots lend none."""
    seen: dict[tuple[str, str], set[str]] = {}

    def add(svc: str, slot: str, values: Iterable[str]) -> None:
        if services[svc].is_categorical(slot):
            return
        seen.setdefault((svc, slot), set()).update(v for v in values if v != "dontcare")

    for svc, slots in miner.params.items():
        for slot, cnt in slots.items():
            add(svc, slot, cnt)
    if rows:
        for svc, intents in miner.rows.items():
            for table in intents.values():
                for row in table:
                    for k, v in row:
                        add(svc, k, (v,))
    out: dict[tuple[str, str], set[str]] = {}
    for (svc, slot), values in sorted(seen.items()):
        kind = value_kind(services[svc].slots[slot], sorted(values))
        out.setdefault((slot, kind), set()).update(values)
        out.setdefault((f"{services[svc].domain}/{slot}", kind), set()).update(values)
    return {k: sorted(v) for k, v in out.items()}


def _entities(miner: Miner, services: dict[str, ServiceSchema]) -> tuple[dict[str, Any], list[str]]:
    mined_values = _mined_values(miner, services, rows=True)
    entities: dict[str, Any] = {}
    generated: list[str] = []
    for name, svc in sorted(services.items()):
        for intent in svc.search_intents:
            rows = sorted(miner.rows.get(name, {}).get(intent.name, ()))
            if rows:
                cols = sorted({k for r in rows for k, _ in r})
                table = [[dict(r).get(c, "") for c in cols] for r in rows]
                echo = miner.echo_slots(name, intent.name)
            else:
                rng = _seeded(name, intent.name)
                cols = sorted(set(intent.result_slots) | set(intent.required_slots))
                table = []
                echo = [s for s in list(intent.required_slots) + list(intent.optional_slots)
                        if s in cols and slot_kind(svc.slots[s]) in ("date", "count")]
                for _ in range(GENERATED_ROWS):
                    # most rows keep an optional slot's default, so that a search leaving it out finds some
                    row = tuple(intent.optional_slots[c] if c in intent.optional_slots and rng.random() < 0.6
                                and intent.optional_slots[c] not in ANY_VALUES and c not in echo
                                else generate(svc.slots[c], rng, mined_values, svc.domain) for c in cols)
                    table.append(list(_sensible(svc, cols, row, rng, mined_values)))
                if name not in generated:
                    generated.append(name)
            entities.setdefault(name, {})[intent.name] = {"columns": cols, "rows": distinct_rows(cols, table, echo),
                                                          "echo": echo}
    return entities, generated


def distinct_rows(columns: list[str], rows: list[list[str]], echo: list[str]) -> list[list[str]]:
    """The rows without repeats, first kept: rows that agree on every column but the echo ones are one entity.

    The world overwrites a search's echo columns with the request's values (the party size, the date), so
    such rows would come back as identical results (the same 11:10 bus, mined once per travellers count).
    """
    keep = [k for k, c in enumerate(columns) if c not in echo]
    seen: set[tuple[str, ...]] = set()
    out = []
    for row in rows:
        key = tuple(row[k] for k in keep)
        if key not in seen:
            seen.add(key)
            out.append(row)
    return out


def _sensible(svc: ServiceSchema, cols: list[str], row: tuple[str, ...], rng: random.Random,
              mined_values: dict[tuple[str, str], list[str]]) -> tuple[str, ...]:
    """A generated row whose trip ends differ and whose end dates follow start dates (columns drawn alone
    would give flights from San Francisco to San Francisco returning before they leave)."""
    places, dates = slot_pairs(cols)
    if not places and not dates:
        return row
    values = dict(zip(cols, row))
    for a, b in places:
        for _ in range(20):
            if values[a].lower() != values[b].lower():
                break
            values[b] = generate(svc.slots[b], rng, mined_values, svc.domain)
    for a, b in dates:
        order_dates(values, a, b, rng)
    return tuple(values[c] for c in cols)


def _pools(miner: Miner, services: dict[str, ServiceSchema], entities: dict[str, Any]) -> dict[str, Any]:
    mined_values = _mined_values(miner, services, rows=False)
    pools: dict[str, Any] = {}
    for name, svc in sorted(services.items()):
        for slot, spec in svc.slots.items():
            vals: dict[str, None] = {}
            for v in spec.possible_values:
                vals[v] = None
            for v in sorted(miner.params.get(name, {}).get(slot, {})):
                if v != "dontcare":
                    vals[v] = None
            for v in sorted(miner.outputs.get(name, {}).get(slot, {})):
                if v != "dontcare" and (not spec.is_categorical or v in spec.possible_values):
                    vals[v] = None
            for table in entities.get(name, {}).values():
                if slot in table["columns"]:
                    k = table["columns"].index(slot)
                    for row in table["rows"]:
                        vals[row[k]] = None
            vals.pop("", None)
            if not vals:
                rng = _seeded(name, slot, "pool")
                for _ in range(POOL_SIZE):
                    vals[generate(spec, rng, mined_values, svc.domain)] = None
            pools.setdefault(name, {})[slot] = list(vals)
    return pools


def _write_atomically(out: Path, blobs: dict[str, bytes], manifest: dict[str, Any]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    os.chmod(tmp, 0o755)
    try:
        for name, blob in blobs.items():
            data = gzip.compress(blob, compresslevel=9, mtime=0) if name.endswith(".gz") else blob
            (tmp / name).write_bytes(data)
        (tmp / "NOTICE").write_text(NOTICE)
        (tmp / MANIFEST).write_bytes(msgspec.json.format(msgspec.json.encode(manifest), indent=2) + b"\n")
        if out.exists():
            old = out.with_name(f".{out.name}.old.{os.getpid()}")
            os.rename(out, old)
            os.rename(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
