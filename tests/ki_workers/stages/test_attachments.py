"""A mail's attachments: documents of their own, annex_of the mail, seen exactly where the mail is seen."""

from __future__ import annotations

from datetime import UTC, datetime
from email.message import EmailMessage

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ki_core.acl import visible_versions
from ki_core.principals import viewer_for
from ki_core.config import get_settings
from ki_core.grants import AclEntry, GrantTarget, grant, replace_group_members, replace_object_acl, revoke
from ki_core.models import (
    Document,
    DocumentVersion,
    GrantEffect,
    ObservationState,
    ProcessingState,
    Relation,
    RelationKind,
    SourceKind,
    SourceObject,
    SourceObservation,
)
from ki_workers.sources.local_fs import ManifestEntry
from ki_workers.stages.attachments import ATTACHMENT_ORIGIN, attachment_key
from ki_workers.stages.convert import MEDIA_DOCX, MEDIA_PDF, MEDIA_TEXT, MSG_ATTACHMENTS_UNSUPPORTED
from ki_workers.stages.ingest import IngestResult, Outcome, ingest_bytes, retire_object
from ki_workers.stages.rows import get_or_create_project, get_or_create_source
from tests.ki_workers.stages.msg_builder import build_msg
from tests.ki_workers.stages.test_convert import make_docx, make_mail, make_pdf

MAIL = "post/anfrage.eml"
MAIL_KEY = "post/anfrage"
GUTACHTEN = make_pdf([["Gutachten Zwergpudel", "Die Heizungsanlage ist mangelhaft."]], title="Gutachten Heizung")


def _ingest(session: Session, data: bytes, path: str = MAIL, *, kind: SourceKind = SourceKind.LOCAL_FS) -> IngestResult:
    """From the folder `ordner`, or from the DMS `acme` (an object id for a path, the file name beside it)."""
    source = get_or_create_source(session, "ordner" if kind is SourceKind.LOCAL_FS else "acme", kind)
    project = get_or_create_project(session, "nordbau")
    return ingest_bytes(
        session, source=source, project=project, external_id=path, data=data,
        entry=ManifestEntry(path=path, matter="Nordbau ./. Stadtwerke"),
        filename=f"{path}.eml" if kind is SourceKind.DMS else None,
    )


def _version(session: Session, version_id: str) -> DocumentVersion:
    return session.get(DocumentVersion, version_id)


def _active_on(session: Session, path: str) -> set[str]:
    return set(session.scalars(
        select(SourceObservation.version_id)
        .join(SourceObject, SourceObject.id == SourceObservation.source_object_id)
        .where(SourceObject.external_id == path, SourceObservation.state == ObservationState.ACTIVE)
    ))


def _sees(session: Session, principal: str, version_id: str) -> bool:
    return bool(visible_versions(session, viewer_for(session, [principal], get_settings()), [version_id]))


def _rows(session: Session) -> dict[str, int]:
    return {model.__name__: session.scalar(select(func.count()).select_from(model))
            for model in (Document, DocumentVersion, Relation, SourceObservation)}


# ---------------------------------------------------------------- documents


def test_each_attachment_becomes_a_converted_document_of_its_own_annex_of_the_mail(db_session: Session) -> None:
    result = _ingest(db_session, make_mail(("Gutachten.pdf", GUTACHTEN, MEDIA_PDF), ("Arbeitsvertrag.docx", make_docx(), MEDIA_DOCX)))

    mail = _version(db_session, result.version_id)
    pdf, docx = (_version(db_session, a.version_id) for a in result.attachments)
    assert [a.outcome for a in result.attachments] == [Outcome.NEW, Outcome.NEW]
    assert [db_session.get(Document, v.document_id).key for v in (pdf, docx)] == [
        f"{MAIL_KEY}#attachment/1-Gutachten.pdf", f"{MAIL_KEY}#attachment/2-Arbeitsvertrag.docx",
    ]
    assert pdf.processing_state is ProcessingState.CONVERTED and "Zwergpudel" in pdf.text
    assert "Kündigungsfrist beträgt drei Monate" in docx.text
    assert "Zwergpudel" not in mail.text
    annex = db_session.get(Document, pdf.document_id)
    assert annex.title == "Gutachten Heizung" and db_session.get(Document, docx.document_id).title == "Arbeitsvertrag Jürgen Weiß"
    assert annex.project_id == mail.document.project_id and annex.matter_id == mail.document.matter_id
    relation = db_session.scalar(select(Relation).where(Relation.from_version_id == pdf.id))
    assert (relation.kind, relation.to_document_id, relation.to_version_id, relation.origin) == (
        RelationKind.ANNEX_OF, mail.document_id, mail.id, ATTACHMENT_ORIGIN,
    )
    assert _active_on(db_session, MAIL) == {mail.id, pdf.id, docx.id}


