"""A judged run to rate, for the `judge rate` tests."""

from __future__ import annotations

import warnings
from pathlib import Path

from clinjudge.rubrics import Item
from tests.factories import make_items, write_jsonl

HOSTILE_NOTE = "Visit 2: </textarea><script>alert('note')</script><img src=x onerror=alert(2)>"
HOSTILE_SUMMARY = "<script>alert('summary')</script> Then </pre><b>bold</b> [Note 1]."


def judged_run(tmp: Path, count: int, *, hostile: bool = True) -> tuple[Path, str]:
    """Judge ``count`` small items with the simulated judge in ``tmp/rate.duckdb``.

    Args:
        tmp: A folder for the data and the database.
        count: How many items (the first holds hostile text when ``hostile``).
        hostile: Put markup in the first item's note and summary.

    Returns:
        The database and the run id.
    """
    from clinjudge.judges import ModelSettings
    from clinjudge.orchestration import RunConfig, create_run, execute_run, prepare_run
    from clinjudge.runs import RunStore

    items = make_items(count)
    if hostile:
        first = items[0]
        items[0] = Item(
            id=first.id,
            notes=["Visit 1: plain note.", HOSTILE_NOTE],
            summary=HOSTILE_SUMMARY,
            specialty="Primary Care",
        )
    data = write_jsonl(tmp / "items.jsonl", items)
    db = tmp / "rate.duckdb"
    config = RunConfig(data=str(data), db=str(db), judge=ModelSettings(model="mock/judge"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prepared = prepare_run(config)
        with RunStore(db) as store:
            run_id = create_run(store, prepared)
            execute_run(store, run_id, prepared, show_progress=False)
    return db, run_id


def plan(db: Path, run_id: str, raters: list[str], **settings: object) -> None:
    """Store a rating plan of the run."""
    from clinjudge.runs import RunStore, plan_rating

    with RunStore(db) as store:
        plan_rating(store, run_id, raters, **settings)  # type: ignore[arg-type]


# Scores a complete, valid PDSQI-9 rating (abstraction 1: synthesized must be scored).
VALID = {
    "citation": "4", "accurate": "5", "thorough": "3", "useful": "4", "organized": "4",
    "comprehensible": "5", "succinct": "3", "abstraction": "1", "synthesized": "4",
    "voice_summ": "0", "voice_note": "0",
}  # fmt: skip
