"""Copy the public part of the document-type fixture from the shared data into tests/fixtures/doctypes.

    .venv/bin/python bench/doctype_fixtures.py [--data ../shared/data]

Run once to make the fixture; the tests read only the copies. Decisions are the
records' `text`, byte for byte; a statute unit is every Absatz of one § (or
Art.) laid out as gesetze-im-internet.de shows one norm: the law's title with its
abbreviation, the § and its heading, then the numbered Absätze. The decisions
of the demo (examples/) are left out: the labelled set is the demo's control.
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGET = REPO / "tests" / "fixtures" / "doctypes"
DEMO_DECISIONS = {"lg-berlin_2006-03-16_826b0d6c34e1", "bverwg_2001-07-17_1fe12499bd57", "bag_1966-01-28_97c71edd7c89"}
# (file in the data set, law, section): a spread of codes, ordinances, numbered books and the Grundgesetz.
STATUTE_UNITS = (
    ("statutes/bgb.jsonl.gz", "BGB", "§ 573c"),
    ("statutes/bgb.jsonl.gz", "BGB", "§ 314"),
    ("statutes/zpo.jsonl.gz", "ZPO", "§ 519"),
    ("statutes/gg.jsonl.gz", "GG", "Art. 12"),
    ("statutes/sgb_5.jsonl.gz", "SGB 5", "§ 13"),
    ("statutes-extra/hgb.jsonl.gz", "HGB", "§ 377"),
    ("statutes-extra/gmbhg.jsonl.gz", "GmbHG", "§ 43"),
    ("statutes-extra/aktg.jsonl.gz", "AktG", "§ 93"),
    ("statutes-extra/inso.jsonl.gz", "InsO", "§ 17"),
    ("statutes-extra/kschg.jsonl.gz", "KSchG", "§ 1"),
    ("statutes-extra/betrvg.jsonl.gz", "BetrVG", "§ 102"),
    ("statutes-extra/stvo_2013.jsonl.gz", "StVO 2013", "§ 3"),
    ("statutes-extra/ao_1977.jsonl.gz", "AO 1977", "§ 169"),
    ("statutes-extra/urhg.jsonl.gz", "UrhG", "§ 97"),
    ("statutes-extra/tzbfg.jsonl.gz", "TzBfG", "§ 14"),
    ("statutes-extra/vvg_2008.jsonl.gz", "VVG 2008", "§ 28"),
    ("statutes-extra/bdsg_2018.jsonl.gz", "BDSG 2018", "§ 26"),
    ("statutes-extra/stgb.jsonl.gz", "StGB", "§ 263"),
)


def copy_decisions(data: Path) -> list[str]:
    written = []
    for line in (data / "decisions" / "decisions.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if record["doc_id"] in DEMO_DECISIONS:
            continue
        name = f"decisions/{record['doc_id']}.txt"
        (TARGET / name).write_text(record["text"], encoding="utf-8")
        written.append(name)
    return written


def render_unit(records: list[dict]) -> str:
    """One norm as its page on gesetze-im-internet.de reads: title (abbreviation), § heading, Absätze."""
    first = records[0]
    abbreviation = first["law"].rsplit(" ", 1)[0] if first["law"][-4:].isdigit() else first["law"]
    lines = [f"{first['law_title']} ({abbreviation})", "", f"{first['section']} {first['heading']}".strip(), ""]
    for record in records:
        prefix = f"({record['subsection']}) " if record["subsection"] else ""
        lines += [prefix + record["text"], ""]
    return "\n".join(lines)


def copy_statutes(data: Path) -> list[str]:
    written = []
    for file, law, section in STATUTE_UNITS:
        with gzip.open(data / file, "rt", encoding="utf-8") as handle:
            records = [r for r in map(json.loads, handle) if r["law"] == law and r["section"] == section]
        if not records:
            raise SystemExit(f"{file}: no {law} {section}")
        slug = f"{law}-{section}".lower().replace("§ ", "").replace("art. ", "art").replace(" ", "-")
        name = f"statutes/{slug}.txt"
        (TARGET / name).write_text(render_unit(records), encoding="utf-8")
        written.append(name)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=REPO.parent.parent / "shared" / "data")
    data = parser.parse_args().data
    for folder in ("decisions", "statutes"):
        (TARGET / folder).mkdir(parents=True, exist_ok=True)
    for name in copy_decisions(data) + copy_statutes(data):
        print(name)


if __name__ == "__main__":
    main()
