"""A boolean query's count, facets and date order hold for its whole set, beyond one leg's depth
(issue 39): 2,800 documents of one real BGB Absatz each, dated so that the newest lie past the
first 2,500 chunks a leg returns (a set without words is listed in chunk id order), on both
backends over the same SQL rows.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from ki_core import grants
from ki_core.config import Settings
from ki_core.embedding import HashingEmbedder
from ki_core.models import (
    Chunk,
    ChunkKind,
    Document,
    DocumentVersion,
    SourceObject,
    SourceObservation,
    VersionStatus,
)
from ki_core.search.index import IndexOp, SearchIndex
from ki_core.search.text_index import analyzed_positions
from ki_core.search.types import IndexChunk
from ki_query.retrieval import RANKED_LEG_DEPTH, RetrievalService
from ki_query.scope import AccessService
from ki_query.types import SearchRequest
from tests.ki_core.search.backends import CONTRACT_BACKENDS, store_beside_index
from tests.ki_query.sql_world import SqlWorld

CORPUS = Path(__file__).parents[1] / "fixtures" / "bgb-absaetze.jsonl.gz"
DOCUMENTS = 2_800
DIMENSIONS = 16
CALLER = ["alice"]
FIRST_DAY = date(2015, 1, 1)
EVERY_DATE = "datum:2015-01-01..2024-12-31"


@dataclass(frozen=True)
class Row:
    text: str
    project: str
    day: date | None
    identifiers: tuple[str, ...] = ()


def rows() -> list[Row]:
    """Every 20th undated; later chunk ids get later dates, so the newest are past the legs' depth."""
    with gzip.open(CORPUS, "rt", encoding="utf-8") as lines:
        texts = [json.loads(line)["text"] for line, _ in zip(lines, range(DOCUMENTS), strict=False)]
    return [
        Row(text, f"bgb-{n % 3}", None if n % 20 == 7 else FIRST_DAY + timedelta(days=n + (n * 7919) % 11))
        for n, text in enumerate(texts)
    ]


@dataclass
class DepthWorld:
    service: RetrievalService
    rows: list[Row]
    # SQL's document id of each row.
    documents: list[str]


def build(session: Session, index: SearchIndex, corpus: list[Row]) -> list[str]:
    world = SqlWorld(session, Settings())
    projects = {name: world.project(name) for name in sorted({r.project for r in corpus})}
    documents = [Document(project_id=projects[r.project].id, key=f"abs-{n}", title=f"Absatz {n}")
                 for n, r in enumerate(corpus)]  # fmt: skip
    session.add_all(documents)
    session.flush()
    versions = [DocumentVersion(document_id=d.id, seq=1, version_label="v1", status=VersionStatus.FINAL,
                                content_hash=str(n), language="de", doc_date=r.day)
                for n, (d, r) in enumerate(zip(documents, corpus, strict=True))]  # fmt: skip
    session.add_all(versions)
    session.flush()
    source = world.source("fs")
    objects = [SourceObject(source_id=source.id, external_id=f"obj-{n}", title=f"obj-{n}") for n in range(len(corpus))]
    session.add_all(objects)
    session.flush()
    ops = []
    vectors = HashingEmbedder(dimensions=DIMENSIONS).embed_passages([r.text for r in corpus])
    for n, (document, version, row) in enumerate(zip(documents, versions, corpus, strict=True)):
        document.latest_final_version_id = version.id
        session.add(SourceObservation(version_id=version.id, source_object_id=objects[n].id))
        session.add(Chunk(id=50_000 + n, version_id=version.id, document_id=document.id, kind=ChunkKind.CHUNK,
                          ordinal=0, text=row.text, text_hash=str(n)))  # fmt: skip
        ops.append(IndexOp(IndexChunk(
            chunk_id=50_000 + n, text=row.text, embedding=tuple(float(x) for x in vectors[n]),
            project_id=document.project_id, document_id=document.id, document_version_id=version.id,
            version_status="final", chunk_kind="chunk", language="de", doc_date=row.day,
            identifiers=row.identifiers,
        )))  # fmt: skip
    session.flush()
    for project in projects.values():
        world.allow(CALLER[0], project=project.name)
    grants.bump_access_generation(session)
    session.commit()
    index.bulk(ops)
    index.refresh()
    return [d.id for d in documents]


@pytest.fixture(scope="module", params=CONTRACT_BACKENDS)
def depth_world(
    request: pytest.FixtureRequest, sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DepthWorld]:
    with store_beside_index(request.param, sqlite_template, tmp_path_factory.mktemp("depth"), DIMENSIONS) as (session, index):
        yield searchable(session, index, rows())


def searchable(session: Session, index: SearchIndex, corpus: list[Row]) -> DepthWorld:
    """The rows in SQL and the index, and the search service over both (rerank off)."""
    documents = build(session, index, corpus)
    settings = Settings(retrieval={"rerank_enabled": False})
    service = RetrievalService(settings, session, index, HashingEmbedder(dimensions=DIMENSIONS),
                               AccessService(session, settings))  # fmt: skip
    return DepthWorld(service, corpus, documents)


def without(word: str, text: str) -> bool:
    stem = analyzed_positions(word)[0][1]
    return all(token != stem for _, token in analyzed_positions(text))


def expected(world: DepthWorld, query: str) -> list[int]:
    """Row numbers the query's set holds (the two queries of this module, written out)."""
    dated = [n for n, r in enumerate(world.rows) if r.day is not None]
    if query == EVERY_DATE:
        return dated
    assert query == f"{EVERY_DATE} -Schuldner"
    return [n for n in dated if without("Schuldner", world.rows[n].text)]


@pytest.mark.parametrize("query", [EVERY_DATE, f"{EVERY_DATE} -Schuldner"])
def test_count_and_facets_cover_the_whole_set(depth_world: DepthWorld, query: str) -> None:
    members = expected(depth_world, query)
    assert len(members) > RANKED_LEG_DEPTH  # deeper than any leg reaches
    response = depth_world.service.search(SearchRequest(query=query, limit=10, facets=True), CALLER)
    assert (response.total, response.total_is_estimate) == (len(members), False)
    assert response.facets is not None
    years = Counter(str(depth_world.rows[n].day.year) for n in members)  # type: ignore[union-attr]
    assert {f.value: f.count for f in response.facets.year} == dict(years)
    projects = Counter(depth_world.rows[n].project for n in members)
    assert {f.value: f.count for f in response.facets.project} == dict(projects)


@pytest.mark.parametrize("sort", ["date_desc", "date_asc"])
@pytest.mark.parametrize("query", [EVERY_DATE, f"{EVERY_DATE} -Schuldner"])
def test_date_order_runs_over_the_whole_set(depth_world: DepthWorld, query: str, sort: str) -> None:
    members = expected(depth_world, query)
    ordered = sorted(members, key=lambda n: (depth_world.rows[n].day, n), reverse=sort == "date_desc")
    response = depth_world.service.search(SearchRequest(query=query, limit=10, offset=20, sort=sort), CALLER)
    shown = [hit.citation.version.doc_date for hit in response.hits]
    assert shown == [depth_world.rows[n].day for n in ordered[20:30]]
    assert response.has_more
