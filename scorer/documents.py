"""Document identity: the name under which a retrieved context is counted across retrievals.

A context's identity is the id its retriever gave it when the tracing convention carries one
(OpenInference `document.id`, LlamaIndex `node.id_`, LangChain `metadata.id` or `id`; the RAG
event's `contexts[].id`), else a short hash of its text: `sha256:` and the first 12 hex digits
of the SHA-256 of the text with its whitespace collapsed. The hash lets documents without ids be
counted too, and it says nothing about their content.

`ctxprec score` and the sidecar both name documents through this module, so that a document
counted offline and the same document counted live carry the same identity."""
from __future__ import annotations

import hashlib
from typing import Protocol

HASH_PREFIX = "sha256:"
HASH_HEX_DIGITS = 12  # 48 bits: a collision among a million distinct documents is ~0.2% likely
# Ids are names, not payloads. A longer "id" (an app that put text there) is hashed instead, so
# that summaries keyed by identity hold short keys whatever the input.
MAX_ID_CHARS = 200
LONG_ID_PREFIX = "id-sha256:"


class HasContent(Protocol):
    """What a context needs for an identity: the sidecar's RetrievedContext and the batch's
    EventContext both fit."""

    @property
    def content(self) -> str: ...

    @property
    def id(self) -> str | None: ...


# Characters str.split() treats as whitespace within ASCII, besides the single space.
_ASCII_BREAKS = ("  ", "\t", "\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x1f")


def normalized_text(text: str) -> str:
    """The text the hash is taken over: whitespace runs collapsed to one space, ends stripped, so
    that the same chunk re-wrapped or re-indented keeps its identity."""
    # Splitting allocates a string per word; most chunks need no change, and telling so costs a
    # few fast scans (isascii is a flag lookup), so the split is only paid when it changes something.
    if text.isascii() and not any(b in text for b in _ASCII_BREAKS) and text[:1] != " " and text[-1:] != " ":
        return text
    return " ".join(text.split())


def text_hash(text: str) -> str:
    """`sha256:` and 12 hex digits of the normalized text."""
    digest = hashlib.sha256(normalized_text(text).encode("utf-8", "surrogatepass")).hexdigest()
    return HASH_PREFIX + digest[:HASH_HEX_DIGITS]


def document_identity(content: str, doc_id: str | None = None) -> str:
    """The id when there is a usable one, else the hash of `content`."""
    if doc_id is not None:
        stripped = doc_id.strip()
        if stripped:
            if len(stripped) <= MAX_ID_CHARS:
                return stripped
            digest = hashlib.sha256(stripped.encode("utf-8", "surrogatepass")).hexdigest()
            return LONG_ID_PREFIX + digest[:HASH_HEX_DIGITS]
    return text_hash(content)


def identity(context: HasContent) -> str:
    """`document_identity` of a context object (anything with `.content` and `.id`)."""
    return document_identity(context.content, context.id)


def is_text_hash(identity_value: str) -> bool:
    """True when an identity was derived from the text (the document carried no id)."""
    return identity_value.startswith(HASH_PREFIX)


def cut_words(text: str, chars: int) -> str:
    """At most `chars` characters: whole words and an ellipsis when the text is longer."""
    if len(text) <= chars:
        return text
    head = text[: chars - 1]
    space = head.rfind(" ")
    if space > chars // 2:
        head = head[:space]
    return head.rstrip() + "\u2026"


def first_words(text: str, chars: int) -> str:
    """The start of a text for a person to recognise it by: whitespace collapsed, whole words,
    at most `chars` characters."""
    return cut_words(" ".join(text[: chars * 4].split()), chars)
