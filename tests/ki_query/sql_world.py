"""Small SQL worlds for the read paths that need no index: documents, graph, decisions.

Rows go in with the ORM; access data through ki_core.grants, as the product
writes it. Everything lives in the test's session (rolled back afterwards).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date

from sqlalchemy.orm import Session

from ki_core import grants
from ki_core.config import Settings
from ki_core.models import (
    Document,
    DocumentVersion,
    GrantEffect,
    ObservationState,
    Project,
    Relation,
    RelationKind,
    Source,
    SourceKind,
    SourceObject,
    SourceObservation,
    VersionStatus,
)
from ki_query.retrieval import RetrievalService
from ki_query.scope import AccessService


class SqlWorld:
    def __init__(self, session: Session, settings: Settings | None = None) -> None:
        self.session = session
        self.settings = settings or Settings()
        self.projects: dict[str, Project] = {}
        self.documents: dict[str, Document] = {}
        self.versions: dict[str, DocumentVersion] = {}
        self.sources: dict[str, Source] = {}
        self.objects: dict[str, SourceObject] = {}

    def service(self) -> RetrievalService:
        """Reads only: no index and no embedder are needed for documents, relations and decisions."""
        return RetrievalService(self.settings, self.session, None, None, AccessService(self.session, self.settings))  # type: ignore[arg-type]

    # ------------------------------------------------------------------ corpus

    def project(self, name: str) -> Project:
        if name not in self.projects:
            self.projects[name] = self._add(Project(name=name, title=name.upper()))
        return self.projects[name]

    def document(self, key: str, project: str = "p") -> Document:
        if key not in self.documents:
            self.documents[key] = self._add(Document(project_id=self.project(project).id, key=key, title=key.title()))
        return self.documents[key]

    def version(
        self, name: str, *, project: str = "p", status: str = "final", source: str = "fs",
        acl: Iterable[tuple[str, str]] | None = None, observed: str | None = "active", doc_date: date | None = None,
    ) -> DocumentVersion:
        """Version `doc/label`, seen as its own object `name` in `source` (acl None: unknown)."""
        key, label = name.split("/")
        document = self.document(key, project)
        seq = 1 + sum(1 for v in self.versions.values() if v.document_id == document.id)
        version = self._add(DocumentVersion(
            document_id=document.id, seq=seq, version_label=label, status=VersionStatus(status),
            content_hash=name, doc_date=doc_date, language="de",
        ))
        self.versions[name] = version
        if status in ("final", "executed"):
            document.latest_final_version_id = version.id
            self.session.flush()
        if observed is not None:
            self.object(name, source, acl)
            self.observe(name, name, observed)
        return version

    def source(self, name: str) -> Source:
        if name not in self.sources:
            kind = SourceKind.DMS if name.startswith("dms") else SourceKind.LOCAL_FS
            self.sources[name] = self._add(Source(name=name, kind=kind))
        return self.sources[name]

    def object(self, name: str, source: str = "fs", acl: Iterable[tuple[str, str]] | None = None) -> SourceObject:
        if name not in self.objects:
            self.objects[name] = self._add(SourceObject(source_id=self.source(source).id, external_id=name, title=name))
            if acl is not None:
                entries = [grants.AclEntry(principal=p, effect=GrantEffect(e)) for p, e in acl]
                grants.replace_object_acl(self.session, self.objects[name].id, entries, settings=self.settings)
        return self.objects[name]

    def observe(self, version: str, obj: str, state: str = "active") -> None:
        self._add(SourceObservation(
            version_id=self.versions[version].id, source_object_id=self.objects[obj].id, state=ObservationState(state)
        ))
        grants.bump_access_generation(self.session)

    def relate(self, kind: str, source: str, target: str) -> Relation:
        """`source` and `target` are document keys or `doc/label` version names."""
        (from_doc, from_version), (to_doc, to_version) = self._end(source), self._end(target)
        return self._add(Relation(
            kind=RelationKind(kind), from_document_id=from_doc, to_document_id=to_doc,
            from_version_id=from_version, to_version_id=to_version, origin="test",
        ))

    def _end(self, name: str) -> tuple[str, str | None]:
        if "/" in name:
            version = self.versions[name]
            return version.document_id, version.id
        return self.documents[name].id, None

    # ------------------------------------------------------------------ access

    def allow(self, principal: str, *, project: str | None = None, document: str | None = None) -> None:
        grants.grant(self.session, self._target(project, document), principal, settings=self.settings)

    def deny(self, principal: str, *, project: str | None = None, document: str | None = None) -> None:
        grants.grant(self.session, self._target(project, document), principal, effect=GrantEffect.DENY,
                     settings=self.settings)

    def members(self, group: str, members: Iterable[str], source: str = "fs") -> None:
        grants.replace_group_members(self.session, self.source(source).id, group, list(members), settings=self.settings)

    def _target(self, project: str | None, document: str | None) -> grants.GrantTarget:
        if document is not None:
            return grants.GrantTarget.document(self.documents[document].id)
        return grants.GrantTarget.project(self.projects[project or "p"].id)

    def _add(self, row):
        self.session.add(row)
        self.session.flush()
        return row
