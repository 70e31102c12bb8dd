"""CPU of the injection scan per item, before and after matching only at candidate positions.

`scan_item` runs every rule of `clinjudge/rubrics/_injection.py` on each untrusted field. Rule
patterns start with `\\b` or `^`, which `re` cannot skip to, so a search tries every position:
on clinical notes, whose common words ("heart rate", "urine output", "system", "user") pass the
rules' needle tests, that was ~0.5 ms per item. The scan now finds where a match can begin
(one pass over the folded text for the rules' leading words, a search for the line-start and
bracket alternatives) and tries the pattern there only; the needle test is asked only of
texts that match.

"Before" below is the previous scan (needle tests first, then each rule's pattern searched
over the whole text), run on the same rules in the same process; "after" is `scan_item`.
Both are checked to give the same flags. Per item: `time.process_time`, best of `--repeat`,
the scan's memo emptied before each repetition. Items are generated: three distinct 1.5 KB
clinical notes and a summary ("distinct notes"), or the throughput benchmark's note made
distinct per item ("benchmark notes", which pass no needle test).

    python bench/injection_scan.py [--items 300] [--repeat 3]
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable

from clinjudge.rubrics import Item, Rubric, SourceNote, _injection, load_rubric, scan_item
from clinjudge.rubrics._confusables import skeleton, visible

_excerpt = _injection._excerpt

_SENTENCES = (
    "Chief complaint: chest pain radiating to the left arm, pain score {n}/10 on arrival.",
    "HPI: {age}-year-old {sex} with hypertension and type 2 diabetes, {n} days of dyspnea.",
    "Vitals: heart rate {hr}, blood pressure {sbp}/{dbp}, respiratory rate {rr}, SpO2 {o2}%.",
    "Exam notable for moderate bilateral lower extremity edema and mild crackles at the bases.",
    "Urine output {big} mL over the last 8 hours; creatinine {dec} mg/dL, up from baseline.",
    "Key findings: troponin {big} ng/L, BNP {big} pg/mL, ECG in sinus rhythm, no ST changes.",
    "Review of systems: negative except as noted; cardiovascular system exam as above.",
    "Patient is a daily user of tobacco, {n} pack-years, and reports occasional alcohol use.",
    "Marked improvement in dyspnea after diuresis with furosemide {n}0 mg IV twice daily.",
    "Plan: do not stop metformin; continue lisinopril {n} mg daily and atorvastatin nightly.",
    "Rate control with metoprolol {n} mg; target heart rate below 110 at rest.",
    "Return precautions reviewed; to return to clinic in {n} weeks or sooner if worse.",
    "Given aspirin 325 mg and nitroglycerin with partial relief; pain now {n}/10.",
    "Output from the chest tube was {big} mL of serosanguinous fluid overnight.",
    "All home medications were reconciled and each was reviewed with the pharmacist.",
    "Assessment: acute on chronic heart failure, preserved ejection fraction, moderate.",
    "Labs: sodium {big}, potassium {dec}, bicarbonate {n}, glucose {big}; A1c {dec}%.",
    "They were counseled on a low-sodium diet, fluid restriction and daily weights.",
    "Nursing to mark the site and document any drainage; grade {n} edema at the ankles.",
    "The patient uses an insulin pump; the device user manual was reviewed with the family.",
    "Neuro: alert and oriented x3, GCS 15, no focal deficits.",
    "Every effort was made to contact the primary care physician, who will follow up.",
)
_BENCHMARK_NOTE = (
    "Seen in clinic for follow-up of hypertension and type 2 diabetes. "
    "Blood pressure 138/84. HbA1c 7.4%. Continue metformin and lisinopril. "
) * 6


def _note(rng: random.Random, size: int = 1500) -> str:
    lines: list[str] = []
    while sum(len(line) + 1 for line in lines) < size:
        lines.append(
            rng.choice(_SENTENCES).format(
                n=rng.randint(1, 10),
                age=rng.randint(18, 95),
                sex=rng.choice(["man", "woman"]),
                hr=rng.randint(50, 140),
                sbp=rng.randint(90, 190),
                dbp=rng.randint(50, 110),
                rr=rng.randint(10, 30),
                o2=rng.randint(85, 100),
                big=rng.randint(100, 4000),
                dec=round(rng.uniform(0.5, 9), 1),
            )
        )
    return "\n".join(lines)


def _items(count: int, kind: str) -> list[Item]:
    rng = random.Random(27)
    items = []
    for n in range(count):
        if kind == "distinct notes":
            texts = [_note(rng) for _ in range(3)]
        else:
            texts = [f"Visit {n}-{k}. {_BENCHMARK_NOTE}" for k in range(3)]
        notes = [SourceNote(id=str(k), text=text) for k, text in enumerate(texts, start=1)]
        summary = f"Patient {n}: heart failure, improving on diuresis [Note 1] [Note 3]."
        items.append(Item(id=str(n), notes=notes, summary=summary, specialty="Cardiology"))
    return items


# -- the scan as it was: needle tests first, then each pattern searched over the whole text ---


_BEFORE_MEMO: dict[tuple[str, tuple[str, ...] | None], list[tuple[str, str]]] = {}
"""The scan's memo, as it was (a repeated text costs a lookup)."""


