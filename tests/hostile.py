"""Hypothesis strategies for hostile input: any JSON value, strings with NUL and lone surrogates.

Shared by the fuzz tests of the ingress and the query API, which assert that
no input makes either answer a 5xx other than 503.
"""

from __future__ import annotations

import json

from hypothesis import strategies as st

# Every code point, lone surrogates included (json.dumps writes them as \\udxxx escapes).
ANY_CHARACTER = st.characters(codec=None, categories=None)
NASTY_STRINGS = st.one_of(
    st.text(ANY_CHARACTER, max_size=40),
    st.sampled_from(["", " ", "\x00", "a\x00b", "\ud800", "a\udfffb", "‮", "../../etc/passwd", "%2e%2e/x",
                     "9999-12-31T23:59:59Z", "0000-00-00", "1e309", "NaN", "' OR 1=1 --", "§ 573c BGB", "x" * 5000]),
)
NUMBERS = st.one_of(st.integers(min_value=-(2**70), max_value=2**70), st.floats(allow_nan=False, allow_infinity=False))
JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), NUMBERS, NASTY_STRINGS),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(NASTY_STRINGS, inner, max_size=4)),
    max_leaves=12,
)


@st.composite
def mutated(draw, valid: dict) -> dict:
    """A valid body with one to three fields replaced, dropped or added."""
    body = dict(valid)
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.sampled_from([*sorted(body), "extra"]))
        action = draw(st.sampled_from(["replace", "drop", "add"]))
        if action == "drop":
            body.pop(key, None)
        else:
            body[key] = draw(JSON_VALUES)
    return body


def encoded(value: object) -> bytes:
    """JSON as a client may send it: surrogates as escapes, never a Python-only float."""
    return json.dumps(value, ensure_ascii=True, allow_nan=False).encode()
