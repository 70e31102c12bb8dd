"""Turn the ACI-BENCH development copy into clinjudge inputs, one JSONL file per system.

Each record: ``id`` (encounter id), ``notes`` (the doctor-patient dialogue, one turn per line, so
DocLens can number the turns), ``summary`` (the system's note), ``reference`` (the reference
note), ``specialty`` (``--specialty``, default ``Primary Care``: PDSQI-9 needs the specialty of
the provider the summary is for, and ACI-BENCH does not record one), ``vendor`` (the system) and
``meta.dataset``. The files feed ``judge audit`` (five systems on the same 40 encounters),
``judge run --rubric doclens`` or ``judge run --rubric pdsqi9``.

ACI-BENCH is CC BY 4.0 (role-played encounters, no real patients). Its files are read from
``../shared/data/aci-bench`` (or ``--source``) and never copied into this repository.

Usage::

    python scripts/aci_bench_to_jsonl.py --out /tmp/aci [--limit 10] [--specialty Orthopedics]
    judge audit --rubric doclens --data /tmp/aci/BART_large.jsonl --data /tmp/aci/LED.jsonl
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

DEFAULT_SOURCE = Path(__file__).resolve().parents[2] / "shared" / "data" / "aci-bench"
DEFAULT_SPECIALTY = "Primary Care"


def _rows(path: Path) -> dict[str, dict[str, str]]:
    csv.field_size_limit(sys.maxsize)
    with path.open(newline="", encoding="utf-8") as handle:
        return {row["encounter_id"]: row for row in csv.DictReader(handle)}


def convert(
    source: Path, out: Path, limit: int | None = None, specialty: str = DEFAULT_SPECIALTY
) -> list[Path]:
    """Write one JSONL file per system; returns the files written.

    Args:
        source: The ACI-BENCH folder (``test1.csv`` and ``predictions/``).
        out: Folder for the JSONL files.
        limit: Keep only the first N encounters.
        specialty: The specialty of the provider the notes are for (every record).
    """
    reference = _rows(source / "test1.csv")
    encounters = list(reference)[:limit]
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for predictions in sorted((source / "predictions").glob("*.csv")):
        system = _rows(predictions)
        target = out / f"{predictions.stem}.jsonl"
        with target.open("w", encoding="utf-8") as handle:
            for encounter in encounters:
                if encounter not in system:
                    continue
                row = reference[encounter]
                record = {
                    "id": encounter,
                    "notes": [{"id": "dialogue", "text": row["dialogue"]}],
                    "summary": system[encounter]["note"],
                    "reference": row["note"],
                    "specialty": specialty,
                    "vendor": predictions.stem,
                    "meta": {"dataset": row["dataset"], "source": "aci-bench test1 (CC BY 4.0)"},
                }
                handle.write(json.dumps(record) + "\n")
        written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument(
        "--specialty",
        default=DEFAULT_SPECIALTY,
        help="specialty of the provider the notes are for (PDSQI-9 input); ACI-BENCH records "
        f"none (default: {DEFAULT_SPECIALTY})",
    )
    args = parser.parse_args(argv)
    if not args.specialty.strip():
        print("error: --specialty must not be empty", file=sys.stderr)
        return 2
    if not (args.source / "test1.csv").is_file():
        print(f"error: {args.source}: no ACI-BENCH test1.csv here", file=sys.stderr)
        return 2
    for path in convert(args.source, args.out, args.limit, args.specialty.strip()):
        print(path)
    print(f"specialty of every record: {args.specialty.strip()!r} (--specialty)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
