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


class CorpusLoadError(ValueError):
    """A record file is unreadable or a record is malformed; the message names file and line."""


class ProviderConfigError(ValueError):
    """A provider's data file is missing or malformed; the message names the file and entry."""


class EvalFileError(ValueError):
    """The queries file is unreadable or a line is malformed; the message names file and line."""