def test_an_attachment_that_cannot_be_converted_fails_on_its_own_and_the_mail_does_not(db_session: Session) -> None:
    result = _ingest(db_session, make_mail(
        ("kaputt.pdf", b"%PDF-1.4 kein echtes PDF", MEDIA_PDF), ("foto.png", b"\x89PNG\r\n", "image/png"),
        ("notiz.txt", "Frist am 30.06. notiert".encode(), MEDIA_TEXT),
    ))

    assert result.outcome is Outcome.NEW and _version(db_session, result.version_id).processing_state is ProcessingState.CONVERTED
    broken, picture, note = result.attachments
    assert (broken.outcome, picture.outcome, note.outcome) == (Outcome.FAILED, Outcome.FAILED, Outcome.NEW)
    assert broken.reason.startswith(f"conversion failed: attachment 'kaputt.pdf' of mail '{MAIL}': unreadable PDF")
    assert picture.reason == f"conversion failed: attachment 'foto.png' of mail '{MAIL}': unsupported file type .png"
    assert _version(db_session, broken.version_id).last_error == broken.reason


def test_a_forwarded_mail_brings_its_own_attachments_under_its_own_key(db_session: Session) -> None:
    forwarded = EmailMessage()
    forwarded["Subject"] = "WG: Mängelanzeige"
    forwarded.set_content("Siehe Gutachten.")
    forwarded.add_attachment(GUTACHTEN, maintype="application", subtype="pdf", filename="Gutachten.pdf")
    forwarded.add_attachment(b"%PDF-1.4 kaputt", maintype="application", subtype="pdf", filename="alt.pdf")
    result = _ingest(db_session, make_mail(forwarded))

    keys = [db_session.get(Document, a.document_id).key for a in result.attachments]
    inner = f"{MAIL_KEY}#attachment/1-attachment.eml"
    assert keys == [inner, f"{inner}#attachment/1-Gutachten.pdf", f"{inner}#attachment/2-alt.pdf"]
    assert result.attachments[2].reason.startswith(f"conversion failed: attachment 'alt.pdf' of mail '{MAIL}#attachment.eml'")
    nested = db_session.scalar(select(Relation).where(Relation.from_version_id == result.attachments[1].version_id))
    assert nested.to_version_id == result.attachments[0].version_id
    again = _ingest(db_session, make_mail(forwarded))
    assert {a.version_id for a in again.attachments} == {a.version_id for a in result.attachments}


def test_outlook_attachments_are_recorded_as_failed_with_the_way_out(db_session: Session) -> None:
    data = build_msg(
        subject="Vertrag", body="Anbei der Vertrag.", sender="a@kanzlei.example", to="b@mandant.example",
        sent=datetime(2020, 3, 12, 9, 15, tzinfo=UTC), attachments=(("Vertrag.pdf", GUTACHTEN),),
    )
    result = _ingest(db_session, data, "post/vertrag.msg")

    assert result.outcome is Outcome.NEW
    assert [a.reason for a in result.attachments] == [
        f"conversion failed: attachment 'Vertrag.pdf' of mail 'post/vertrag.msg': {MSG_ATTACHMENTS_UNSUPPORTED}",
    ]


# ------------------------------------------------------------- re-ingest


def test_the_same_mail_again_creates_no_rows_and_finds_its_attachments(db_session: Session) -> None:
    data = make_mail(("Gutachten.pdf", GUTACHTEN, MEDIA_PDF), ("kaputt.pdf", b"%PDF-1.4 nein", MEDIA_PDF))
    first = _ingest(db_session, data)
    rows = _rows(db_session)
    second = _ingest(db_session, data)

    assert _rows(db_session) == rows
    assert second.outcome is Outcome.UNCHANGED
    assert [(a.version_id, a.outcome) for a in second.attachments] == [
        (first.attachments[0].version_id, Outcome.UNCHANGED), (first.attachments[1].version_id, Outcome.FAILED),
    ]


