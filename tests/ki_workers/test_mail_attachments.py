"""A mail's attachment end to end: folder or DMS -> its own indexed document -> search, annex_of, access.

In-process on SQLite and PostgreSQL, on both search backends. The ingest
stage stores the attachments' versions; `tasks.ingest` (the folder path) hands
them on with the mail's, while the DMS handler hands on only the mail's version
for now, so there the sweep (`redrive_versions`, which re-drives converted
versions) takes the attachments through metadata, embedding and the index, as
it would in production.
"""

from __future__ import annotations

import base64
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select, update

from ki_core.principals import viewer_for
from ki_core.grants import GrantTarget, grant, replace_group_members
from ki_core.models import Chunk, Document, DocumentVersion, ProcessingState, Project, RelationKind, Source
from ki_core.models.base import utcnow
from ki_query.graph import traverse
from ki_query.retrieval import RetrievalService
from ki_query.scope import AccessService
from ki_query.types import DocumentNotFound, SearchRequest
from ki_workers.folder_sync import sync_folder
from ki_workers.sweep import redrive_versions
from ki_workers.stages.convert import MEDIA_PDF
from tests.ki_workers.dms_support import acl_changed, sha256, upserted
from tests.ki_workers.stages.test_convert import make_mail, make_pdf
from tests.ki_workers.test_dms_events import dms, sees, server, submit  # noqa: F401 - fixtures

GUTACHTEN = make_pdf([["Gutachten zur Heizungsanlage", "Der Zwergpudel im Heizungskeller ist nicht schuld."]])
MAIL = make_mail(("Gutachten.pdf", GUTACHTEN, MEDIA_PDF), ("kaputt.pdf", b"%PDF-1.4 kein PDF", MEDIA_PDF))
ANNEX_KEY = "post/anfrage#attachment/1-Gutachten.pdf"


def _process_attachments(ctx) -> None:
    """What the sweep does for versions left converted: back-date them past the delay and sweep."""
    with ctx.sessions() as session, session.begin():
        session.execute(
            update(DocumentVersion)
            .where(DocumentVersion.processing_state == ProcessingState.CONVERTED)
            .values(updated_at=utcnow() - timedelta(seconds=ctx.settings.sweep.stuck_version_after_seconds + 60))
        )
    redrive_versions(ctx)


def _search(ctx, query: str, principal: str):
    service = RetrievalService(ctx.settings, ctx.sessions, ctx.index(), ctx.embedder(), AccessService(ctx.sessions, ctx.settings))
    return service.search(SearchRequest(query=query), [principal]).hits


def _document(ctx, key: str) -> Document:
    with ctx.sessions() as session:
        return session.scalar(select(Document).where(Document.key == key))


def test_a_folder_mail_attachment_is_found_annex_of_the_mail_and_only_by_who_sees_the_mail(
    search_backend: str, ctx, tmp_path: Path
) -> None:
    root = tmp_path / "kanzlei"
    (root / "post").mkdir(parents=True)
    (root / "post" / "anfrage.eml").write_bytes(MAIL)
    summary = sync_folder(ctx, root, "heizung")
    assert summary.outcomes == {"new": 1}
    assert [(path, "kaputt.pdf" in reason) for path, reason in summary.errors] == [("post/anfrage.eml", True)], (
        "the broken attachment is reported at its mail; the mail and the good attachment are indexed"
    )
    with ctx.sessions() as session, session.begin():
        project_id = session.scalar(select(Project.id).where(Project.name == "heizung"))
        source_id = session.scalar(select(Source.id).where(Source.name.like("local:%")))
        grant(session, GrantTarget.project(project_id), "team:heizung", settings=ctx.settings)
        replace_group_members(session, source_id, "team:heizung", ["anna"], settings=ctx.settings)

    hits = _search(ctx, "Zwergpudel Heizungskeller", "anna")
    annex, mail = _document(ctx, ANNEX_KEY), _document(ctx, "post/anfrage")
    assert hits and hits[0].document_id == annex.id and "Zwergpudel" in hits[0].excerpt
    assert [s.external_id for s in hits[0].citation.source_objects] == ["post/anfrage.eml"]
    with ctx.sessions() as session:
        related = traverse(session, viewer_for(session, ["anna"], ctx.settings), mail.id, kinds=[RelationKind.ANNEX_OF])
        failed = session.scalar(select(DocumentVersion).join(Document, Document.id == DocumentVersion.document_id)
                                .where(Document.key == "post/anfrage#attachment/2-kaputt.pdf"))
    # The broken attachment is there too, as any failed file is: a document without text.
    assert {(r.document.document.id, r.direction) for r in related.related} == {
        (annex.id, "incoming"), (failed.document_id, "incoming"),
    }
    assert failed.last_error.startswith("conversion failed: attachment 'kaputt.pdf' of mail 'post/anfrage.eml'")

    assert _search(ctx, "Zwergpudel Heizungskeller", "bernd") == ()
    with ctx.sessions() as session, pytest.raises(DocumentNotFound):
        traverse(session, viewer_for(session, ["bernd"], ctx.settings), mail.id)


def test_a_dms_mail_attachment_has_the_mail_objects_acl_in_sql_and_in_the_index(dms) -> None:
    content = {"base64": base64.b64encode(MAIL).decode(), "sha256": sha256(MAIL)}
    submit(dms, upserted("M-7", filename="anfrage.eml", content=content, acl=[{"principal": "alice"}]))
    _process_attachments(dms)
    access = AccessService(dms.sessions, dms.settings)
    with dms.sessions() as session:
        annex = session.scalar(select(DocumentVersion).join(Document, Document.id == DocumentVersion.document_id)
                               .where(Document.key == "M-7#attachment/1-Gutachten.pdf"))
    assert annex.processing_state == ProcessingState.INDEXED
    assert sees(access, "alice", annex) and not sees(access, "bob", annex)

    submit(dms, acl_changed("M-7", [{"principal": "bob"}]))
    assert sees(access, "bob", annex) and not sees(access, "alice", annex)
    with dms.sessions() as session:
        chunk_id = session.scalar(select(Chunk.id).where(Chunk.version_id == annex.id).limit(1))
    index = dms.index()
    index.refresh()
    assert list(index.stored_fields(chunk_id)["allowed_principals"]) == ["bob"]
    assert _search(dms, "Zwergpudel Heizungskeller", "alice") == ()
    assert _search(dms, "Zwergpudel Heizungskeller", "bob")[0].document_id == annex.document_id

