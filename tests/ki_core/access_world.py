"""A small builder for access worlds: projects, documents, versions, sources, observations, grants.

Writes go through ki_core.grants where the product writes them (grants, ACLs,
memberships), so the tests exercise the same normalization and bookkeeping.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from ki_core import grants
from ki_core.acl import visible_versions
from ki_core.principals import viewer_for
from ki_core.config import Settings
from ki_core.models import (
    Document,
    DocumentVersion,
    GrantEffect,
    ObservationState,
    Project,
    Source,
    SourceKind,
    SourceObject,
    SourceObservation,
)


@dataclass
class World:
    session: Session
    settings: Settings = field(default_factory=Settings)
    projects: dict[str, Project] = field(default_factory=dict)
    documents: dict[str, Document] = field(default_factory=dict)
    versions: dict[str, DocumentVersion] = field(default_factory=dict)
    sources: dict[str, Source] = field(default_factory=dict)
    objects: dict[str, SourceObject] = field(default_factory=dict)

    # ---------------------------------------------------------------- corpus

    def project(self, name: str) -> Project:
        if name not in self.projects:
            self.projects[name] = Project(name=name)
            self.session.add(self.projects[name])
            self.session.flush()
        return self.projects[name]

    def document(self, name: str, project: str = "p") -> Document:
        """Documents are named globally in a world; `name` is also the key."""
        if name not in self.documents:
            self.documents[name] = Document(project_id=self.project(project).id, key=name)
            self.session.add(self.documents[name])
            self.session.flush()
        return self.documents[name]

    def version(self, name: str, document: str = "d", project: str = "p") -> DocumentVersion:
        if name not in self.versions:
            doc = self.document(document, project)
            seq = 1 + sum(1 for v in self.versions.values() if v.document_id == doc.id)
            self.versions[name] = DocumentVersion(document_id=doc.id, seq=seq, content_hash=f"{name}-{seq}")
            self.session.add(self.versions[name])
            self.session.flush()
        return self.versions[name]

    def source(self, name: str, kind: SourceKind | str | None = None) -> Source:
        if name not in self.sources:
            kind = SourceKind(kind) if kind else (SourceKind.DMS if name.startswith("dms") else SourceKind.LOCAL_FS)
            self.sources[name] = Source(name=name, kind=kind)
            self.session.add(self.sources[name])
            self.session.flush()
        return self.sources[name]

    def object(self, name: str, source: str = "fs", acl: Iterable[tuple[str, str]] | None = None) -> SourceObject:
        """A source object; `acl` None keeps its ACL unknown, else (principal, effect) entries."""
        if name not in self.objects:
            self.objects[name] = SourceObject(source_id=self.source(source).id, external_id=name)
            self.session.add(self.objects[name])
            self.session.flush()
            if acl is not None:
                self.acl(name, acl)
        return self.objects[name]

    def acl(self, obj: str, entries: Iterable[tuple[str, str]] | None) -> None:
        acl = None if entries is None else [grants.AclEntry(principal=p, effect=GrantEffect(e)) for p, e in entries]
        grants.replace_object_acl(self.session, self.objects[obj].id, acl, settings=self.settings)

    def observe(self, version: str, obj: str, state: str = "active") -> SourceObservation:
        row = SourceObservation(
            version_id=self.versions[version].id,
            source_object_id=self.objects[obj].id,
            state=ObservationState(state),
        )
        self.session.add(row)
        self.session.flush()
        grants.bump_access_generation(self.session)
        return row

    def set_state(self, version: str, obj: str, state: str) -> None:
        row = self.session.query(SourceObservation).filter_by(
            version_id=self.versions[version].id, source_object_id=self.objects[obj].id
        ).one()
        row.state = ObservationState(state)
        self.session.flush()
        grants.bump_access_generation(self.session)

    # ---------------------------------------------------------------- access

    def allow(self, principal: str, *, project: str | None = None, document: str | None = None,
              obj: str | None = None) -> None:
        """A local allow on a project (default "p"), a document or, with `obj`, one source object."""
        grants.grant(self.session, self._target(project, document, obj), principal, settings=self.settings)

    def deny(self, principal: str, *, project: str | None = None, document: str | None = None,
             obj: str | None = None) -> None:
        grants.grant(
            self.session, self._target(project, document, obj), principal, effect=GrantEffect.DENY,
            settings=self.settings,
        )

    def revoke(self, principal: str, *, project: str | None = None, document: str | None = None,
               obj: str | None = None, effect: str = "allow") -> int:
        return grants.revoke(
            self.session, self._target(project, document, obj), principal, effect=GrantEffect(effect),
            settings=self.settings,
        )

    def members(self, group: str, members: Iterable[str], source: str = "fs") -> None:
        """The group's members as `source` mirrors them (its whole list, replaced)."""
        grants.replace_group_members(
            self.session, self.source(source).id, group, list(members), settings=self.settings
        )

    def local_members(self, group: str, members: Iterable[str]) -> None:
        """Members an operator adds (`ki groups add`), beside any source's list."""
        grants.add_local_members(self.session, group, list(members), settings=self.settings)

    def _target(self, project: str | None, document: str | None, obj: str | None = None) -> grants.GrantTarget:
        if obj is not None:
            return grants.GrantTarget.source_object(self.objects[obj].id)
        if document is not None:
            return grants.GrantTarget.document(self.documents[document].id)
        return grants.GrantTarget.project(self.projects[project or "p"].id)

    # ----------------------------------------------------------------- names

    def version_names(self, ids: Iterable[str]) -> set[str]:
        by_id = {v.id: name for name, v in self.versions.items()}
        return {by_id[i] for i in ids}

    def document_names(self, ids: Iterable[str]) -> set[str]:
        by_id = {d.id: name for name, d in self.documents.items()}
        return {by_id[i] for i in ids}


# ------------------------------------------------------------- shapes and checks


def local_file(world: World, version: str = "v", document: str = "d", project: str = "p") -> None:
    """A version seen as a local_fs file (object `<version>.txt`) whose ACL nobody told us."""
    world.version(version, document, project)
    world.object(f"{version}.txt", "fs")
    world.observe(version, f"{version}.txt")


def dms_object(world: World, acl, version: str = "v") -> None:
    """A version seen as DMS object `<version>.dms` with this ACL (None: unknown)."""
    world.version(version)
    world.object(f"{version}.dms", "dms", acl)
    world.observe(version, f"{version}.dms")


def sees(world: World, principals: list[str], version: str = "v") -> bool:
    """Re-verification's answer: may these principals see the version?"""
    viewer = viewer_for(world.session, principals, world.settings)
    return world.versions[version].id in visible_versions(world.session, viewer, [world.versions[version].id])
