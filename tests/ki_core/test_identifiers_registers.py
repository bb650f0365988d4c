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


def test_a_register_named_in_words_with_a_bare_number_takes_the_registers_abbreviation() -> None:
    (item,) = extract("Eingetragen im Vereinsregister des Amtsgerichts München Registernummer: 14188")
    assert (item.normalized, item.register_type, item.court) == ("VR 14188", "VR", "AG München")
    assert found('in das Vereinsregister des Amtsgerichts Backnang unter "Register-Nr. 79" eingetragen') == ["VR 79"]
    assert found("im Partnerschaftsregister des Amtsgerichts Essen unter der Nummer 2887 eingetragen") == ["PR 2887"]
    assert found("im Genossenschaftsregister des Amtsgerichts Würzburg unter Nr. 298") == ["GnR 298"]


def test_the_number_may_come_before_the_register_it_is_kept_in() -> None:
    (item,) = extract("ist unter der derzeitigen Nr. 400266 in das Vereinsregister des Amtsgerichts Stuttgart eingetragen")
    assert (item.normalized, item.court) == ("VR 400266", "AG Stuttgart")
    # a Handelsregister number needs its department, which would follow unread
    assert extract("unter der laufenden Nummer 12 in das Handelsregister des Amtsgerichts Köln eingetragen") == []


def test_a_register_number_written_with_its_long_name_and_a_type_is_found_once() -> None:
    assert found("im Vereinsregister des Amtsgerichts Stuttgart unter der Registernummer VR 6921 eingetragen") == ["VR 6921"]
    assert found("Registergericht: Amtsgericht Mainz Registernummer: HRB - 44244") == ["HRB 44244"]
