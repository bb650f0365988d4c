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


def test_a_handelsregister_department_named_after_the_number_completes_the_entry() -> None:
    (item,) = extract("eingetragen im Handelsregister des Amtsgerichts München unter der Nummer 98765 in Abteilung B")
    assert (item.normalized, item.court) == ("HRB 98765", "AG München")
    assert item.as_written.endswith("Abteilung B")
    assert found("im Handelsregister des Amtsgerichts Hagen unter Nr. 321, Abt. A") == ["HRA 321"]
    # without a department anywhere the entry is HRA or HRB: nothing is guessed
    assert extract("im Handelsregister des Amtsgerichts Essen unter der Nummer 4321 eingetragen") == []
    # a bare letter after the number is no department
    assert extract("im Handelsregister des Amtsgerichts Essen unter der Nummer 4321 B eingetragen") == []


def test_a_handelsregister_number_may_come_first_when_its_department_is_named() -> None:
    (item,) = extract("ist unter der Nummer 98765 in Abteilung B des Handelsregisters beim Amtsgericht Stuttgart eingetragen")
    assert (item.normalized, item.court) == ("HRB 98765", "AG Stuttgart")
    (item,) = extract("ist unter der Registernummer 12345 im Handelsregister Abteilung A beim Amtsgericht Kiel eingetragen")
    assert (item.normalized, item.court) == ("HRA 12345", "AG Kiel")


def test_the_court_of_a_register_is_a_town_never_the_register_named_after_it() -> None:
    (item,) = extract("beim Amtsgericht Köln im Handelsregister, Abteilung A, unter Nr. 4711")
    assert (item.normalized, item.court) == ("HRA 4711", "AG Köln")
    (item,) = extract("Amtsgericht Freiburg im Breisgau, HRB 1234")
    assert item.court == "AG Freiburg im Breisgau"
