"""Find and normalize legal identifiers in German legal text.

Five kinds: statute references (§/Art. chains), case numbers (Aktenzeichen),
ECLIs, commercial/association register numbers and EU references (acts,
articles of EU acts, EuGH cases). Normalization follows the normative rules in
shared/data/README.md: one statute entry per norm in German citation order
("§ 573c Abs. 1 Satz 2 BGB"), ranges kept as ranges, "/" as the year separator
of a case number, complete upper-case ECLIs.

Each kind is found by a precompiled trigger regex and then parsed locally, so
the cost is linear in the text. The law table and court codes are data
(ki_core/data/laws.json, courts.json), loaded once.

One module per kind (`statutes`, `case_numbers`, `ecli`, `registers`, `eu`),
the tables they read (`laws`, `courts`), what sits around an identifier
(`law_names`, `dates`, `spans`) and `extraction`, which runs them in order.
"""

from .courts import court_table
from .extraction import extract, identifiers_text
from .laws import Law, law_table, normalize_law
from .model import Identifier, Kind
from .query_terms import EXTRACTOR_VERSION, IdentifierTerms, query_identifier_terms

__all__ = [
    "EXTRACTOR_VERSION",
    "Identifier",
    "IdentifierTerms",
    "Kind",
    "Law",
    "court_table",
    "extract",
    "identifiers_text",
    "law_table",
    "normalize_law",
    "query_identifier_terms",
]
