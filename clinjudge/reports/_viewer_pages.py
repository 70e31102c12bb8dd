"""Each page of the viewer as HTML: opens the store read-only, reads one page, renders.

The same :class:`Viewer` serves the live app and the static export; only the :class:`Links`
object differs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from markupsafe import Markup

from clinjudge.analysis import METRICS as DOCLENS_METRICS
from clinjudge.analysis import (
    AgreementError,
    AgreementResult,
    AuditError,
    AuditStatistics,
    agreement_for_run,
    audit_for_run,
    block_summary,
    compare_runs,
    doclens_report,
    run_rubric,
    score_distributions,
    table_columns,
)
from clinjudge.errors import ClinJudgeError
from clinjudge.reports._ppi_section import ppi_forest
from clinjudge.reports._probe_section import PROBE_NOTE, probe_runs, probe_share_text
from clinjudge.reports._statistic_cells import (
    agreement_cells,
    column_headers,
    viewer_compare_cells,
)
from clinjudge.reports._viewer_compare import (
    compare_items,
    compare_sort_label,
    compare_sorts,
    parse_compare_sort,
)
from clinjudge.reports._viewer_item import item_page
from clinjudge.reports._viewer_item_table import item_context
from clinjudge.reports._viewer_links import Links
from clinjudge.reports._viewer_probe import probe_views
from clinjudge.reports._viewer_query import (
    BadRequest,
    ItemQuery,
    parse_item_query,
    sort_choices,
    sort_label,
)
from clinjudge.reports._viewer_render import fmt_num, render
from clinjudge.reports._viewer_run import (
    distribution_charts,
    item_rows,
    run_and_rubric,
    run_personas,
    run_totals,
)
from clinjudge.reports._viewer_runs import runs_page
from clinjudge.reports._viewer_store import (
    ResultCache,
    SnapshotReader,
    Version,
    file_version,
    read_store,
)
from clinjudge.reports._viewer_svg import forest, histogram
from clinjudge.runs import FLAG_MEANINGS, RunStore, StoreError, quality_summary, status_label
from clinjudge.runs.report_reads import (
    RUN_SORTS,
    audit_ratings,
    is_audit_run,
    is_prm_scoring_run,
    item_flag_counts,
    item_flag_rows,
    listed_neighbours,
    run_failure_reasons,
    run_has_ratings,
    run_has_vendors,
    scored_listed_neighbours,
)

log = logging.getLogger(__name__)

RUN_COLUMNS = (
    ("run_id", "run"),
    ("name", "name"),
    ("rubric", "rubric"),
    ("mode", "mode"),
    ("models", "models"),
    ("status", "status"),
    ("items", "items ok"),
    ("cost", "cost"),
    ("tokens", "tokens"),
    ("latency", "item latency p50 / p95"),
    ("created", "created"),
)


class PageNotFound(ClinJudgeError, LookupError):
    """The run or item asked for is not in the database."""


@dataclass
class Viewer:
    """Renders viewer pages from one database.

    Args:
        db: The DuckDB file (opened read-only for each page).
        n_boot: Bootstrap resamples for agreement statistics (an audit's are its own).
        items_per_page: Rows of a run's item list.
        snapshots: Read pages from a private copy of the database (the live viewer, so that
            writers in other processes are not locked out); None reads the file itself.
    """

    db: Path
    n_boot: int = 1000
    items_per_page: int = 100
    cache: ResultCache = field(default_factory=ResultCache)
    snapshots: SnapshotReader | None = None

    def __post_init__(self) -> None:
        self._held: RunStore | None = None
        # The version of the data the current thread's page reads, for the cache keys.
        self._local = threading.local()

    @contextmanager
    def reading(self) -> Iterator[RunStore]:
        """The store: the session's connection, the current copy of the database, or a fresh
        read-only connection for this page."""
        if self._held is not None:
            self._local.version = file_version(self.db)
            yield self._held
        elif self.snapshots is not None:
            with self.snapshots.reading() as (store, version):
                self._local.version = version
                yield store
        else:
            with read_store(self.db) as store:
                self._local.version = file_version(self.db)
                yield store

    def close(self) -> None:
        """Delete the copies of the database the pages read (if any)."""
        if self.snapshots is not None:
            self.snapshots.close()

    @contextmanager
    def session(self) -> Iterator[None]:
        """Keep one read-only connection for many pages (the static export)."""
        with read_store(self.db) as store:
            self._held = store
            try:
                yield
            finally:
                self._held = None

    def _common(self, links: Links, title: str, simulated: bool = False) -> dict[str, Any]:
        return {"links": links, "title": title, "simulated": simulated, "db_name": self.db.name}

    def _cached(self, kind: str, key: tuple, compute: Any) -> Any:
        # Keyed by the version the page reads, not the file's now: a write landing while a page
        # reads an older copy must not file that copy's numbers under the new version.
        version: Version = getattr(self._local, "version", None) or file_version(self.db)
        return self.cache.get((kind, str(self.db), version, key), compute)

    # -- runs ---------------------------------------------------------------------------------

    def runs(
        self,
        links: Links,
        *,
        sort: str = "created",
        desc: bool = True,
        q: str = "",
        status: str = "",
        page: int = 1,
        compares: Sequence[tuple[Sequence[str], str]] = (),
        per_page: int = 50,
        only: list[str] | None = None,
    ) -> str:
        """The runs page (``only``: just these runs; ``compares``: links to comparisons)."""
        sort = sort if sort in RUN_SORTS else "created"
        with self.reading() as store:
            data = runs_page(
                store, sort=sort, desc=desc, query=q, status=status, page=page,
                per_page=per_page, only=only,
            )  # fmt: skip
        params = {"sort": sort, "desc": desc, "q": q, "status": status}

        def page_link(n: int) -> str | None:
            return links.runs(page=n, **params)

        return render(
            "runs.html",
            **self._common(links, "Runs"),
            runs=data["runs"],
            paging=data["paging"],
            statuses=data["statuses"],
            params=params,
            columns=RUN_COLUMNS,
            sorts=RUN_SORTS,
            page_link=page_link,
            compares=compares,
        )

    # -- run ----------------------------------------------------------------------------------

    def run(
        self,
        links: Links,
        run_id: str,
        *,
        page: int = 1,
        params: Mapping[str, Sequence[str]] | None = None,
    ) -> str:
        """A run's page; ``params`` (the query string) sort, search and filter its item list.

        Raises:
            PageNotFound: No such run.
            BadRequest: A query parameter names an unknown sort key, attribute or filter.
        """
        with self.reading() as store:
            try:
                run, rubric = run_and_rubric(store, run_id)
            except StoreError as exc:
                raise PageNotFound(str(exc)) from exc
            rid = run["run_id"]
            keys = [a.key for a in rubric.attributes] if rubric else []
            scored = rubric is None and is_prm_scoring_run(store, rid)
            query = parse_item_query(params or {}, keys, scored=scored)
            listing = item_rows(
                store, rid, keys, query=query, page=page, per_page=self.items_per_page
            )
            # Aggregates change only when the file does: paging a long item list reuses them.
            context = self._cached("run", (rid,), lambda: _run_aggregates(store, run, rubric))
            summary = context["summary"]
            label = status_label(run["status"], run["n_items"] or 0, summary["items_ok"])
            context = {
                **context,
                "run": {**run, "status_text": label},
                "keys": keys,
                "listing": listing,
            }
            context.update(self._agreement(store, run, rubric))
            audit = self._audit(store, rid) if context["is_audit"] else None
        context.update(self._personas(run))
        state = query.params()

        def item_page_link(n: int) -> str | None:
            return links.run(rid, page=n, **state)

        def list_link(**changes: Any) -> str | None:
            return links.run(rid, **changes)

        def item_link(item_id: str) -> str | None:
            return links.item(rid, item_id, **state)

        choices = sort_choices(
            keys, rated=listing["rated"], steps=listing["steps"], scored=listing["scored"]
        )
        return render(
            "run.html",
            **self._common(links, f"Run {rid}", bool(run["simulated"])),
            **context,
            doclens_columns=DOCLENS_METRICS,
            item_page_link=item_page_link,
            list_link=list_link,
            item_link=item_link,
            query=query,
            sort_choices=[(c, sort_label(c)) for c in choices],
            sort_label=sort_label,
            audit_link=links.audit(rid) if audit else None,
            audit_flagged=len(audit.flagged) if audit else 0,
        )

    def _agreement(self, store: RunStore, run: dict[str, Any], rubric: Any) -> dict[str, Any]:
        if rubric is None:
            return {}
        rid = run["run_id"]
        if not run_has_ratings(store, rid):
            return {}
        try:
            agreement = self._cached(
                "agreement", (rid,), lambda: _agreement_for(store, rid, self.n_boot)
            )
        except (AgreementError, ValueError, StoreError) as exc:
            return {"agreement_error": str(exc)}
        except Exception as exc:  # the page still shows everything else
            log.exception("agreement of run %s", rid)
            return {"agreement_error": f"{type(exc).__name__}: {exc}"}
        rows = [(a, block_summary(agreement.per_attribute.get(a))) for a in agreement.attributes]
        rows.append(("pooled", block_summary(agreement.pooled)))
        chart = forest(
            [(name, b.icc3k, *(b.icc3k_ci95 or (None, None))) for name, b in rows],
            "ICC(3,k) of the judge against the physicians' median, with 95% CI",
        )
        differences = []
        for name in agreement.attributes:
            block = agreement.per_attribute.get(name)
            judged = block.judge_vs_physicians if block else None
            counts = judged.differences if judged else {}
            if counts:
                bins = sorted((float(k), n) for k, n in counts.items())
                if all(k.is_integer() for k, _ in bins):  # show empty steps between values
                    seen = dict(bins)
                    steps = range(int(bins[0][0]), int(bins[-1][0]) + 1)
                    bins = [(float(k), seen.get(float(k), 0)) for k in steps]
                title = f"{name}: judge minus physicians' median"
                differences.append((name, histogram([(f"{k:g}", n) for k, n in bins], title)))
        columns = table_columns("viewer")
        return {
            "agreement": agreement,
            "agreement_headers": column_headers(columns),
            "agreement_table": [
                (name, agreement_cells(agreement, name, columns, fmt_num), b.n_units)
                for name, b in rows
            ],
            "agreement_chart": chart,
            "difference_charts": differences,
        }

    def _audit(self, store: RunStore, run_id: str) -> AuditStatistics | None:
        try:
            # Physicians' ratings add the judge-corrected means: those imported for the audit's
            # items, else those of the file it was last computed with (`judge audit --ratings
            # FILE`). The bootstrap settings are the audit's own: the page matches the terminal.
            ratings = audit_ratings(store, store.get_run(run_id)) or None
            return self._cached(
                "audit", (run_id,), lambda: audit_for_run(store, run_id, ratings=ratings)
            )
        except (AuditError, StoreError):
            return None
        except Exception:  # the page still shows everything else
            log.exception("audit statistics of run %s", run_id)
            return None

    @staticmethod
    def _personas(run: dict[str, Any]) -> dict[str, Any]:
        """The personas the run seated, as stored with it, for the settings section."""
        name = (run.get("config") or {}).get("personas")
        try:
            personas = run_personas(run)
        except Exception as exc:  # data altered since it was stored: the page still shows
            return {"personas_note": f"personas {name!r}: the stored wording cannot be read: {exc}"}
        if personas is None:
            if run.get("mode") in ("panel", "magentic") and name:
                # Never the set as its file reads now: that may not be the wording the run used.
                return {
                    "personas_note": f"Persona set {name!r}: this run recorded only the set's "
                    "name, not its wording (a run from an older clinjudge)."
                }
            return {}
        rows = [
            {
                "name": p.name,
                "role": p.role.value,
                "stance": getattr(p.stance, "value", p.stance),
                "fingerprint": p.fingerprint(),
                "system_message": p.system_message,
            }
            for p in personas.personas
        ]
        note = f"Persona set {name!r} as the run used it (stored with the run)."
        return {"personas": rows, "personas_note": note}

    # -- item ---------------------------------------------------------------------------------

    def item(
        self,
        links: Links,
        run_id: str,
        item_id: str,
        params: Mapping[str, Sequence[str]] | None = None,
    ) -> str:
        """An item's page; ``params`` (the query string) is the state of the item list it was
        opened from: its previous and next links step through that list.

        Raises:
            PageNotFound: No such run or item.
            BadRequest: A query parameter names an unknown sort key, attribute or filter.
        """
        with self.reading() as store:
            try:
                run, rubric = run_and_rubric(store, run_id)
            except StoreError as exc:
                raise PageNotFound(str(exc)) from exc
            rid = run["run_id"]
            keys = [a.key for a in rubric.attributes] if rubric else []
            data = item_page(store, run, rubric, item_id)
            if not data:
                raise PageNotFound(f"no item {item_id!r} in run {rid}")
            data["probe"] = probe_views(store, run, [item_id], keys).get(item_id)
            query = ItemQuery()
            place = None
            scored = False
            if params:
                scored = rubric is None and is_prm_scoring_run(store, rid)
                query = parse_item_query(params, keys, scored=scored)
            if not query.is_default:
                place = self._place(store, rid, item_id, query, scored)
                data["inputs"]["previous"] = place["previous"] if place else None
                data["inputs"]["next"] = place["next"] if place else None
            audit = self._audit(store, rid) if is_audit_run(store, rid) else None
            suspect = item_flag_rows(store, rid, item_id)
        reasons: list[str] = []
        if audit:
            reasons = next((f.reasons for f in audit.flagged if f.item_id == item_id), [])
        state = query.params()
        listed = None
        if not query.is_default:
            page = (place["rank"] - 1) // self.items_per_page + 1 if place else 1
            listed = {
                "place": place,
                "sorted_by": sort_label(query.sort),
                "back": links.run(rid, page=page, **state),
            }
        return render(
            "item.html",
            **self._common(links, f"Item {item_id}", bool(run["simulated"])),
            run=run,
            **item_context(data, rubric),
            chat=run.get("mode") == "magentic",
            audit_reasons=reasons,
            suspect=suspect,
            flag_meanings=FLAG_MEANINGS,
            item_state=state,
            listed=listed,
        )

    @staticmethod
    def _place(
        store: RunStore, run_id: str, item_id: str, query: ItemQuery, scored: bool
    ) -> dict[str, Any] | None:
        """The item's neighbours and place in the list ``query`` describes (None: not in it)."""
        if scored:
            return cast(
                "dict[str, Any] | None",
                scored_listed_neighbours(
                    store, run_id, item_id, sort=query.item_sort(), text=query.q
                ),
            )
        found = listed_neighbours(
            store, run_id, item_id, sort=query.item_sort(), filters=query.item_filter()
        )
        return cast("dict[str, Any] | None", found)

    # -- compare and audit ---------------------------------------------------------------------

    def compare(
        self,
        links: Links,
        run_ids: Sequence[str],
        *,
        page: int = 1,
        sort: str = "",
        desc: bool = True,
    ) -> str:
        """Runs side by side per item, with the `judge compare` table.

        Raises:
            PageNotFound: A run is not in the database.
            BadRequest: Fewer than two different runs (``A`` twice, or an id and its prefix), or
                an unknown sort key or attribute.
        """
        with self.reading() as store:
            try:
                runs = [store.get_run(r) for r in run_ids]
            except StoreError as exc:
                raise PageNotFound(str(exc)) from exc
            ids = list(dict.fromkeys(r["run_id"] for r in runs))
            if len(ids) < 2:
                raise BadRequest(
                    f"{', '.join(dict.fromkeys(run_ids))}: only one run ({ids[0] if ids else '-'})"
                    "; pick two or more different runs to compare"
                )
            runs = [next(r for r in runs if r["run_id"] == i) for i in ids]
            try:
                comparison = self._cached(
                    "compare", tuple(ids), lambda: compare_runs(store, ids, n_boot=self.n_boot)
                )
                table, notes = comparison.rows, comparison.notes
                # Probe runs: their probe results side by side, as `judge compare` prints them.
                probes, probe_columns = comparison.probes, probe_runs(comparison)
            except Exception as exc:  # the items side by side still show
                log.exception("compare %s", ids)
                table, notes = [], [f"agreement table not computed: {type(exc).__name__}: {exc}"]
                probes, probe_columns = [], []
            keys = _shared_keys(runs)
            sort = parse_compare_sort(sort, keys)
            listing = compare_items(store, ids, page=page, sort=sort, desc=desc)
            rated = any(run_has_ratings(store, r) for r in ids)
        default = sort == "disagreement" and desc
        state = {} if default else {"sort": sort, "desc": "1" if desc else "0"}
        columns = table_columns("viewer_compare")

        def page_link(n: int) -> str | None:
            return links.compare(ids, page=n, **state)

        def sort_link(key: str) -> str | None:
            flip = key == sort and desc
            return links.compare(ids, sort=key, desc="0" if flip or key == "item" else "1")

        return render(
            "compare.html",
            **self._common(links, "Compare runs", any(r["simulated"] for r in runs)),
            runs=runs,
            table=table,
            compare_headers=[c.label for c in columns],
            compare_cells={r.run_id: viewer_compare_cells(r, columns, fmt_num) for r in table},
            notes=notes,
            listing=listing,
            keys=keys,
            page_link=page_link,
            sort_link=sort_link,
            sort_label=compare_sort_label,
            sort_choices=[(k, compare_sort_label(k)) for k in compare_sorts(keys, rated)],
            rated=rated,
            probes=probes,
            probe_columns=probe_columns,
            probe_note=PROBE_NOTE,
            probe_share=probe_share_text,
        )

    def audit(self, links: Links, run_id: str) -> str:
        """An audit run's vendors, paired tests and flagged items."""
        with self.reading() as store:
            try:
                run, rubric = run_and_rubric(store, run_id)
            except StoreError as exc:
                raise PageNotFound(str(exc)) from exc
            rid = run["run_id"]
            audit = self._audit(store, rid)
        if audit is None or rubric is None:
            raise PageNotFound(f"run {rid} is not a vendor audit")
        return render(
            "audit.html",
            **self._common(links, f"Audit {rid}", audit.simulated),
            audit=audit,
            charts=_vendor_charts(audit, rubric),
            ppi_charts=[
                Markup(ppi_forest(audit.ppi or [], attribute))
                for attribute in dict.fromkeys(r.attribute for r in audit.ppi or [])
            ],
        )

    def message(self, links: Links, heading: str, text: str, *, refresh: int = 0) -> str:
        """A page with one message (database busy, not found)."""
        return render(
            "message.html",
            **self._common(links, heading),
            heading=heading,
            text=text,
            refresh=refresh,
            kind="busy" if refresh else "error",
        )


def _vendor_charts(audit: AuditStatistics, rubric: Any) -> list[tuple[str, Any]]:
    """Per attribute: each vendor's mean with its bootstrap CI on the attribute's scale."""
    charts = []
    for attribute in rubric.attributes:
        rows = []
        for vendor in audit.vendors:
            summary = audit.summaries[vendor].get(attribute.key)
            ci = (summary.ci95 if summary else None) or (None, None)
            rows.append((vendor, summary.mean if summary else None, ci[0], ci[1]))
        if any(r[1] is not None for r in rows):
            lo, hi = float(attribute.min), float(attribute.max)
            title = f"{attribute.name}: mean per vendor with 95% CI"
            charts.append((attribute.name, forest(rows, title, lo=lo, hi=hi)))
    return charts


def _run_aggregates(store: RunStore, run: dict[str, Any], rubric: Any) -> dict[str, Any]:
    """Everything on a run's page that summarises the whole run."""
    rid = run["run_id"]
    totals = run_totals(store, rid, rubric)
    doclens = doclens_report(store, rid)
    return {
        "summary": totals,
        "distributions": distribution_charts(
            score_distributions(store, rid, rubric, final_counts=totals["final_counts"])
        )
        if rubric
        else [],
        "failures": run_failure_reasons(store, rid),
        "flags": item_flag_counts(store, rid),
        "quality": quality_summary(store, rid),
        "flag_meanings": FLAG_MEANINGS,
        "has_vendor": run_has_vendors(store, rid),
        "is_audit": is_audit_run(store, rid),
        # Plain rows: the template reads each metric by name (row[k]).
        "doclens": [row.to_dict() for row in doclens.pooled] if doclens else None,
    }


def _agreement_for(store: RunStore, run_id: str, n_boot: int) -> AgreementResult:
    return agreement_for_run(store, run_id, n_boot=n_boot)


def _shared_keys(runs: list[dict[str, Any]]) -> list[str]:
    """Attribute keys in the first run's rubric order, then any others."""
    keys: list[str] = []
    for run in runs:
        try:
            rubric = run_rubric(run)
        except StoreError:
            continue
        keys.extend(k for k in rubric.keys if k not in keys)
    return keys
