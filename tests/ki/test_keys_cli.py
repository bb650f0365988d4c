"""`ki keys create|list|revoke`: a key made on the command line is what the HTTP query API accepts, until revoked."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from ki_core.config import load_settings
from ki_query.api.http import create_query_app
from ki_query.identity import key_digest
from ki_query.retrieval import retrieval_service_from_settings
from tests.ki.cli_store import ingested, ki, store  # noqa: F401 - fixture

SHIPPED_CONFIG = Path(__file__).parents[2] / "config.json"


@pytest.fixture
def config_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A copy of the shipped config.json, named by KI_CONFIG_FILE as an operator would."""
    path = tmp_path / "etc" / "ki.json"
    path.parent.mkdir()
    shutil.copyfile(SHIPPED_CONFIG, path)
    monkeypatch.setenv("KI_CONFIG_FILE", str(path))
    return path


def created_key(*args: str) -> str:
    result = ki("keys", "create", *args)
    assert result.exit_code == 0, result.output
    assert "not stored anywhere" in result.stderr
    return result.stdout.strip()


def search_as_key(key: str):
    """POST /v1/search with KEY to a query API built from the settings the process reads now."""
    settings = load_settings()
    service = retrieval_service_from_settings(settings)
    try:
        client = TestClient(create_query_app(settings, lambda: service))
        return client.post("/v1/search", json={"query": "Mietvertrag Haftung"}, headers={"X-API-Key": key})
    finally:
        service.close()


def test_a_created_key_searches_as_its_principals_and_a_revoked_one_gets_401(
    store: Path, config_file: Path,  # noqa: F811
) -> None:
    ingested(store, "anna")
    key = created_key("kanzlei-app", "--principal", "anna", "--principal", "group:partner")
    outsider = created_key("outsider", "--principal", "someone-else")

    answered = search_as_key(key)
    assert answered.status_code == 200
    hits = answered.json()["hits"]
    assert hits and {hit["citation"]["project"]["name"] for hit in hits} == {"mietsache"}
    assert search_as_key(outsider).json()["hits"] == [], "another key's principals see nothing of the project"

    revoked = ki("keys", "revoke", "kanzlei-app")
    assert revoked.exit_code == 0, revoked.output
    assert search_as_key(key).status_code == 401
    assert search_as_key(outsider).status_code == 200


def test_only_the_sha256_is_written_to_the_keys_file_and_config_json_stays_as_it_was(config_file: Path) -> None:
    key = created_key("frontend", "--principal", "svc:frontend", "--on-behalf-of")

    assert config_file.read_bytes() == SHIPPED_CONFIG.read_bytes(), "the tracked config.json is never written"
    keys_file = Path(".ki/api_keys.json")
    text = keys_file.read_text(encoding="utf-8")
    assert key not in text
    assert json.loads(text) == {
        "frontend": {"sha256": key_digest(key), "principals": ["svc:frontend"], "on_behalf_of": True},
    }
    assert keys_file.stat().st_mode & 0o777 == 0o600
    assert ki("keys", "revoke", "frontend").exit_code == 0
    assert json.loads(keys_file.read_text(encoding="utf-8")) == {}


def test_the_server_reads_keys_from_config_the_environment_and_the_keys_file_alike(
    store: Path, config_file: Path, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
) -> None:
    ingested(store, "anna")
    from_file = created_key("from-file", "--principal", "anna")
    monkeypatch.setenv("KI_SECURITY__API_KEYS", json.dumps(
        {"from-env": {"sha256": key_digest("ki_env-key"), "principals": ["anna"]}}))

    assert search_as_key(from_file).json()["hits"]
    assert search_as_key("ki_env-key").json()["hits"]
    listed = ki("keys", "list").output
    assert "from-file" in listed and "from-env" in listed


def test_a_keys_file_elsewhere_is_read_once_configured(
    store: Path, config_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
) -> None:
    ingested(store, "anna")
    elsewhere = tmp_path / "secrets" / "keys.json"
    result = ki("keys", "create", "app", "--principal", "anna", "--keys-file", str(elsewhere))
    assert result.exit_code == 0, result.output
    assert "only once security.api_keys_file" in result.stderr
    key = result.stdout.strip()
    assert search_as_key(key).status_code == 401

    monkeypatch.setenv("KI_SECURITY__API_KEYS_FILE", str(elsewhere))
    assert search_as_key(key).status_code == 200


def test_an_existing_name_is_refused_unless_replaced_and_the_old_key_stops_working(
    store: Path, config_file: Path,  # noqa: F811
) -> None:
    ingested(store, "anna")
    old = created_key("kanzlei-app", "--principal", "anna")

    refused = ki("keys", "create", "kanzlei-app", "--principal", "anna")
    assert refused.exit_code == 2 and "already" in refused.output

    new = created_key("kanzlei-app", "--principal", "anna", "--replace")
    assert search_as_key(old).status_code == 401
    assert search_as_key(new).status_code == 200


def test_the_list_shows_names_principals_and_delegation_but_no_hashes(config_file: Path) -> None:
    key = created_key("frontend", "--principal", "svc:frontend", "--on-behalf-of")
    created_key("anna", "--principal", "anna.berg")

    listed = ki("keys", "list")

    assert listed.exit_code == 0, listed.output
    assert "frontend" in listed.output and "svc:frontend" in listed.output and "anna.berg" in listed.output
    assert key_digest(key) not in listed.output and key not in listed.output


def test_without_a_config_file_none_is_created_and_the_key_lands_under_the_state_directory() -> None:
    first = ki("keys", "create", "anna", "--principal", "anna.berg")

    assert first.exit_code == 0, first.output
    assert "api_keys.json (created)" in first.stderr
    key = first.stdout.strip()
    assert not Path("config.json").exists()
    written = json.loads(Path(".ki/api_keys.json").read_text(encoding="utf-8"))
    assert written["anna"]["sha256"] == key_digest(key)
    assert load_settings().security.api_keys["anna"].principals == ["anna.berg"]


def test_revoking_an_unknown_key_names_it() -> None:
    result = ki("keys", "revoke", "nope")

    assert result.exit_code == 2 and "no key named 'nope'" in result.output