def test_a_new_version_of_the_mail_replaces_its_attachments_versions(db_session: Session) -> None:
    first = _ingest(db_session, make_mail(("Gutachten.pdf", GUTACHTEN, MEDIA_PDF), ("notiz.txt", b"alte Notiz", MEDIA_TEXT)))
    revised = make_pdf([["Gutachten Zwergpudel, zweite Fassung"]])
    second = _ingest(db_session, make_mail(("Gutachten.pdf", revised, MEDIA_PDF), subject="Korrigierte Unterlagen"))

    (pdf,) = second.attachments
    assert pdf.document_id == first.attachments[0].document_id and pdf.version_id != first.attachments[0].version_id
    assert _version(db_session, pdf.version_id).previous_version_id == first.attachments[0].version_id
    assert _active_on(db_session, MAIL) == {second.version_id, pdf.version_id}
    assert set(second.retired_version_ids) == {first.version_id, *(a.version_id for a in first.attachments)}


# ------------------------------------------------------------------ access


def test_in_a_folder_an_attachment_is_visible_exactly_to_whom_the_mail_is(db_session: Session) -> None:
    result = _ingest(db_session, make_mail(("Gutachten.pdf", GUTACHTEN, MEDIA_PDF)))
    mail, (annex,) = result.version_id, result.attachments
    settings = get_settings()
    project_id = db_session.get(Document, result.document_id).project_id
    source_id = db_session.scalar(select(SourceObject.source_id).where(SourceObject.external_id == MAIL))
    grant(db_session, GrantTarget.project(project_id), "team:bau", settings=settings)
    replace_group_members(db_session, source_id, "team:bau", ["anna", "bernd"], settings=settings)

    assert [(_sees(db_session, p, mail), _sees(db_session, p, annex.version_id)) for p in ("anna", "bernd", "carla")] == [
        (True, True), (True, True), (False, False),
    ]


def test_a_deny_on_the_mail_document_reaches_its_attachments_with_the_next_ingest(db_session: Session) -> None:
    data = make_mail(("Gutachten.pdf", GUTACHTEN, MEDIA_PDF))
    result = _ingest(db_session, data)
    annex = result.attachments[0].version_id
    project_id = db_session.get(Document, result.document_id).project_id
    grant(db_session, GrantTarget.project(project_id), "anna", settings=get_settings())
    grant(db_session, GrantTarget.document(result.document_id), "anna", effect=GrantEffect.DENY, settings=get_settings())
    _ingest(db_session, data)

    assert not _sees(db_session, "anna", result.version_id) and not _sees(db_session, "anna", annex)
    revoke(db_session, GrantTarget.document(result.document_id), "anna", effect=GrantEffect.DENY, settings=get_settings())
    _ingest(db_session, data)
    assert _sees(db_session, "anna", result.version_id) and _sees(db_session, "anna", annex)


def test_a_deny_on_the_mail_document_before_its_first_ingest_holds_for_new_attachments(db_session: Session) -> None:
    """A new version of the mail brings new attachment documents: they get the deny at once."""
    first = _ingest(db_session, make_mail())
    project_id = db_session.get(Document, first.document_id).project_id
    grant(db_session, GrantTarget.project(project_id), "anna", settings=get_settings())
    grant(db_session, GrantTarget.document(first.document_id), "anna", effect=GrantEffect.DENY, settings=get_settings())
    second = _ingest(db_session, make_mail(("Gutachten.pdf", GUTACHTEN, MEDIA_PDF)))

    assert not _sees(db_session, "anna", second.attachments[0].version_id)


