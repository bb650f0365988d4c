"""Nothing leaks: random worlds, full searches as random callers, checked against a plain-Python reference.

Each world (projects, documents with versions and chunks, local and DMS
objects with and without known ACLs, active and deleted observations, allow
and deny grants on projects and documents, nested groups, relations and
decision records) is written to SQL inside a SAVEPOINT that is rolled back,
and its chunks go through the index's bulk path with hashing vectors. The
index holds every version's chunks, also those SQL no longer shows (deleted
observations) and rows that disagree with SQL (a chunk claimed for another
document), so the scope filter and re-verification both have work to do.

For every caller the reference below, written from spec/access.md and
sharing no code with ki_core.acl, decides what is visible; every hit,
citation, listing, document, relation and decision the service returns must
be inside that. Listings and decisions must also be complete.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from ki_core.config import Settings
from ki_core.embedding import HashingEmbedder
from ki_core.models import (
    Chunk,
    ChunkKind,
    DecisionEvidence,
    DecisionRecord,
    RelationKind,
)
from ki_core.search.index import IndexOp, SearchIndex
from ki_core.search.types import IndexChunk, SearchFilters
from ki_query.retrieval import RetrievalService
from ki_query.scope import AccessService
from ki_query.text_match import query_terms, words
from ki_query.types import DocumentNotFound, SearchRequest
from ki_workers.stages.chunking import FIRST_CLAUSE_ORDINAL
from tests.ki_core.search.backends import CONTRACT_BACKENDS, make_backend
from tests.ki_query.sql_world import SqlWorld

# 25 worlds per database, 8 searches, 4 listings and up to 12 document reads each: about 13 s on
# SQLite and 23 s on PostgreSQL on a busy 2-core machine.
WORLDS_PER_DATABASE = 25
DIMENSIONS = 32
PEOPLE = ["alice", "bob", "carol"]
GROUPS = ["team", "firm"]
ADMINS = {"role:admin", "system:admin"}
VOCABULARY = "miete kündigung haftung vertrag frist heizung mangel zahlung schriftform vollmacht bürgschaft".split()
IDENTIFIERS = ["VIII ZR 1/20", "§ 536 BGB", "HRB 12345"]
STATUSES = ["draft", "final", "executed", "unknown"]
START = date(2024, 1, 1)


# ------------------------------------------------------------------ the world as plain data


@dataclass
class Spec:
    """What the reference reads: names only, no ids."""

    doc_project: dict[str, str] = field(default_factory=dict)
    version_doc: dict[str, str] = field(default_factory=dict)
    version_status: dict[str, str] = field(default_factory=dict)
    version_date: dict[str, date | None] = field(default_factory=dict)
    object_source: dict[str, str] = field(default_factory=dict)  # "fs" (local_fs) or "dms1"
    object_acl: dict[str, list[tuple[str, str]] | None] = field(default_factory=dict)
    observations: list[tuple[str, str, str]] = field(default_factory=list)  # (version, object, state)
    grants: list[tuple[str, str, str, str]] = field(default_factory=list)  # (scope, target, effect, principal)
    members: dict[str, list[str]] = field(default_factory=dict)  # group -> members
    relations: list[tuple[str, str, str, str | None, str | None]] = field(default_factory=list)
    decisions: dict[str, tuple[str, list[tuple[str | None, str | None]]]] = field(default_factory=dict)
    chunks: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # version -> [(kind, text)]
    identifiers: dict[str, list[str]] = field(default_factory=dict)  # document -> identifiers


def generate(rng: random.Random) -> Spec:
    spec = Spec()
    for d in range(rng.randint(3, 8)):
        doc = f"d{d}"
        spec.doc_project[doc] = f"p{rng.randint(0, 2)}"
        spec.identifiers[doc] = rng.sample(IDENTIFIERS, rng.randint(0, 2))
        for n in range(rng.randint(1, 3)):
            _version(rng, spec, f"{doc}/v{n + 1}")
    for _ in range(rng.randint(2, 8)):
        scope = rng.choice(["project", "project", "document"])
        target = rng.choice(sorted(set(spec.doc_project.values()))) if scope == "project" else rng.choice(list(spec.doc_project))
        spec.grants.append((scope, target, rng.choice(["allow", "allow", "allow", "deny"]), rng.choice(PEOPLE + GROUPS)))
    for group in GROUPS:
        if rng.random() < 0.7:
            spec.members[group] = rng.sample(PEOPLE + GROUPS, rng.randint(1, 2))
    documents, versions = list(spec.doc_project), list(spec.version_doc)
    for _ in range(rng.randint(0, 6)):
        kind = rng.choice(list(RelationKind))
        if rng.random() < 0.3:
            a, b = rng.sample(versions, 2)
            spec.relations.append((kind.value, spec.version_doc[a], spec.version_doc[b], a, b))
        elif len(documents) > 1:
            a, b = rng.sample(documents, 2)
            spec.relations.append((kind.value, a, b, None, None))
    for n in range(rng.randint(0, 5)):
        entries = [_evidence(rng, spec) for _ in range(rng.randint(1, 3))]
        spec.decisions[f"dec{n}"] = (" ".join(rng.sample(VOCABULARY, 4)), entries)
    return spec


def _version(rng: random.Random, spec: Spec, name: str) -> None:
    spec.version_doc[name] = name.split("/")[0]
    spec.version_status[name] = rng.choice(STATUSES)
    spec.version_date[name] = rng.choice([None, START + timedelta(days=rng.randint(0, 400))])
    for _ in range(rng.choice([1, 1, 2])):
        if spec.object_source and rng.random() < 0.2:
            obj = rng.choice(list(spec.object_source))
        else:
            obj = f"o{len(spec.object_source)}"
            spec.object_source[obj] = rng.choice(["fs", "fs", "dms1"])
            acl = [(rng.choice(PEOPLE + GROUPS), rng.choice(["allow", "allow", "deny"])) for _ in range(rng.randint(0, 2))]
            spec.object_acl[obj] = rng.choice([None, None, acl])
        if all((name, obj) != (v, o) for v, o, _ in spec.observations):
            spec.observations.append((name, obj, rng.choice(["active", "active", "active", "deleted"])))
    spec.chunks[name] = [
        (rng.choice(["chunk", "chunk", "clause"]), " ".join(rng.choices(VOCABULARY, k=rng.randint(4, 10))))
        for _ in range(rng.randint(1, 3))
    ]


def _evidence(rng: random.Random, spec: Spec) -> tuple[str | None, str | None]:
    version, obj, _state = rng.choice(spec.observations)
    return rng.choice([(obj, None), (None, version), (obj, version), (rng.choice(list(spec.object_source)), version)])


# ------------------------------------------------------------------ the reference (spec/access.md)


class Reference:
    def __init__(self, spec: Spec) -> None:
        self.spec = spec

    def expand(self, callers: list[str]) -> set[str]:
        found = {c.strip().casefold() for c in callers} - {""}
        while True:
            more = {g for g, members in self.spec.members.items() if set(members) & found} - found
            if not more:
                return found
            found |= more

    def _granted(self, scope: str, target: str, effect: str, principals: set[str]) -> bool:
        return any((scope, target, effect, p) in self._grant_set for p in principals)

    @property
    def _grant_set(self) -> set[tuple[str, str, str, str]]:
        rows = set(self.spec.grants)
        for obj, acl in self.spec.object_acl.items():
            rows |= {("object", obj, effect, principal) for principal, effect in acl or ()}
        return rows

    def active_objects(self, version: str) -> list[str]:
        return [o for v, o, state in self.spec.observations if v == version and state == "active"]

    def visible(self, version: str, principals: set[str]) -> bool:
        active = self.active_objects(version)
        if principals & ADMINS:
            return bool(active)
        doc = self.spec.version_doc[version]
        project = self.spec.doc_project[doc]
        if self._granted("project", project, "deny", principals) or self._granted("document", doc, "deny", principals):
            return False
        if any(self._granted("object", o, "deny", principals) for o in active):
            return False
        return bool(self.citable(version, principals))

    def citable(self, version: str, principals: set[str]) -> set[str]:
        """Active objects the caller may see the version through (sufficient mode, for a visible version)."""
        active = self.active_objects(version)
        if principals & ADMINS:
            return set(active)
        known = [o for o in active if self.spec.object_acl[o] is not None]
        if known:
            return {o for o in known if self._granted("object", o, "allow", principals)}
        doc = self.spec.version_doc[version]
        local = self._granted("project", self.spec.doc_project[doc], "allow", principals) or self._granted(
            "document", doc, "allow", principals)
        return {o for o in active if self.spec.object_source[o] == "fs"} if local else set()

    def visible_versions(self, principals: set[str]) -> set[str]:
        return {v for v in self.spec.version_doc if self.visible(v, principals)}

    def decision_visible(self, decision: str, principals: set[str]) -> bool:
        _text, entries = self.spec.decisions[decision]
        return all(self._evidence_visible(obj, version, principals) for obj, version in entries)

    def _evidence_visible(self, obj: str | None, version: str | None, principals: set[str]) -> bool:
        if version is not None:
            return self.visible(version, principals) and (obj is None or obj in self.citable(version, principals))
        return any(
            self.visible(v, principals) and obj in self.citable(v, principals)
            for v, o, state in self.spec.observations if o == obj and state == "active"
        )


# ------------------------------------------------------------------ the world in SQL and the index


@dataclass
class Built:
    world: SqlWorld
    chunk_version: dict[int, str]  # chunk id -> version name (SQL's truth)
    chunk_text: dict[int, str]
    chunk_kind: dict[int, str]
    forged: int  # the chunk the index claims for another document
    decisions: dict[str, str]  # record id -> decision name
    names: dict[str, str]  # any id -> name


def build(session: Session, spec: Spec, index: SearchIndex, next_chunk_id: list[int]) -> Built:
    world = SqlWorld(session, Settings())
    for name, doc in spec.version_doc.items():
        world.version(name, project=spec.doc_project[doc], status=spec.version_status[name], observed=None,
                      doc_date=spec.version_date[name])
        world.documents[doc].identifiers = spec.identifiers[doc]
    for obj, source in spec.object_source.items():
        world.object(obj, source, spec.object_acl[obj])
    for version, obj, state in spec.observations:
        world.observe(version, obj, state)
    for group, members in spec.members.items():
        world.members(group, members)
    for scope, target, effect, principal in spec.grants:
        where = {"project": target} if scope == "project" else {"document": target}
        (world.allow if effect == "allow" else world.deny)(principal, **where)
    for kind, a, b, va, vb in dict.fromkeys(spec.relations):
        world.relate(kind, va or a, vb or b)
    decisions = _decisions(world, spec)
    chunk_version, chunk_text, chunk_kind, forged = _chunks(world, spec, index, next_chunk_id)
    names = {d.id: n for n, d in world.documents.items()} | {v.id: n for n, v in world.versions.items()}
    names |= {o.id: n for n, o in world.objects.items()} | {p.id: n for n, p in world.projects.items()}
    return Built(world, chunk_version, chunk_text, chunk_kind, forged, decisions, names)


def _decisions(world: SqlWorld, spec: Spec) -> dict[str, str]:
    ids = {}
    for name, (text, entries) in spec.decisions.items():
        record = DecisionRecord(project_id=world.projects["p0"].id if "p0" in world.projects else
                                next(iter(world.projects.values())).id,
                                locus=name, change_summary=text, rationale="")
        record.evidence = [
            DecisionEvidence(source_object_id=world.objects[o].id if o else None,
                             version_id=world.versions[v].id if v else None)
            for o, v in entries
        ]
        world.session.add(record)
        world.session.flush()
        ids[record.id] = name
    return ids


def _chunks(world: SqlWorld, spec: Spec, index: SearchIndex, next_chunk_id: list[int]):
    """SQL chunk rows and their index entries; then one extra SQL chunk per world that the index
    claims for another document (re-verification must drop it)."""
    embedder = HashingEmbedder(dimensions=DIMENSIONS)
    chunk_version, chunk_text, chunk_kind, ops = {}, {}, {}, []
    for version_name, chunks in spec.chunks.items():
        for ordinal, (kind, text) in enumerate(chunks):
            chunk_id = _new_chunk(world, version_name, kind, ordinal, text, next_chunk_id)
            chunk_version[chunk_id], chunk_text[chunk_id], chunk_kind[chunk_id] = version_name, text, kind
            ops.append(IndexOp(_index_chunk(world, spec, chunk_id, version_name, kind, text, embedder)))
    victim, claimed = next(iter(spec.version_doc)), list(spec.doc_project)[-1]
    text = " ".join(VOCABULARY)
    chunk_id = _new_chunk(world, victim, "chunk", 999, text, next_chunk_id)
    chunk_version[chunk_id], chunk_text[chunk_id], chunk_kind[chunk_id] = victim, text, "chunk"
    forged = _index_chunk(world, spec, chunk_id, victim, "chunk", text, embedder)
    ops.append(IndexOp(forged.model_copy(update={
        "document_id": world.documents[claimed].id, "project_id": world.projects[spec.doc_project[claimed]].id,
    })))
    index.bulk(ops)
    index.refresh()
    return chunk_version, chunk_text, chunk_kind, chunk_id


def _new_chunk(world: SqlWorld, version: str, kind: str, ordinal: int, text: str, next_chunk_id: list[int]) -> int:
    next_chunk_id[0] += 1
    row = world.versions[version]
    world.session.add(Chunk(
        id=next_chunk_id[0], version_id=row.id, document_id=row.document_id, kind=ChunkKind(kind),
        ordinal=ordinal + (FIRST_CLAUSE_ORDINAL if kind == "clause" else 0), text=text, text_hash=str(next_chunk_id[0]),
    ))
    world.session.flush()
    return next_chunk_id[0]


def _index_chunk(world, spec, chunk_id, version_name, kind, text, embedder) -> IndexChunk:
    doc = spec.version_doc[version_name]
    return IndexChunk(
        chunk_id=chunk_id, text=text, embedding=tuple(embedder.embed_passages([text])[0].astype(float).tolist()),
        project_id=world.projects[spec.doc_project[doc]].id, document_id=world.documents[doc].id,
        document_version_id=world.versions[version_name].id, version_status=spec.version_status[version_name],
        doc_date=spec.version_date[version_name], chunk_kind=kind, identifiers=tuple(spec.identifiers[doc]),
        language="de",
    )


# ------------------------------------------------------------------ the checks


@dataclass
class Check:
    built: Built
    ref: Reference
    service: RetrievalService
    rng: random.Random

    def caller(self) -> list[str]:
        pool = PEOPLE + GROUPS + [" Alice", "BOB ", "mallory", "", "role:admin"]
        return self.rng.sample(pool, self.rng.choice([0, 1, 1, 1, 2]))

    def filters(self) -> SearchFilters:
        spec, world = self.ref.spec, self.built.world
        options: dict = {}
        if self.rng.random() < 0.3:
            options["project_id"] = world.projects[self.rng.choice(sorted(set(spec.doc_project.values())))].id
        if self.rng.random() < 0.2:
            options["version_status"] = self.rng.choice(STATUSES)
        if self.rng.random() < 0.2:
            options["chunk_kind"] = self.rng.choice(["chunk", "clause"])
        if self.rng.random() < 0.2:
            options["date_from"] = START + timedelta(days=self.rng.randint(0, 200))
        return SearchFilters(**options)

    def admitted_by_filters(self, version: str, kinds: set[str], filters: SearchFilters) -> bool:
        spec, world = self.ref.spec, self.built.world
        doc = spec.version_doc[version]
        day = spec.version_date[version]
        return (
            (filters.project_id is None or world.projects[spec.doc_project[doc]].id == filters.project_id)
            and (filters.version_status is None or spec.version_status[version] == filters.version_status)
            and (filters.chunk_kind is None or filters.chunk_kind in kinds)  # kinds: those the version has
            and (filters.date_from is None or (day is not None and day >= filters.date_from))
        )

    def run(self) -> None:
        for _ in range(4):
            callers = self.caller()
            principals = self.ref.expand(callers)
            visible = self.ref.visible_versions(principals)
            self.searches(callers, principals, visible)
            self.listing(callers, principals, visible)
            self.documents(callers, principals, visible)
            self.decisions(callers, principals)

    def searches(self, callers, principals, visible) -> None:
        for _ in range(2):
            query = " ".join(self.rng.sample(VOCABULARY, self.rng.randint(1, 3)))
            if self.rng.random() < 0.3:
                query += " " + self.rng.choice(IDENTIFIERS)
            filters = self.filters()
            request = SearchRequest(query=query, filters=filters, offset=self.rng.choice([0, 0, 2]),
                                    limit=self.rng.choice([3, 10]))
            response = self.service.search(request, callers)
            assert len({h.document_id for h in response.hits}) == len(response.hits), "collapse"
            for hit in response.hits:
                version = self.hit_version(hit, principals, visible)
                assert hit.chunk_kind == self.built.chunk_kind[hit.chunk_id] and hit.chunk_id != self.built.forged
                assert self.admitted_by_filters(version, {hit.chunk_kind}, filters), "filters"
                # The excerpt is a passage of the hit's own version (a clause or profile hit shows the body
                # passage it stands for, issue 38): never a word of another version's text.
                assert set(words(hit.citation.excerpt.strip("…"))) <= self.version_words(version)

    def version_words(self, version: str) -> set[str]:
        texts = (text for chunk, text in self.built.chunk_text.items() if self.built.chunk_version[chunk] == version)
        return {word for text in texts for word in words(text)}

    def hit_version(self, hit, principals, visible) -> str:
        """The hit's version by SQL's truth; it must be visible and cited through visible objects."""
        version = self.built.chunk_version[hit.chunk_id]
        names = self.built.names
        assert names[hit.version_id] == version and version in visible, f"leaked version {version}"
        assert names[hit.document_id] == self.ref.spec.version_doc[version], "document mismatch"
        cited = {names[s.source_object_id] for s in hit.citation.source_objects}
        assert cited and cited <= self.ref.citable(version, principals), f"citation {cited}"
        return version

    def listing(self, callers, principals, visible) -> None:
        filters = self.filters()
        response = self.service.search_filter(filters, callers, 0, 500)
        listed = {self.hit_version(h, principals, visible) for h in response.hits}
        kinds: dict[str, set[str]] = {}
        for chunk_id, version in self.built.chunk_version.items():
            if chunk_id != self.built.forged:
                kinds.setdefault(version, set()).add(self.built.chunk_kind[chunk_id])
        expected = {v for v in visible if self.admitted_by_filters(v, kinds[v], filters)}
        assert listed == expected, "listing"
        assert len(response.hits) == len(listed), "one hit per version"

    def documents(self, callers, principals, visible) -> None:
        spec, world = self.ref.spec, self.built.world
        for doc in self.rng.sample(list(spec.doc_project), min(3, len(spec.doc_project))):
            shown = {v for v in visible if spec.version_doc[v] == doc}
            document_id = world.documents[doc].id
            if not shown:
                with pytest.raises(DocumentNotFound):
                    self.service.get_document(document_id, callers)
                continue
            view = self.service.get_document(document_id, callers)
            assert {self.built.names[v.version.id] for v in view.versions} == shown, "versions"
            for v in view.versions:
                assert {self.built.names[s.source_object_id] for s in v.source_objects} <= self.ref.citable(
                    self.built.names[v.version.id], principals)
            result = self.service.traverse(document_id, callers, depth=2)
            seen_docs = {spec.version_doc[v] for v in visible}
            for related in result.related:
                assert self.built.names[related.document.document.id] in seen_docs, "neighbour"
            for edge in result.edges:
                assert {self.built.names[edge.from_document_id], self.built.names[edge.to_document_id]} <= seen_docs
                for version_id in (edge.from_version_id, edge.to_version_id):
                    assert version_id is None or self.built.names[version_id] in visible, "edge version"

    def decisions(self, callers, principals) -> None:
        query = " ".join(self.rng.sample(VOCABULARY, 3))
        found = {self.built.decisions[h.id] for h in self.service.search_decisions(query, callers, 50)}
        expected = {
            name for name, (text, _entries) in self.ref.spec.decisions.items()
            if self.ref.decision_visible(name, principals) and query_terms(query) & set(words(f"{name} {text}"))
        }
        assert found == expected, "decisions"


def check_world(session: Session, index: SearchIndex, seed: int, next_chunk_id: list[int]) -> None:
    rng = random.Random(seed)
    spec = generate(rng)
    savepoint = session.begin_nested()
    try:
        built = build(session, spec, index, next_chunk_id)
        # A fresh scope cache per world: rolled-back worlds reuse generation numbers.
        access = AccessService(session, built.world.settings)
        service = RetrievalService(built.world.settings, session, index, HashingEmbedder(dimensions=DIMENSIONS), access)
        Check(built, Reference(spec), service, rng).run()
    except AssertionError as exc:
        exc.add_note(f"world seed {seed}")
        raise
    finally:
        savepoint.rollback()


@pytest.mark.parametrize("backend_name", CONTRACT_BACKENDS)
def test_no_hit_listing_document_relation_or_decision_leaks_outside_the_scope(
    db_session: Session, tmp_path: Path, backend_name: str
) -> None:
    """On every backend: the OpenSearch scope query and the embedded one must admit the same."""
    next_chunk_id = [1_000]
    backend, cleanup = make_backend(backend_name, tmp_path / "index")
    try:
        index = backend.open(DIMENSIONS)
        index.ensure()
        for seed in range(WORLDS_PER_DATABASE):
            check_world(db_session, index, seed, next_chunk_id)
    finally:
        backend.close_all()
        cleanup()
