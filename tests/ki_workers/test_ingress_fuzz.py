"""The ingress under hostile input (hypothesis, bounded): never a 5xx other than 503.

Signed bodies reach parsing and validation: any JSON, event envelopes with
fields replaced by any value, raw bytes; unsigned requests carry hostile
headers. A DMS retries a 5xx forever, so an answer of 500 is a bug here.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.hostile import JSON_VALUES, NASTY_STRINGS, encoded, mutated
from tests.ki_workers.dms_support import SECRET, acl_changed, envelope, upserted
from tests.ki_workers.test_ingress import client, configure, post  # noqa: F401 - fixtures
from ki_workers.sources.dms_events import SIGNATURE_HEADER, TIMESTAMP_HEADER

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
EVENTS = [
    upserted("F-1"),
    acl_changed("F-1", [{"principal": "bob"}]),
    envelope("group.changed", 1, group="team", members=["bob"]),
    envelope("decision.recorded", 1, decision_id="D-1", project="kontorwerk", locus="§ 1",
             change_summary="x", rationale="y", evidence=[{"object_id": "F-1"}]),
]


def answered_without_a_bug(status: int) -> bool:
    return status < 500 or status == 503


@FUZZ
@given(body=st.one_of(JSON_VALUES.map(encoded), st.binary(max_size=300),
                      st.sampled_from(EVENTS).flatmap(mutated).map(encoded)))
def test_a_signed_body_of_anything_is_never_a_5xx(client, body: bytes) -> None:  # noqa: F811
    response = post(client, body)
    assert answered_without_a_bug(response.status_code), (response.status_code, body[:200], response.text[:300])


def test_a_key_with_a_lone_surrogate_is_named_escaped_in_the_400(client) -> None:  # noqa: F811
    response = post(client, b'{"\\ud800": {"\\u0000": null}}')
    assert response.status_code == 400
    assert {e["path"] for e in response.json()["errors"]} >= {"\\ud800"}


@FUZZ
@given(timestamp=NASTY_STRINGS, signature=NASTY_STRINGS, source=NASTY_STRINGS.filter(lambda s: "/" not in s and s))
def test_hostile_headers_and_sources_are_refused_not_crashed_on(client, timestamp, signature, source) -> None:  # noqa: F811
    headers = {TIMESTAMP_HEADER: timestamp.encode("utf-8", "surrogatepass").decode("latin-1"),
               SIGNATURE_HEADER: signature.encode("utf-8", "surrogatepass").decode("latin-1")}
    try:
        response = post(client, encoded(EVENTS[1]), headers=headers, source=source, secret=SECRET)
    except Exception as exc:  # a header the HTTP client itself refuses to send (a newline) never reaches us
        assert type(exc).__name__ in {"LocalProtocolError", "InvalidHeader", "InvalidURL", "UnicodeEncodeError"}, exc
        return
    assert answered_without_a_bug(response.status_code), (response.status_code, response.text[:300])
    assert response.status_code in {400, 401, 404, 413}