def _before_text(text: str | None, keys: tuple[str, ...] | None) -> list[tuple[str, str]]:
    if not text:
        return []
    if (text, keys) not in _BEFORE_MEMO:
        _BEFORE_MEMO[text, keys] = _before_search(text, keys)
    return _BEFORE_MEMO[text, keys]


def _before_search(text: str, keys: tuple[str, ...] | None) -> list[tuple[str, str]]:
    checks = _injection._checks(keys)
    plain = visible(text)
    lower = plain.lower()
    folded: str | None = None
    found = []
    for rule in _injection._RULES:
        single = [n for n in rule.needles if " " not in n]
        if not any(map(lower.__contains__, single)):
            for needle in rule.needles:
                if " " in needle and max(needle.split(), key=len) in lower:
                    if folded is None:
                        folded = " ".join(lower.split())
                    if needle in folded:
                        break
            else:
                continue
        if rule.folded:
            if folded is None:
                folded = " ".join(lower.split())
            target = folded
        else:
            target = plain
        match = rule.pattern.search(target)
        if match:
            found.append((rule.name, f"{rule.reason}: {_excerpt(match)!r}"))
    if not text.isascii() or "<" in text or "&" in text:
        target = skeleton(text)
        match = checks.fence.search(target)
        if match:
            found.append(("fence_lookalike", f"{_injection._FENCE_REASON}: {_excerpt(match)!r}"))
    if checks.scores is not None and ('"' in plain or "'" in plain):
        match = checks.scores.search(plain)
        if match:
            found.append(("embedded_scores", f"{_injection._SCORES_REASON}: {_excerpt(match)!r}"))
    return found


def _before(item: Item, rubric: Rubric) -> list[tuple[str, str]]:
    keys = tuple(rubric.keys)
    found = _before_text(item.summary, keys)
    for note in item.notes:
        found += _before_text(note.text, keys)
    found += _before_text(item.reference, keys)
    return found + _before_text(item.specialty, keys)


def _after(item: Item, rubric: Rubric) -> list[tuple[str, str]]:
    return [(f.name, f.reason) for f in scan_item(item, rubric)]


def _per_item(scan: Callable[[Item, Rubric], object], items: list[Item], repeat: int) -> float:
    rubric = load_rubric("pdsqi9")
    best = float("inf")
    for _ in range(repeat):
        _injection._MEMO.clear()
        _BEFORE_MEMO.clear()
        start = time.process_time()
        for item in items:
            scan(item, rubric)
        best = min(best, time.process_time() - start)
    return best / len(items)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rubric = load_rubric("pdsqi9")
    print(f"{'items':<16} {'chars/item':>10} {'before':>10} {'after':>10} {'ratio':>7}")
    for kind in ("distinct notes", "benchmark notes"):
        items = _items(args.items, kind)
        flagged = [_before(item, rubric) for item in items]
        for item, expected in zip(items, flagged, strict=True):
            if _after(item, rubric) != expected:
                raise SystemExit(f"item {item.id}: {_after(item, rubric)} != {expected}")
        chars = sum(len(n.text) for n in items[0].notes) + len(items[0].summary)
        before = _per_item(_before, items, args.repeat)
        after = _per_item(_after, items, args.repeat)
        print(
            f"{kind:<16} {chars:>10} {before * 1e6:>8.1f}us {after * 1e6:>8.1f}us "
            f"{before / after:>6.2f}x"
        )


if __name__ == "__main__":
    main()
