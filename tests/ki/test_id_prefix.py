"""A typed id prefix resolves git-style, within what the caller may see (both databases)."""

from __future__ import annotations

import pytest
from sqlalchemy.orm import Session

from ki_core.acl import Viewer
from ki_core.principals import viewer_for
from ki_core.models import Document, DocumentVersion
from ki_query.id_prefix import AmbiguousId, IdNotFound, resolve_visible_id
from tests.ki_core.access_world import World

SEEN_A = "abcd1" + "0" * 27
SEEN_B = "abcd2" + "0" * 27
HIDDEN = "abcd1f" + "0" * 26  # shares "abcd1" with SEEN_A
VERSION_OF_SEEN_A = "cafe1" + "0" * 27


def document(world: World, name: str, document_id: str, version_id: str, project: str) -> None:
    """A document with one version, both with the ids given, observed as a local file without an ACL."""
    world.documents[name] = Document(id=document_id, project_id=world.project(project).id, key=name)
    world.session.add(world.documents[name])
    world.versions[name] = DocumentVersion(id=version_id, document_id=document_id, seq=1, content_hash=name)
    world.session.add(world.versions[name])
    world.session.flush()
    world.object(name, "fs")
    world.observe(name, name)


@pytest.fixture
def alice(db_session: Session) -> Viewer:
    """Alice may see the documents of project "seen" (SEEN_A, SEEN_B), not those of "hidden" (HIDDEN)."""
    world = World(db_session)
    document(world, "a", SEEN_A, VERSION_OF_SEEN_A, "seen")
    document(world, "b", SEEN_B, "cafe2" + "0" * 27, "seen")
    document(world, "h", HIDDEN, "cafe3" + "0" * 27, "hidden")
    world.allow("alice", project="seen")
    return viewer_for(db_session, ["alice"], world.settings)


def resolve(session: Session, viewer: Viewer, reference: str, kind: str = "document") -> str:
    return resolve_visible_id(session, viewer, kind, reference)  # type: ignore[arg-type]


def test_a_unique_prefix_a_whole_id_and_upper_case_resolve_to_the_whole_id(db_session: Session, alice: Viewer) -> None:
    assert resolve(db_session, alice, "abcd1") == SEEN_A
    assert resolve(db_session, alice, SEEN_A) == SEEN_A
    assert resolve(db_session, alice, " ABCD1 ") == SEEN_A
    assert resolve(db_session, alice, "cafe1", kind="version") == VERSION_OF_SEEN_A


def test_a_prefix_shared_by_visible_documents_names_them_and_asks_for_more(db_session: Session, alice: Viewer) -> None:
    with pytest.raises(AmbiguousId) as refused:
        resolve(db_session, alice, "abcd")

    assert str(refused.value) == (
        f"document id prefix 'abcd' matches 2 documents: {SEEN_A}, {SEEN_B}; give more characters"
    )


def test_an_invisible_document_sharing_the_prefix_is_not_counted(db_session: Session, alice: Viewer) -> None:
    assert resolve(db_session, alice, "abcd1") == SEEN_A
    with pytest.raises(AmbiguousId, match="matches 2 documents"):
        resolve(db_session, alice, "abcd")
    with pytest.raises(IdNotFound):
        resolve(db_session, alice, "cafe3", kind="version")


def test_a_prefix_of_an_invisible_document_answers_exactly_like_a_prefix_of_none(
    db_session: Session, alice: Viewer
) -> None:
    answers = []
    for reference in ("abcd1f", "abcd1e", HIDDEN, "d" * 32):
        with pytest.raises(LookupError) as failed:
            resolve(db_session, alice, reference)
        answers.append((type(failed.value), str(failed.value).replace(reference, "REF")))

    assert answers == [(IdNotFound, "no document 'REF'")] * 4


@pytest.mark.parametrize("reference", ["abc", "a"])
def test_a_prefix_under_four_characters_is_refused_without_a_lookup(
    db_session: Session, alice: Viewer, reference: str
) -> None:
    with pytest.raises(AmbiguousId, match="too short: give at least 4 characters"):
        resolve(db_session, alice, reference)


@pytest.mark.parametrize("reference", ["abcd1%", "abcd_", "", "mandant-a/vertrag", "a" * 33])
def test_what_is_no_id_prefix_is_simply_not_found(db_session: Session, alice: Viewer, reference: str) -> None:
    with pytest.raises(IdNotFound):
        resolve(db_session, alice, reference)