def test_from_a_dms_the_mail_objects_acl_is_the_attachments_acl_and_follows_its_changes(db_session: Session) -> None:
    result = _ingest(db_session, make_mail(("Gutachten.pdf", GUTACHTEN, MEDIA_PDF)), "M-1", kind=SourceKind.DMS)
    annex = result.attachments[0].version_id
    obj = db_session.scalar(select(SourceObject).where(SourceObject.external_id == "M-1"))
    assert not _sees(db_session, "anna", annex)  # no ACL told yet: nobody (fail closed)

    replace_object_acl(db_session, obj.id, [AclEntry(principal="anna")], settings=get_settings())
    assert _sees(db_session, "anna", annex) and not _sees(db_session, "bernd", annex)
    replace_object_acl(db_session, obj.id, [AclEntry(principal="bernd"), AclEntry(principal="anna", effect=GrantEffect.DENY)],
                       settings=get_settings())
    assert [_sees(db_session, p, v) for p in ("anna", "bernd") for v in (result.version_id, annex)] == [False, False, True, True]


def test_a_mail_gone_from_its_source_takes_its_attachments_out_of_sight(db_session: Session) -> None:
    result = _ingest(db_session, make_mail(("Gutachten.pdf", GUTACHTEN, MEDIA_PDF)))
    project_id = db_session.get(Document, result.document_id).project_id
    grant(db_session, GrantTarget.project(project_id), "anna", settings=get_settings())
    obj = db_session.scalar(select(SourceObject).where(SourceObject.external_id == MAIL))

    assert set(retire_object(db_session, obj)) == {result.version_id, result.attachments[0].version_id}
    assert not _sees(db_session, "anna", result.attachments[0].version_id)


PRINCIPALS = ("anna", "bernd", "team", "carla")
_GRANTS = st.lists(st.tuples(st.sampled_from(PRINCIPALS[:3]), st.sampled_from(list(GrantEffect))), max_size=3, unique=True)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    kind=st.sampled_from(list(SourceKind)), mode=st.sampled_from(["sufficient", "intersect"]),
    object_acl=st.none() | _GRANTS, project_grants=_GRANTS, mail_grants=_GRANTS,
    team=st.lists(st.sampled_from(PRINCIPALS[:2]), unique=True),
)
def test_an_attachment_is_never_visible_to_someone_who_cannot_see_the_mail(
    db_session: Session, kind, mode, object_acl, project_grants, mail_grants, team,
) -> None:
    """Whatever the grants (after the mail's next ingest): the mail's visibility, less its document allows."""
    savepoint = db_session.begin_nested()
    try:
        _check_inherited_access(db_session, kind, mode, object_acl, project_grants, mail_grants, team)
    finally:
        savepoint.rollback()


def _check_inherited_access(session: Session, kind, mode, object_acl, project_grants, mail_grants, team) -> None:
    config = get_settings()
    config = config.model_copy(update={"security": config.security.model_copy(update={"source_acl_mode": mode})})
    data = make_mail(("notiz.txt", "Frist am 30.06. notiert".encode(), MEDIA_TEXT))
    path = "M-1" if kind is SourceKind.DMS else MAIL
    result = _ingest(session, data, path, kind=kind)
    document = session.get(Document, result.document_id)
    obj = session.scalar(select(SourceObject).where(SourceObject.external_id == path))
    if object_acl is not None:
        replace_object_acl(session, obj.id, [AclEntry(principal=p, effect=e) for p, e in object_acl], settings=config)
    for target, grants in ((GrantTarget.project(document.project_id), project_grants),
                           (GrantTarget.document(document.id), mail_grants)):
        for principal, effect in grants:
            grant(session, target, principal, effect=effect, settings=config)
    replace_group_members(session, obj.source_id, "team", team, settings=config)
    _ingest(session, data, path, kind=kind)
    mail_allows = any(effect is GrantEffect.ALLOW for _, effect in mail_grants)
    for principal in PRINCIPALS:
        viewer = viewer_for(session, [principal], config)
        mail, annex = (bool(visible_versions(session, viewer, [v])) for v in (result.version_id, result.attachments[0].version_id))
        assert mail or not annex, f"{principal} sees the attachment but not the mail"
        assert mail_allows or annex == mail, f"{principal}: mail {mail}, attachment {annex}"


def test_attachment_keys_are_stable_short_and_free_of_paths() -> None:
    assert attachment_key("m", 2, "C:\\Users\\x\\Mein Vertrag.pdf") == "m#attachment/2-Mein-Vertrag.pdf"
    long_key = attachment_key("m", 1, "x" * 400 + ".docx")
    assert len(long_key) < 150 and long_key.endswith(".docx")
    assert attachment_key("m", 1, "  ") == "m#attachment/1-attachment"
