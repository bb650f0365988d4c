"""The page's words in German (the default) and English, and which of the two a request gets.

The choice is a plain preference cookie (no credential in it); every other
word on a page is data from the index.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.requests import Request

LANGUAGES = ("de", "en")
DEFAULT_LANGUAGE = "de"
LANGUAGE_COOKIE = "ki_lang"

# key: (German, English)
TEXTS: dict[str, tuple[str, str]] = {
    "product": ("Kanzlei-Wissensindex", "Firm knowledge index"),
    "skip": ("Zum Inhalt springen", "Skip to content"),
    "nav.search": ("Suche", "Search"),
    "nav.ask": ("Fragen", "Ask"),
    "nav.operations": ("Betrieb", "Operations"),
    "nav.audit": ("Protokoll", "Audit"),
    "audit.title": ("Zugriffsprotokoll", "Audit trail"),
    "audit.user": ("Person", "Person"),
    "audit.document": ("Dokument-ID", "Document id"),
    "audit.group": ("Gruppe", "Group"),
    "audit.as": ("als", "as"),
    "audit.filter": ("Filtern", "Filter"),
    "audit.time": ("Zeit (UTC)", "Time (UTC)"),
    "audit.surface": ("Zugang", "Surface"),
    "audit.action": ("Aktion", "Action"),
    "audit.what": ("Suche oder Dokument", "Query or document"),
    "audit.hits": ("Treffer", "Hits"),
    "audit.none": ("Keine Einträge.", "No records."),
    "audit.hint": ("Die neuesten 50; alle mit ki audit --csv DATEI.", "The newest 50; all of them with ki audit --csv FILE."),
    "nav.signout": ("Abmelden", "Sign out"),
    "nav.language": ("English", "Deutsch"),
    "signed_in_as": ("Angemeldet als", "Signed in as"),
    "signin.title": ("Anmelden", "Sign in"),
    "signin.credential": ("API-Schlüssel oder Token (JWT)", "API key or token (JWT)"),
    "signin.help": ("Der Schlüssel bleibt in einem Sitzungs-Cookie, das keine Seite lesen kann, "
                    "und wird beim Abmelden gelöscht.",
                    "The key stays in a session cookie that no page script can read, and is "
                    "deleted when you sign out."),
    "signin.submit": ("Anmelden", "Sign in"),
    "signin.directory": ("Mit dem Kanzlei-Konto anmelden", "Sign in with the firm's account"),
    "signin.done": ("Angemeldet. Weiter zur Suche", "Signed in. On to the search"),
    "signin.failed": ("Anmeldung fehlgeschlagen", "Sign-in failed"),
    "search.title": ("Suche", "Search"),
    "search.query": ("Suchbegriffe, Aktenzeichen oder §-Verweis", "Words, case number or § reference"),
    "search.submit": ("Suchen", "Search"),
    "search.filters": ("Filter", "Filters"),
    "search.any": ("alle", "any"),
    "search.project": ("Mandant/Projekt", "Client/project"),
    "search.matter": ("Akte", "Matter"),
    "search.doc_type": ("Dokumenttyp", "Document type"),
    "search.status": ("Versionsstatus", "Version status"),
    "search.language": ("Sprache", "Language"),
    "search.date_from": ("Datum von", "Date from"),
    "search.date_to": ("Datum bis", "Date to"),
    "search.reset": ("Filter zurücksetzen", "Reset filters"),
    "search.listing": ("Neueste Dokumente (ohne Suchbegriff, nach Datum)", "Newest documents (no query, by date)"),
    "search.results": ("Treffer für", "Hits for"),
    "search.none": ("Keine Treffer.", "No hits."),
    "search.page": ("Seite", "Page"),
    "search.previous": ("Zurück", "Previous"),
    "search.next": ("Weiter", "Next"),
    "search.pages": ("Seiten", "Pages"),
    "search.count": ("Treffer", "hits"),
    "search.about": ("etwa", "about"),
    "search.no_good_match": ("Keine gute Übereinstimmung", "No good match"),
    "search.no_good_match_detail": ("Die Treffer unten passen nur lose zur Suche.", "The hits below match the query only loosely."),
    "search.sort": ("Sortieren", "Sort"),
    "search.sort_relevance": ("Relevanz", "Relevance"),
    "search.sort_date_desc": ("Neueste zuerst", "Newest first"),
    "search.sort_date_asc": ("Älteste zuerst", "Oldest first"),
    "search.facets": ("Eingrenzen", "Narrow down"),
    "search.facet_type": ("Dokumenttyp", "Document type"),
    "search.facet_project": ("Mandant/Projekt", "Client/project"),
    "search.facet_year": ("Jahr", "Year"),
    "search.facet_court": ("Gericht", "Court"),
    "search.syntax": ('"genaue Phrase", -ausschließen, -§ 573c BGB, OR, Kündig*, typ:Urteil, az:…, '
                      "norm:§§ 573-575, norm:DSGVO, datum:2020-01-01..",
                      '"exact phrase", -exclude, -§ 573c BGB, OR, Kündig*, typ:Urteil, az:…, norm:§§ 573-575, '
                      "norm:DSGVO, datum:2020-01-01.."),
    "hit.file": ("Datei", "File"),
    "hit.project": ("Projekt", "Project"),
    "hit.matter": ("Akte", "Matter"),
    "hit.version": ("Version", "Version"),
    "hit.date": ("Datum", "Date"),
    "hit.identifiers": ("Erkannte Kennungen", "Matched identifiers"),
    "explain.summary": ("Warum dieser Treffer?", "Why this hit?"),
    "explain.leg": ("Suchweg", "Leg"),
    "explain.rank": ("Rang", "Rank"),
    "explain.score": ("Wert", "Score"),
    "explain.fused": ("Fusionswert (RRF)", "Fused score (RRF)"),
    "explain.boost": ("Statusgewicht", "Status boost"),
    "explain.boosted": ("Gewichteter Wert", "Boosted score"),
    "explain.rerank": ("Neubewertung", "Rerank score"),
    "explain.access": ("Zugriff", "Access"),
    "explain.grants": ("Freigaben", "Grants"),
    "doc.citation": ("Zitierweise", "Citation"),
    "doc.versions": ("Versionen", "Versions"),
    "doc.latest_final": ("neueste endgültige Fassung", "latest final version"),
    "doc.sources": ("Quellen", "Sources"),
    "doc.related": ("Verknüpfte Dokumente", "Related documents"),
    "doc.no_related": ("Keine verknüpften Dokumente, die Sie sehen dürfen.", "No related documents you may see."),
    "doc.decisions": ("Entscheidungen", "Decision records"),
    "doc.no_decisions": ("Keine Entscheidungen, deren Belege Sie alle sehen dürfen.",
                         "No decision records whose evidence you may all see."),
    "doc.identifiers": ("Kennungen", "Identifiers"),
    "doc.type": ("Dokumenttyp", "Document type"),
    "doc.language": ("Sprache", "Language"),
    "doc.decided_by": ("entschieden von", "decided by"),
    "doc.who": ("Wer darf das sehen und warum?", "Who may see this and why?"),
    "doc.who_principal": ("Prinzipal (Benutzer oder Gruppe)", "Principal (user or group)"),
    "doc.who_submit": ("Prüfen", "Explain"),
    "doc.visible": ("sichtbar", "visible"),
    "doc.not_visible": ("nicht sichtbar", "not visible"),
    "doc.principals": ("Prinzipale nach Gruppenauflösung", "Principals after group expansion"),
    "doc.text": ("Text", "Text"),
    "doc.cite_as": ("Zitieren als", "Cite as"),
    "doc.version_switch": ("Fassung", "Version"),
    "doc.download": ("Original herunterladen", "Download original"),
    "doc.sections": ("Gliederung", "Sections"),
    "doc.chars": ("Zeichen", "Characters"),
    "statute.units": ("Absätze", "Subsections"),
    "doc.admin_sees_all": ("sieht als Admin alles", "sees everything as admin"),
    "admin_sees_all": ("Sie sehen als Admin alles, auch gesperrte Dokumente.",
                       "You see everything as admin, walled documents included."),
    "relation.outgoing": ("ausgehend", "outgoing"),
    "relation.incoming": ("eingehend", "incoming"),
    "ask.title": ("Fragen", "Ask"),
    "ask.question": ("Ihre Frage (Gesetze und Kanzleidokumente)", "Your question (statutes and firm documents)"),
    "ask.submit": ("Fragen", "Ask"),
    "ask.verdict": ("Ergebnis", "Verdict"),
    "ask.verdict.found": ("gefunden", "found"),
    "ask.verdict.weak": ("schwach", "weak"),
    "ask.verdict.nothing_relevant": ("nichts Einschlägiges", "nothing relevant"),
    "ask.verdict.unknown": ("unbekannt (eine Quelle konnte nicht prüfen)", "unknown (a corpus could not check)"),
    "ask.corpus": ("Quelle", "Corpus"),
    "ask.kinds": ("Fundart", "Kinds"),
    "ask.firm": ("Kanzlei", "Firm"),
    "ask.none": ("Keine Treffer.", "No hits."),
    "ops.title": ("Betrieb", "Operations"),
    "ops.states": ("Versionen je Verarbeitungsstand", "Versions per processing state"),
    "ops.state": ("Stand", "State"),
    "ops.count": ("Anzahl", "Count"),
    "ops.failed_versions": ("Jede fehlgeschlagene Version mit Datei und Grund", "Every failed version with its file and reason"),
    "ops.events": ("Fehlgeschlagene und geparkte Ereignisse", "Failed and parked events"),
    "ops.no_events": ("Keine fehlgeschlagenen oder geparkten Ereignisse.", "No failed or parked events."),
    "ops.event": ("Ereignis", "Event"),
    "ops.type": ("Typ", "Type"),
    "ops.status": ("Status", "Status"),
    "ops.attempts": ("Versuche", "Attempts"),
    "ops.reason": ("Grund", "Reason"),
    "ops.received": ("Empfangen (UTC)", "Received (UTC)"),
    "ops.redrive": ("Erneut verarbeiten", "Redrive"),
    "ops.redrive_cli": ("Erneut verarbeiten mit", "Redrive with"),
    "ops.redriven": ("Ereignis erneut verarbeitet", "Event redriven"),
    "ops.sweeps": ("Letzter Sweep und Abgleich", "Last sweep and reconcile"),
    "ops.not_recorded": ("nicht aufgezeichnet (dieser Prozess speichert den Zeitpunkt nicht)",
                         "not recorded (this process does not store the time)"),
    "ops.index": ("Suchindex", "Search index"),
    "ops.index_name": ("Name", "Name"),
    "ops.index_signature": ("Signatur", "Signature"),
    "ops.index_size": ("Abschnitte im Index", "Chunks in the index"),
    "ops.backend": ("Backend", "Backend"),
    "ops.flower": ("Celery-Überwachung (Flower)", "Celery monitor (Flower)"),
    "error.400": ("Die Anfrage wurde abgelehnt", "The request was refused"),
    "error.403": ("Kein Zugriff", "Not allowed"),
    "error.403.text": ("Diese Seite ist Administratoren vorbehalten.", "This page is for administrators only."),
    "error.404": ("Nicht gefunden", "Not found"),
    "error.404.text": ("Dieses Dokument gibt es nicht, oder Sie dürfen es nicht sehen.",
                       "This document does not exist, or you may not see it."),
    "error.503": ("Vorübergehend nicht verfügbar", "Temporarily unavailable"),
    "error.back": ("Zur Suche", "Back to search"),
}


def language_of(request: Request) -> str:
    chosen = request.cookies.get(LANGUAGE_COOKIE)
    return chosen if chosen in LANGUAGES else DEFAULT_LANGUAGE


def translator(language: str) -> Callable[[str], str]:
    """`t("key")` in the templates; an unknown key shows itself, so a missing text is seen, not blank."""
    position = LANGUAGES.index(language)

    def t(key: str) -> str:
        pair = TEXTS.get(key)
        return pair[position] if pair else key

    return t
