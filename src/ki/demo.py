"""The guided tour behind `ki demo`: ingest examples/, then show and CHECK what the product promises.

Every claim the tour makes is verified; a failed check makes `ki demo` exit
non-zero, so the demo doubles as a smoke test of the whole stack.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from rich.console import Console
from rich.table import Table
from sqlalchemy import select

from ki.commands import progress_report
from ki_core.grants import GrantTarget, grant
from ki_core.models import (
    Document,
    GrantEffect,
    Matter,
    Project,
    Source,
    SourceObject,
    SourceObservation,
)
from ki_core.search.types import SearchFilters
from ki_query.retrieval import RetrievalService
from ki_query.scope import AccessService
from ki_query.types import DecisionEvidenceRef, NewDecision, SearchRequest
from ki_workers.context import WorkerContext
from ki_workers.folder_sync import source_name_for, sync_folder

WALLED = "tom.krause"
OPEN = "anna.berg"
CONTRACT = "rahmenliefervertrag-rv-2023-017"


@dataclass
class Tour:
    ctx: WorkerContext
    examples: Path
    console: Console
    plan: dict = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def check(self, ok: bool, claim: str) -> None:
        mark = "[green]✓[/]" if ok else "[bold red]✗[/]"
        self.console.print(f"{mark} {claim}")
        if not ok:
            self.failures.append(claim)

    @property
    def service(self) -> RetrievalService:
        settings = self.ctx.settings
        return RetrievalService(settings, self.ctx.sessions, self.ctx.index(), self.ctx.embedder(), AccessService(self.ctx.sessions, settings))


def run_tour(ctx: WorkerContext, examples: Path, console: Console) -> list[str]:
    """Run every step; returns the claims that failed (empty: all held)."""
    tour = Tour(ctx, examples, console, json.loads((examples / "demo.json").read_text(encoding="utf-8")))
    ingest_projects(tour)
    apply_grants(tour)
    record_decisions(tour)
    same_query_two_lawyers(tour)
    pasted_case_number(tour)
    filter_only(tour)
    collapse_prefers_executed(tour)
    traversal(tour)
    explain_one_hit(tour)
    decisions(tour)
    return tour.failures


# ------------------------------------------------------------------ setup


def ingest_projects(tour: Tour) -> None:
    tour.console.rule("1. Ingest the example corpus")
    for project in tour.plan["projects"]:
        folder = tour.examples / project["folder"]
        total = sum(1 for p in folder.rglob("*") if p.is_file()) - 1  # ki-manifest.json is not a document
        with progress_report(tour.console, f"ingest {project['name']}", "files", total) as progress:
            # Embedding a file's chunks is most of the time (e5-small, about 4 chunks/s): off a terminal
            # a line every few seconds says which file, instead of minutes of silence in a CI log.
            summary = sync_folder(tour.ctx, folder, project["name"], project.get("matter"),
                                  on_file=lambda relative, _result: progress.advance(current=relative),
                                  declared_types=project.get("doc_types"),
                                  on_chunks=lambda relative, done, total_chunks: progress.update(
                                      progress.done, current=f"{relative}: {done}/{total_chunks} chunks embedded"))
            progress.update(total)
        tour.check(not summary.errors, f"{project['name']}: {summary.files} files, no conversion errors")


def apply_grants(tour: Tour) -> None:
    from ki_workers import tasks
    from ki_workers.stages.access import stale_access_versions

    with tour.ctx.sessions() as session, session.begin():
        for project in tour.plan["projects"]:
            project_id = _project_id(session, project["name"])
            for entry in project["grants"]:
                grant(session, GrantTarget.project(project_id), entry["principal"],
                      effect=GrantEffect(entry["effect"]), settings=tour.ctx.settings)
        stale = stale_access_versions(session, limit=100_000)
    if stale:
        tasks.reindex_access.delay(stale).get()
    walls = [f"{g['principal']} {g['effect']} on {p['name']}" for p in tour.plan["projects"] for g in p["grants"]]
    tour.console.print("grants: " + "; ".join(walls))


def record_decisions(tour: Tour) -> None:
    service = tour.service
    with tour.ctx.sessions() as session:
        for decision in tour.plan.get("decisions", []):
            project_id = _project_id(session, decision["project"])
            evidence = tuple(_evidence(session, tour.examples, tour.plan, e) for e in decision["evidence"])
            matter_id = session.scalar(select(Matter.id).where(Matter.project_id == project_id, Matter.name == decision.get("matter")))
            service.add_decision(NewDecision(
                project_id=project_id, matter_id=matter_id, external_id=decision["external_id"],
                locus=decision["locus"], change_summary=decision["change_summary"], rationale=decision["rationale"],
                decided_by=decision.get("decided_by"), evidence=evidence,
                decided_at=datetime.fromisoformat(decision["decided_at"]) if decision.get("decided_at") else None,
            ))


def _project_id(session, name: str) -> str:
    return session.scalar(select(Project.id).where(Project.name == name))


def _evidence(session, examples: Path, plan: dict, entry: dict) -> DecisionEvidenceRef:
    folder = next(p["folder"] for p in plan["projects"] if p["name"] == entry["project"])
    source_name = source_name_for(examples / folder)
    version_id = session.scalar(
        select(SourceObservation.version_id)
        .join(SourceObject, SourceObject.id == SourceObservation.source_object_id)
        .join(Source, Source.id == SourceObject.source_id)
        .where(Source.name == source_name, SourceObject.external_id == entry["path"])
    )
    return DecisionEvidenceRef(version_id=version_id)


# ------------------------------------------------------------------ the tour


def _search(tour: Tour, query: str, principals: list[str], explain: bool = False, **filters):
    request = SearchRequest(query=query, filters=SearchFilters(**filters), limit=8, explain=explain)
    return tour.service.search(request, principals).hits


def _show(tour: Tour, title: str, hits, explain: bool = False) -> None:
    table = Table(title=title, show_lines=False, title_justify="left")
    for column in ("#", "project", "document", "version", "score"):
        table.add_column(column, overflow="fold")
    for n, hit in enumerate(hits, start=1):
        c = hit.citation
        ids = f" [cyan]{', '.join(hit.matched_identifiers)}[/]" if hit.matched_identifiers else ""
        table.add_row(str(n), c.project.name, f"{(c.document.title or c.document.key)[:70]}{ids}",
                      f"{c.version.label or '-'} {c.version.status}", f"{hit.score:.4f}")
    tour.console.print(table if hits else f"[dim]{title}: no hits[/]")


def same_query_two_lawyers(tour: Tour) -> None:
    tour.console.rule("2. The same query as two lawyers (ethical wall)")
    query = "Kündigung aus wichtigem Grund"
    open_hits = _search(tour, query, [OPEN])
    walled_hits = _search(tour, query, [WALLED])
    group_hits = _search(tour, query, [WALLED, "group:partner"])
    _show(tour, f"{query!r} as {OPEN}", open_hits)
    _show(tour, f"{query!r} as {WALLED}", walled_hits)
    tour.check({h.citation.project.name for h in open_hits} == {"nordbau", "hanse-pharma"},
               f"{OPEN} sees both client projects")
    for principals, hits in (([WALLED], walled_hits), ([WALLED, "group:partner"], group_hits)):
        tour.check(bool(hits) and all(h.citation.project.name != "hanse-pharma" for h in hits),
                   f"{' + '.join(principals)} gets no hanse-pharma hit (deny wins over the group's allow)")


def pasted_case_number(tour: Tour) -> None:
    tour.console.rule("3. A pasted case number")
    number = tour.plan["case_number"]
    hits = _search(tour, number, [OPEN])
    _show(tour, f"{number!r} as {OPEN}", hits)
    first = hits[0] if hits else None
    tour.check(first is not None and number in first.matched_identifiers,
               f"the first hit carries {number}, matched by the identifier leg")
    carriers = [h.citation.document.title or "" for h in hits[:3]]
    tour.check(any(number in title for title in carriers), f"the decision {number} itself is among the first three")
    walled = _search(tour, "3 Sa 206/64", [WALLED])
    tour.check(all(h.citation.project.name != "hanse-pharma" for h in walled),
               "a case number from the walled project finds nothing of it for tom.krause")


def filter_only(tour: Tour) -> None:
    tour.console.rule("4. Filter only: one matter, newest first, no query text")
    with tour.ctx.sessions() as session:
        matter_id = session.scalar(select(Matter.id).where(Matter.name == "Nordbau ./. Stadtwerke Nordheide"))
        hanse = session.scalar(select(Matter.id).where(Matter.name == "Hanse Pharma Arbeitsrecht"))
    response = tour.service.search_filter(SearchFilters(matter_id=matter_id), [WALLED], 0, 20)
    _show(tour, f"matter Nordbau as {WALLED}", response.hits)
    dates = [h.citation.version.doc_date for h in response.hits if h.citation.version.doc_date]
    tour.check(bool(response.hits) and dates == sorted(dates, reverse=True), "filter-only hits are sorted by date, newest first")
    walled = tour.service.search_filter(SearchFilters(matter_id=hanse), [WALLED], 0, 20)
    tour.check(not walled.hits, "the walled matter lists nothing for tom.krause")


def collapse_prefers_executed(tour: Tour) -> None:
    tour.console.rule("5. One hit per document: the executed contract wins")
    hits = _search(tour, "Haftungsbegrenzung Rahmenliefervertrag", [OPEN])
    _show(tour, f"'Haftungsbegrenzung Rahmenliefervertrag' as {OPEN}", hits)
    contract = [h for h in hits if h.citation.document.key == CONTRACT]
    tour.check(len(contract) == 1 and contract[0].citation.version.status == "executed",
               "the framework contract appears once, as its executed version")


def traversal(tour: Tour) -> None:
    tour.console.rule("6. From the contract to its annex and the correspondence")
    with tour.ctx.sessions() as session:
        contract_id = session.scalar(select(Document.id).where(Document.key == CONTRACT))
    result = tour.service.traverse(contract_id, [OPEN], depth=2)
    table = Table(title="related to RV-2023-017", title_justify="left")
    for column in ("depth", "relation", "direction", "document"):
        table.add_column(column)
    for item in result.related:
        table.add_row(str(item.depth), item.kind.value, item.direction, item.document.document.title or item.document.document.key)
    tour.console.print(table)
    kinds = {item.kind.value for item in result.related}
    tour.check({"annex_of", "references"} <= kinds or {"annex_of", "responds_to"} <= kinds,
               "the traversal reaches the annex and the letters")


def explain_one_hit(tour: Tour) -> None:
    tour.console.rule("7. Why this hit? (--explain)")
    hits = _search(tour, "§ 314 BGB Abhilfefrist", [WALLED], explain=True)
    if not hits or hits[0].explain is None:
        tour.check(False, "explain returns legs, fusion, boost and the grant path")
        return
    data = hits[0].explain.model_dump(mode="json")
    tour.console.print_json(json.dumps(data, ensure_ascii=False))
    tour.check(True, "explain returns legs, fusion, boost and the grant path")


def decisions(tour: Tour) -> None:
    tour.console.rule("8. Decision records: why did the liability cap change?")
    query = "Warum wurde der Haftungshöchstbetrag im Rahmenliefervertrag angehoben?"
    found = tour.service.search_decisions(query, [WALLED])
    for hit in found[:3]:
        tour.console.print(f"[bold]{hit.locus}[/]: {hit.change_summary}")
    tour.check(any(h.locus == "§ 6 Haftung" for h in found), "the liability decision is found with its evidence")
    walled = tour.service.search_decisions("Kündigung Wettbewerbsverbot Dr. Vogt", [WALLED])
    tour.check(all("Vogt" not in h.locus for h in walled), "a decision whose evidence is walled stays hidden")
