"""A vendor audit's items are read a chunk at a time, as a run's are (issue 27: memory flat in
the number of items): while the vendor files are checked, while the audit's run is created and
while a dry run renders its prompts, live ``Item`` objects stay bounded by the chunk. What is
stored is what a reference written here reads from the files, shards keep whole encounters,
and a vendor file changed after the check leaves nothing written.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

import clinjudge.inputs._vendors as vendors_module
from clinjudge.inputs import InputError
from clinjudge.judges import ModelSettings
from clinjudge.orchestration import RunConfig, create_run, estimate_run, prepare_audit
from clinjudge.orchestration._run_items import ITEM_CHUNK
from clinjudge.rubrics import Item
from clinjudge.runs import RunStore
from tests.factories import make_items, write_jsonl

MOCK = ModelSettings(model="mock/judge")
VENDORS = ("alpha", "beta", "gamma")
BOUND = 2 * ITEM_CHUNK + 16
"""Live items a chunked read may leave at once: the chunk read, the last one, a few more."""


def _live_items() -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o) is Item)


def _vendor_files(tmp_path: Path, encounters: int) -> list[Path]:
    """One JSONL file per vendor, the same encounter ids (``enc-0000`` ...), and each vendor's
    own summary; beta lacks every seventh encounter."""
    paths = []
    for vendor in VENDORS:
        items = [
            item.model_copy(update={"summary": f"{vendor} wrote: {item.summary}"})
            for n, item in enumerate(make_items(encounters, "enc"))
            if vendor != "beta" or n % 7
        ]
        paths.append(write_jsonl(tmp_path / f"{vendor}.jsonl", items))
    return paths


def _config(tmp_path: Path, paths: list[Path], **extra: Any) -> RunConfig:
    settings: dict[str, Any] = {"db": str(tmp_path / "audit.duckdb"), **extra}
    return RunConfig(data=str(paths[0]), judge=MOCK, **settings)


def _reference(paths: list[Path]) -> list[dict[str, Any]]:
    """What the audit must store, read here with ``json``: every record of every file in file
    order, its id ``vendor::encounter``, the vendor the file's stem."""
    rows = []
    for path in paths:
        for line in path.read_text().splitlines():
            record = json.loads(line)
            rows.append(
                {
                    "item_id": f"{path.stem}::{record['id']}",
                    "vendor": path.stem,
                    "encounter_id": record["id"],
                    "summary": record["summary"],
                    "notes": [n["text"] if isinstance(n, dict) else n for n in record["notes"]],
                }
            )
    for position, row in enumerate(rows):
        row["position"] = position
    return rows


def _stored(db: Path, run_id: str) -> list[dict[str, Any]]:
    with RunStore(db, read_only=True) as store:
        rows = store.query(
            "SELECT item_id, vendor, position, summary, notes, meta FROM items "
            "WHERE run_id = ? ORDER BY position",
            [run_id],
        )
    return [
        {
            "item_id": r["item_id"],
            "vendor": r["vendor"],
            "encounter_id": json.loads(r["meta"])["encounter_id"],
            "summary": r["summary"],
            "notes": [note["text"] for note in json.loads(r["notes"])],
            "position": r["position"],
        }
        for r in rows
    ]


def test_an_audit_never_holds_all_its_items(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = _vendor_files(tmp_path, 500)  # 1,428 items
    peaks: dict[str, int] = {"check": 0, "create": 0}
    phase = ["check"]
    real_audited = vendors_module._audited
    seen = [0]

    def audited(*args: Any, **kwargs: Any) -> Item | None:
        seen[0] += 1
        if seen[0] % 100 == 0:
            peaks[phase[0]] = max(peaks[phase[0]], _live_items())
        return real_audited(*args, **kwargs)

    monkeypatch.setattr(vendors_module, "_audited", audited)
    prepared, audit = prepare_audit(_config(tmp_path, paths), paths)
    assert len(prepared.items) == len(audit.ids) == 1428
    after_check = _live_items()
    phase[0] = "create"
    with RunStore(tmp_path / "audit.duckdb") as store:
        run_id = create_run(store, prepared)
    estimate = estimate_run(prepared)
    assert estimate.prompts == 1428
    # Before: the check kept every vendor's items in a list, 1,428 of them alive from the
    # check to the end of the audit.
    assert peaks["check"] < BOUND, peaks
    assert peaks["create"] < BOUND, peaks
    assert after_check < BOUND
    assert _stored(tmp_path / "audit.duckdb", run_id) == _reference(paths)


def _shard_of(encounter: str, count: int) -> int:
    # The documented rule: sha256 of the id, first 8 bytes big-endian, modulo n, from 1.
    digest = hashlib.sha256(encounter.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % count + 1


def test_shards_keep_whole_encounters_and_share_their_run(tmp_path: Path) -> None:
    paths = _vendor_files(tmp_path, 60)
    reference = _reference(paths)
    run_ids = set()
    for index in (1, 2):
        db = tmp_path / f"shard{index}.duckdb"
        config = _config(tmp_path, paths, shard=f"{index}/2", db=str(db))
        prepared, _ = prepare_audit(config, paths)
        with RunStore(db) as store:
            run_ids.add(create_run(store, prepared))
        wanted = [r for r in reference if _shard_of(r["encounter_id"], 2) == index]
        assert _stored(db, prepared.run_id or "") == wanted
        assert 0 < len(wanted) < len(reference)
    assert len(run_ids) == 1


@pytest.mark.parametrize("same_stamp", [False, True], ids=["new stamp", "same size and time"])
def test_a_vendor_file_changed_after_the_check_writes_nothing(
    tmp_path: Path, same_stamp: bool
) -> None:
    paths = _vendor_files(tmp_path, 600)
    prepared, _ = prepare_audit(_config(tmp_path, paths), paths)
    gamma = paths[2]
    before = os.stat(gamma)
    # Encounter 590 of gamma becomes 599's twin id: valid, the same length, found late.
    lines = gamma.read_text().splitlines(keepends=True)
    lines[590] = lines[590].replace('"enc-0590"', '"enc-0599"' if same_stamp else '"enc-x590"')
    gamma.write_text("".join(lines))
    if same_stamp:
        os.utime(gamma, ns=(before.st_atime_ns, before.st_mtime_ns))
    with RunStore(tmp_path / "audit.duckdb") as store, pytest.raises(InputError) as caught:
        create_run(store, prepared)
    message = str(caught.value)
    if same_stamp:
        # Only reading the records again finds it, where it happens.
        assert f"{gamma}:line 591: not the record checked there" in message, message
    else:
        assert f"{gamma}: the file changed since its items were checked" in message
    with RunStore(tmp_path / "audit.duckdb", read_only=True) as store:
        assert store.query("SELECT count(*) AS n FROM runs") == [{"n": 0}]
        assert store.query("SELECT count(*) AS n FROM items") == [{"n": 0}]
