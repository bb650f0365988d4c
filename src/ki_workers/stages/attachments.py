"""What ties a mail's attachments to the mail: document keys, `annex_of` edges, inherited denies.

The ingest stage turns each attachment into a version of a document of its
own (ingest.store_attachments). An attachment is read from the mail's bytes,
so it is seen where the mail is seen: its version observes the mail's source
object, which gives it the mail's source ACL, the mail's deletion and, in the
same project, the project grants. Document grants do not carry over by
themselves (ki_core.acl matches a document's own grants), so the mail
document's denies are copied to its attachments on every ingest of the mail,
fail closed; its allows are not, since a copy would outlive a revocation.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from sqlalchemy import select
from sqlalchemy.orm import Session

from ki_core.acl import in_set
from ki_core.models import DocumentVersion, Grant, GrantEffect, GrantScope, Relation, RelationKind
from ki_workers.stages.convert import MAIL_MEDIA_TYPES

# Origin of the edges and the copied denies written here (the manifest's and the operator's differ).
ATTACHMENT_ORIGIN = "attachment"
# Mails forwarded as attachments this deep are a loop or a bomb, not correspondence.
MAX_NESTING = 5
# Document keys hold 500 characters: a mail key and a long file name must still fit.
MAX_NAME_CHARS = 120


def attachment_key(mail_key: str, index: int, filename: str) -> str:
    """Stable across re-ingests of the mail: the attachment's 1-based position and its file name."""
    name = "-".join(PurePosixPath(filename.replace("\\", "/")).name.split()) or "attachment"
    if len(name) > MAX_NAME_CHARS:
        suffix = PurePosixPath(name).suffix[:20]
        name = name[: MAX_NAME_CHARS - len(suffix)] + suffix
    return f"{mail_key}#attachment/{index}-{name}"


def known_attachments(session: Session, mail: DocumentVersion) -> list[DocumentVersion]:
    """The attachment versions once taken out of `mail`, in the order ingest gives them: no re-parse.

    Depth first, like ingest.store_attachments. It ends: an attachment's document key
    extends its mail's, so no version is its own ancestor.
    """
    if mail.media_type not in MAIL_MEDIA_TYPES:
        return []
    rows = session.execute(
        select(DocumentVersion, Relation.attributes)
        .join(Relation, Relation.from_version_id == DocumentVersion.id)
        .where(
            Relation.kind == RelationKind.ANNEX_OF,
            Relation.origin == ATTACHMENT_ORIGIN,
            Relation.to_version_id == mail.id,
        )
    ).all()
    found: list[DocumentVersion] = []
    for version, _ in sorted(rows, key=lambda row: (row[1] or {}).get("index", 0)):
        found += [version, *known_attachments(session, version)]
    return found


def inherit_mail_denies(session: Session, mail_document_id: str, attachment_document_ids: list[str]) -> list[str]:
    """Make the copied denies of the attachment documents the mail document's denies of now.

    An operator's own deny on an attachment stays. Returns the attachment
    documents whose grants changed, so their versions' projection is stale.
    """
    documents = sorted(set(attachment_document_ids))
    if not documents:
        return []
    wanted = {g.principal for g in session.scalars(_document_denies([mail_document_id]))}
    present = {(g.document_id, g.principal): g for g in session.scalars(_document_denies(documents))}
    changed = set()
    for (document_id, principal), row in present.items():
        if row.origin == ATTACHMENT_ORIGIN and principal not in wanted:
            session.delete(row)
            changed.add(document_id)
    for document_id in documents:
        for principal in sorted(p for p in wanted if (document_id, p) not in present):
            session.add(
                Grant(scope=GrantScope.DOCUMENT, document_id=document_id, effect=GrantEffect.DENY,
                      principal=principal, origin=ATTACHMENT_ORIGIN)
            )
            changed.add(document_id)
    session.flush()
    return sorted(changed)


def _document_denies(document_ids: list[str]):
    return select(Grant).where(
        Grant.scope == GrantScope.DOCUMENT, Grant.effect == GrantEffect.DENY, in_set(Grant.document_id, document_ids)
    )
