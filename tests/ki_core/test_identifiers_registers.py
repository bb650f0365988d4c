"""Register numbers (HRB, VR, PR ...) and the Amtsgericht that keeps them."""

from __future__ import annotations

from ki_core.identifiers import extract
from tests.ki_core.found_identifiers import found


def test_register_number_with_suffix_and_court() -> None:
    (item,) = extract("Registergericht: Amtsgericht Berlin-Charlottenburg, Registernummer: HRB 123456 B")
    assert (item.normalized, item.register_type, item.court) == ("HRB 123456 B", "HRB", "AG Charlottenburg")


def test_register_number_court_may_follow_it() -> None:
    (item,) = extract("Vereinsregister VR 4217 beim Amtsgericht Frankfurt (Oder)")
    assert (item.normalized, item.court) == ("VR 4217", "AG Frankfurt (Oder)")


def test_vr_and_pr_need_a_register_context() -> None:
    assert extract("Die VR 2000 Brille") == []
    assert found("Partnerschaftsregister PR 1234, AG Essen") == ["PR 1234"]
