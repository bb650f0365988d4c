"""Edge exceptions of corpora, federation providers and evaluation (mapped to exit codes in ki.errors).

Kept free of heavy imports so that the CLI's error table can name them cheaply.
"""

from __future__ import annotations


class UnknownCorpus(KeyError):
    """No corpus of that id is registered."""

    def __str__(self) -> str:
        return f"no corpus {self.args[0]!r} is registered (ki corpus list shows the registered ones)"


class CorpusEmbeddingMismatch(RuntimeError):
    """A corpus was indexed with another embedder than the one that embeds the question."""


class CorpusIndexMissing(RuntimeError):
    """A registered corpus has no search index (deleted, or its load stopped before the index phase)."""


class CorpusLoadError(ValueError):
    """A record file is unreadable or a record is malformed; the message names file and line."""


class ProviderConfigError(ValueError):
    """A provider's data file is missing or malformed; the message names the file and entry."""


class EvalFileError(ValueError):
    """The queries file is unreadable or a line is malformed; the message names file and line."""


class EmptyQuestion(ValueError):
    """A question without a letter or digit ("", "?"): a usage error (CLI exit 2, HTTP 400).

    Nothing could match it, and embedding it gives a zero vector that every corpus rejects.
    """

    def __init__(self, question: str) -> None:
        super().__init__(
            f"the question {question!r} has no words to search for: ask with at least one word or number"
        )


def check_question(question: object) -> str:
    """The question, or EmptyQuestion when it has no letter or digit to search for."""
    if not isinstance(question, str) or not any(ch.isalnum() for ch in question):
        raise EmptyQuestion(question if isinstance(question, str) else repr(question))
    return question
