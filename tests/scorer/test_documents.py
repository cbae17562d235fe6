"""Document identity: ids when the convention carries them, else a short stable text hash."""
from __future__ import annotations

import hashlib
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxprec.collector.model import RetrievedContext
from ctxprec.scorer.documents import (
    HASH_PREFIX,
    MAX_ID_CHARS,
    document_identity,
    identity,
    is_text_hash,
    normalized_text,
    text_hash,
)
from ctxprec.scorer.events import EventContext

HASH_RE = re.compile(r"^sha256:[0-9a-f]{12}$")


def test_the_id_wins_when_there_is_one() -> None:
    assert document_identity("any text", "doc-7") == "doc-7"
    assert document_identity("any text", "  doc-7 ") == "doc-7"
    # The same id with different text is the same document (a re-chunked or edited version).
    assert document_identity("other text", "doc-7") == "doc-7"


def test_without_an_id_the_text_is_hashed() -> None:
    value = document_identity("Reset links expire after an hour.")
    assert HASH_RE.match(value) and is_text_hash(value)
    expected = hashlib.sha256(b"Reset links expire after an hour.").hexdigest()[:12]
    assert value == HASH_PREFIX + expected
    # Empty or blank ids are no ids.
    assert document_identity("Reset links expire after an hour.", "") == value
    assert document_identity("Reset links expire after an hour.", "   ") == value


def test_the_hash_ignores_whitespace_layout_but_not_words() -> None:
    a = text_hash("Reset links\n  expire after\tan hour. ")
    assert a == text_hash("Reset links expire after an hour.")
    assert a != text_hash("Reset links expire after a day.")
    assert a != text_hash("reset links expire after an hour.")  # case is content
    assert normalized_text("  a \n b\t") == "a b"


def test_long_ids_are_hashed_so_keys_stay_short() -> None:
    long_id = "x" * (MAX_ID_CHARS + 1)
    value = document_identity("text", long_id)
    assert value.startswith("id-sha256:") and len(value) == len("id-sha256:") + 12
    assert not is_text_hash(value)
    assert document_identity("text", "x" * MAX_ID_CHARS) == "x" * MAX_ID_CHARS


def test_sidecar_and_batch_contexts_get_the_same_identity() -> None:
    for doc_id in (None, "node-3"):
        live = RetrievedContext(content="Office hours are 9-5.", id=doc_id)
        batch = EventContext(content="Office hours are 9-5.", id=doc_id)
        assert identity(live) == identity(batch)


def test_lone_surrogates_do_not_break_hashing() -> None:
    assert HASH_RE.match(text_hash("broken \ud800 text"))


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\u00a0\u2003\u3000é")), max_size=30))
def test_the_fast_path_normalizes_exactly_like_a_full_split(text: str) -> None:
    assert normalized_text(text) == " ".join(text.split())
