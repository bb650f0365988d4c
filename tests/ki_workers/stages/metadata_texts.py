"""Realistic German documents for the metadata tests (names and numbers invented)."""

LEASE = """Mietvertrag über Gewerberäume

zwischen

Hanse Immobilien GmbH, vertreten durch den Geschäftsführer Dr. Klaus Brandt, Speicherstadt 4, 20457 Hamburg
- nachstehend „Vermieter“ genannt -

und

Nordbau Projektgesellschaft mbH, Am Sandtorkai 12, 20457 Hamburg
- nachstehend „Mieter“ genannt -

Vertragsnummer: MV-2020-0417

wird folgender Mietvertrag geschlossen:

§ 1 Mietgegenstand
(1) Vermietet werden die Büroräume im 3. Obergeschoss des Gebäudes Speicherstadt 4 mit einer Fläche von ca. 420 m².
(2) Die Räume werden zur Nutzung als Architekturbüro vermietet.

§ 2 Mietdauer
(1) Das Mietverhältnis beginnt am 01.04.2020 und wird auf die Dauer von fünf Jahren fest abgeschlossen.
(2) Es verlängert sich um jeweils ein Jahr, wenn es nicht gekündigt wird.

§ 3 Miete und Nebenkosten
(1) Die monatliche Nettokaltmiete beträgt 8.400,00 € zuzüglich der gesetzlichen Umsatzsteuer.
(2) Der Mieter leistet monatliche Vorauszahlungen auf die Betriebskosten gemäß § 556 BGB.

§ 4 Mietsicherheit
Der Mieter leistet eine Kaution in Höhe von drei Monatsmieten.

§ 5 Kündigung
(1) Die ordentliche Kündigung ist während der festen Laufzeit ausgeschlossen.
(2) Das Recht zur außerordentlichen fristlosen Kündigung aus wichtigem Grund nach § 543 BGB bleibt unberührt.

§ 6 Schönheitsreparaturen
Die Schönheitsreparaturen trägt der Mieter.

§ 7 Haftung
Der Vermieter haftet für Sach- und Rechtsmängel nur bei Vorsatz und grober Fahrlässigkeit.

§ 8 Gerichtsstand
Gerichtsstand für alle Streitigkeiten aus diesem Vertrag ist Hamburg.

§ 9 Schriftform
Änderungen und Ergänzungen dieses Vertrages bedürfen der Schriftform.

§ 10 Salvatorische Klausel
Sollte eine Bestimmung dieses Vertrages unwirksam sein, bleibt die Wirksamkeit der übrigen Bestimmungen unberührt.

Hamburg, den 15.03.2020

Hanse Immobilien GmbH                Nordbau Projektgesellschaft mbH
"""

JUDGMENT = """BUNDESGERICHTSHOF
IM NAMEN DES VOLKES
URTEIL
VIII ZR 12/19
Verkündet am:
12. März 2020
Ermel, Justizangestellte als Urkundsbeamtin der Geschäftsstelle
in dem Rechtsstreit
Gerda Lindemann, Elbchaussee 101, 22763 Hamburg,
Klägerin und Revisionsklägerin,
- Prozessbevollmächtigter: Rechtsanwalt Dr. Meyer -
gegen
Hanse Immobilien GmbH, vertreten durch den Geschäftsführer, Speicherstadt 4, 20457 Hamburg,
Beklagte und Revisionsbeklagte,
Der VIII. Zivilsenat des Bundesgerichtshofs hat auf die mündliche Verhandlung vom 5. Februar 2020 durch die Vorsitzende Richterin Dr. Milger und die Richter Dr. Schneider, Kosziol und Dr. Bünger
für Recht erkannt:
Auf die Revision der Klägerin wird das Urteil der Zivilkammer 16 des Landgerichts Hamburg vom 20. Dezember 2018 (316 S 45/18) aufgehoben.
Von Rechts wegen
Tatbestand:
Die Klägerin ist Mieterin einer Wohnung der Beklagten. Sie begehrt die Feststellung, dass die Kündigung nach § 573 Abs. 2 Nr. 2 BGB unwirksam ist.
"""

LETTER = """Kanzlei Brandt & Partner Rechtsanwälte
Jungfernstieg 7, 20354 Hamburg

Frau
Gerda Lindemann
Elbchaussee 101
22763 Hamburg

Unser Zeichen: 117/20 BR
Ihr Zeichen: L-2020-03

Hamburg, 24. März 2020

In Sachen Lindemann ./. Hanse Immobilien GmbH – Mietminderung
Betreff: Ihre Mietminderung wegen Baulärms

Sehr geehrte Frau Lindemann,

wir bestätigen den Eingang Ihres Schreibens vom 18.03.2020. Die Minderung der Miete nach § 536 BGB ist aus unserer Sicht berechtigt, soweit der Baulärm die Gebrauchstauglichkeit der Wohnung erheblich beeinträchtigt.

Wir empfehlen, die Zahlungen künftig unter Vorbehalt zu leisten.

Mit freundlichen Grüßen

Dr. Klaus Brandt
Rechtsanwalt
"""

MEMO = """Aktennotiz

Mandat: Nordbau Projektgesellschaft mbH – Bauvorhaben Hafencity
Az.: 204/19 NB
Datum: 02.04.2020

Telefonat mit Herrn Petersen (Nordbau) am 01.04.2020

Herr Petersen teilt mit, dass der Generalunternehmer die Fertigstellung um sechs Wochen verschieben will. Wir haben auf die Vertragsstrafe nach Ziffer 8.2 des Generalunternehmervertrags hingewiesen. Die Frist zur Mängelanzeige nach § 640 BGB ist zu notieren.

Wiedervorlage: 15.04.2020
"""

ENGLISH_NDA = """Non-Disclosure Agreement

This agreement is made between Alpha Ltd and Beta GmbH. The parties shall keep all information that is disclosed by either party confidential and shall not use it for any purpose other than the evaluation of the project.
"""
