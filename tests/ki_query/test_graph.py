"""get_document and relation traversal: every entity returned is checked on its own (SQLite and PostgreSQL).

The world: anna may see project p (local files, delegation). Around the
contract: an annex, a letter (answered by a reply), a DMS document whose
object ACL names anna, a secret annex anna is denied (which a further
document references), and a document of project q nobody granted her.
"""

from __future__ import annotations

import pytest
from sqlalchemy import update
from sqlalchemy.orm import Session

from ki_core.grants import bump_access_generation
from ki_core.models import ObservationState, SourceObservation
from ki_query.types import DocumentNotFound, TraversalTooDeep
from tests.ki_query.sql_world import SqlWorld


@pytest.fixture
def world(db_session: Session) -> SqlWorld:
    w = SqlWorld(db_session)
    w.version("contract/v1", status="draft")
    w.version("contract/v2", status="final")
    w.relate("supersedes", "contract/v2", "contract/v1")
    w.version("annex/v1")
    w.relate("annex_of", "annex", "contract")
    w.version("letter/v1")
    w.relate("references", "letter", "contract")
    w.version("reply/v1")
    w.relate("responds_to", "reply", "letter")
    w.version("dmsdoc/v1", source="dms1", acl=[("Anna", "allow")])
    w.relate("references", "dmsdoc", "contract")
    w.version("secret/v1")
    w.relate("annex_of", "secret", "contract")
    w.version("further/v1")
    w.relate("references", "further", "secret")
    w.version("other/v1", project="q")
    w.relate("references", "other", "contract")
    w.allow("anna", project="p")
    w.deny("anna", document="secret")
    return w


def related_keys(result) -> set[str]:
    return {r.document.document.key for r in result}


def test_related_documents_are_the_visible_neighbours_with_their_edge(world: SqlWorld) -> None:
    related = world.service().related_documents(world.documents["contract"].id, ["anna"])
    assert related_keys(related) == {"annex", "letter", "dmsdoc"}
    by_key = {r.document.document.key: r for r in related}
    assert (by_key["annex"].kind, by_key["annex"].direction) == ("annex_of", "incoming")
    assert by_key["letter"].via_document_id == world.documents["contract"].id
    assert all(r.depth == 1 for r in related)


def test_each_neighbour_resolves_to_the_sources_the_caller_may_cite(world: SqlWorld) -> None:
    related = {r.document.document.key: r.document for r in world.service().related_documents(
        world.documents["contract"].id, ["anna"])}
    [dms_source] = related["dmsdoc"].cited_version.source_objects
    assert (dms_source.source, dms_source.external_id, dms_source.source_kind) == ("dms1", "dmsdoc/v1", "dms")
    assert [s.external_id for s in related["annex"].cited_version.source_objects] == ["annex/v1"]


def test_an_invisible_neighbour_vanishes_and_the_walk_does_not_pass_through_it(world: SqlWorld) -> None:
    result = world.service().traverse(world.documents["contract"].id, ["anna"], depth=3)
    assert related_keys(result.related) == {"annex", "letter", "dmsdoc", "reply"}
    hidden = {world.documents[k].id for k in ("secret", "further", "other")}
    shown = {e.from_document_id for e in result.edges} | {e.to_document_id for e in result.edges}
    assert shown and not hidden & shown
    assert {r.document.document.key: r.depth for r in result.related}["reply"] == 2


@pytest.mark.parametrize("depth", [0, 4, 5])
def test_a_traversal_outside_one_to_three_hops_is_refused_not_clamped(world: SqlWorld, depth: int) -> None:
    with pytest.raises(TraversalTooDeep, match="1 to 3 hops"):
        world.service().traverse(world.documents["contract"].id, ["anna"], depth=depth)


def test_an_administrator_sees_every_neighbour(world: SqlWorld) -> None:
    result = world.service().traverse(world.documents["contract"].id, ["role:admin"], depth=2)
    assert related_keys(result.related) == {"annex", "letter", "dmsdoc", "reply", "secret", "other", "further"}


def test_kinds_narrow_the_walk(world: SqlWorld) -> None:
    related = world.service().related_documents(world.documents["contract"].id, ["anna"], kinds=["annex_of"])
    assert related_keys(related) == {"annex"}
    assert world.service().related_documents(world.documents["contract"].id, ["anna"], kinds=["thread"]) == []


def test_a_version_edge_shows_only_while_both_versions_are_visible(world: SqlWorld) -> None:
    service = world.service()
    contract = world.documents["contract"].id
    [edge] = [e for e in service.traverse(contract, ["anna"]).edges if e.kind == "supersedes"]
    assert (edge.from_version_id, edge.to_version_id) == (world.versions["contract/v2"].id, world.versions["contract/v1"].id)
    world.session.execute(
        update(SourceObservation).where(SourceObservation.version_id == world.versions["contract/v1"].id)
        .values(state=ObservationState.DELETED)
    )
    bump_access_generation(world.session)
    assert [e for e in service.traverse(contract, ["anna"]).edges if e.kind == "supersedes"] == []


def test_an_invisible_start_is_not_found_exactly_like_a_missing_one(world: SqlWorld) -> None:
    service = world.service()
    for document_id in (world.documents["secret"].id, world.documents["other"].id, "no-such-document"):
        with pytest.raises(DocumentNotFound) as caught:
            service.traverse(document_id, ["anna"])
        assert str(caught.value) == f"no document {document_id!r}"
        with pytest.raises(DocumentNotFound):
            service.get_document(document_id, ["anna"])
    with pytest.raises(DocumentNotFound):
        service.get_document(world.documents["contract"].id, ["bob"])


def test_get_document_lists_only_the_visible_versions(world: SqlWorld) -> None:
    service = world.service()
    contract = world.documents["contract"].id
    view = service.get_document(contract, ["anna"])
    assert [v.version.label for v in view.versions] == ["v1", "v2"]
    assert view.latest_final_version_id == world.versions["contract/v2"].id and view.cited_version.is_latest_final
    world.session.execute(
        update(SourceObservation).where(SourceObservation.version_id == world.versions["contract/v2"].id)
        .values(state=ObservationState.DELETED)
    )
    bump_access_generation(world.session)
    view = service.get_document(contract, ["anna"])
    assert [v.version.label for v in view.versions] == ["v1"]
    assert view.latest_final_version_id is None  # not revealed: the caller cannot see that version
