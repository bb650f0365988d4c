"""A local folder as a source, with an optional manifest describing versions and relations.

The manifest lets a firm without a DMS express what a DMS would tell us: which
files are versions of one document, their status, matter, date and relations.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from datetime import date
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ki_core.models import RelationKind, VersionStatus
from ki_core.models.ontology import OntologyKind
from ki_core.ontology import load_ontology

MANIFEST_NAMES = ("ki-manifest.json", "manifest.json")


class ManifestError(ValueError):
    """The manifest is present but unreadable or invalid; the message names the field."""


class ManifestRelation(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["annex_of", "responds_to", "references", "thread"]
    # The target's document key (or its path, which maps to a key).
    target: str

    @property
    def relation_kind(self) -> RelationKind:
        return RelationKind(self.kind)


class ManifestEntry(BaseModel):
    """What the manifest says about one file; every field optional."""

    model_config = ConfigDict(extra="forbid")

    path: str
    document: str | None = None
    version: str | None = None
    status: VersionStatus = VersionStatus.UNKNOWN
    matter: str | None = None
    title: str | None = None
    doc_date: date | None = None
    language: str | None = None
    # What the file is: an ontology id or its last segment ("decision", "letter", "contract.lease").
    doc_type: str | None = None
    relations: list[ManifestRelation] = Field(default_factory=list)

    @field_validator("doc_type")
    @classmethod
    def _known_doc_type(cls, value: str | None) -> str | None:
        """The declared type as its ontology id; a name the ontology does not know is a manifest error."""
        if value is None:
            return None
        node = load_ontology().resolve(OntologyKind.DOC_TYPE, value)
        if node is None:
            raise ValueError(f"unknown document type {value!r} (see ki_core/data/ontology.json)")
        return node


class Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    files: list[ManifestEntry] = Field(default_factory=list)

    def entry_for(self, relative_path: str) -> ManifestEntry:
        for entry in self.files:
            if entry.path == relative_path:
                return entry
        return ManifestEntry(path=relative_path)

    def declaring(self, doc_types: Mapping[str, str]) -> Manifest:
        """This manifest with `doc_types` (relative path -> type) declared where it declares none:
        how a setup file beside the folders (examples/demo.json) types the files."""
        entries = {entry.path: entry for entry in self.files}
        for path, doc_type in doc_types.items():
            entry = entries.get(path) or ManifestEntry(path=path)
            if entry.doc_type is None:
                try:
                    entries[path] = ManifestEntry.model_validate({**entry.model_dump(), "doc_type": doc_type})
                except ValidationError as exc:
                    raise ManifestError(f"{path}: doc_type: {exc.errors()[0]['msg']}") from None
        return Manifest(files=list(entries.values()))


def load_manifest(root: Path) -> tuple[Manifest, Path | None]:
    for name in MANIFEST_NAMES:
        path = root / name
        if path.is_file():
            try:
                return Manifest.model_validate(json.loads(path.read_text(encoding="utf-8"))), path
            except json.JSONDecodeError as exc:
                raise ManifestError(f"{path}: not valid JSON ({exc})") from None
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(p) for p in first["loc"])
                raise ManifestError(f"{path}: {where}: {first['msg']}") from None
    return Manifest(), None


def document_key(entry: ManifestEntry) -> str:
    """Files without a manifest key are their own document, keyed by path without suffix."""
    return entry.document or str(Path(entry.path).with_suffix(""))


def iter_files(root: Path) -> Iterator[Path]:
    """Every regular file under root in a stable order, without hidden files or the manifest."""
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if not path.is_file() or any(part.startswith(".") for part in relative.parts):
            continue
        if len(relative.parts) == 1 and relative.name in MANIFEST_NAMES:
            continue
        yield path
