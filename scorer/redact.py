"""Optional redaction of personal data before text is sent to the judge (JudgeConfig.redact_pii).

Three kinds are replaced by typed placeholders: e-mail addresses -> `[EMAIL]`, phone numbers ->
`[PHONE]`, payment card numbers -> `[CARD]`. The goal is to keep obvious personal data out of a
third-party judge's logs, not to be a complete PII scrubber: names, addresses and free-form ids
pass through.

Precision matters as much as recall, because a redacted order id or date changes what the judge
sees. So the patterns find candidates and a check decides:

- a card is 13-19 digits (single spaces or dashes between groups allowed) that pass the Luhn
  check, so a random 16-digit order id survives 9 times out of 10;
- a phone is digit groups split by single spaces, dots or dashes (or an area code in
  parentheses): with a leading `+` country code it needs 8-15 digits in all (E.164), without one
  10-11 digits in at least three groups (two when the first starts with the trunk prefix 0, as in
  `030 12345678`), so a bare digit run or `2026-118842` (order ids) is never a phone; IPv4
  addresses and thousands-grouped amounts (`12 000 000 000`) are left alone;
- an e-mail is `local@domain.tld`.

The card and phone patterns refuse to begin inside a longer run of digits, and e-mails are read
outwards from each "@" within bounded windows, so a long run without a match costs one scan, not
one scan per position (no quadratic or exponential backtracking on hostile text). Placeholders hold no digits and no `@`:
redacting twice gives the same text as redacting once."""
from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Sequence

EMAIL_PLACEHOLDER = "[EMAIL]"
PHONE_PLACEHOLDER = "[PHONE]"
CARD_PLACEHOLDER = "[CARD]"

# E-mails are found from their "@" (a literal the regex engine skips to quickly), then the local
# part is read backwards and the domain forwards.
# Local parts may hold non-ASCII letters (RFC 6531: josé@exemple.fr); domains are matched in ASCII.
_LOCAL_CHAR_RE = re.compile(r"[\w.%+-]")
_LOCAL_RUN_RE = re.compile(r"[\w.%+-]{1,64}\Z")  # searched in the 64 characters before "@"
_LOCAL_LEADING = ".%+-"  # punctuation before an address ("(-john@x.com") is not part of it
_DOMAIN_RE = re.compile(
    r"[A-Za-z0-9][A-Za-z0-9-]{0,62}(?:\.[A-Za-z0-9-]{1,63}){0,8}\.[A-Za-z]{2,24}(?![A-Za-z0-9-])"
)

# Cards and phones are found in one pass. The pattern consumes its first character before the
# lookbehinds that refuse to start inside a longer run of digits: a leading character class lets
# the regex engine skip ahead to candidates. The two kinds never both accept the same text (a
# card has 13+ digits, a phone without "+" at most 11 and a "+" rules out a card), so trying the
# card first loses no phone.
_NUMBER_RE = re.compile(
    r"[+(\d](?<!\d \d)"
    r"(?:"
    # cards: digit groups with a single space or dash between them
    r"(?P<card>(?<=\d)(?<![\w+-]\d)(?:[ -]?\d){12,18}(?![\w-])(?![ -]?\d))"
    r"|(?P<phone>(?<![\w+.-][+(\d])(?:"
    r"(?<=\+)\d{1,3}(?:[ .-]?\(\d{1,4}\))?(?:[ .-]\d{1,8}){1,6}"  # +44 20 7946 0958, +1 (555) 123-4567
    r"|(?<=\+)\d{8,15}"  # +14155552671
    r"|(?<=\()\d{2,4}\)[ .-]?\d{2,8}(?:[ .-]\d{2,8}){0,4}"  # (555) 123-4567
    r"|(?<=\d)\d{1,4}(?:[ .-]\d{2,8}){1,5}"  # 555-123-4567, 06 12 34 56 78
    r")"
    r"(?![\w:/-])(?![ .-]?\d))"  # not the date of a "2026-11-29 12:00" timestamp, nor part of a path
    r")"
)
_IPV4_RE = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}")
_DIGIT_GROUPS_RE = re.compile(r"\d+")
_HAS_DIGIT_RE = re.compile(r"\d")


@dataclass(slots=True)
class RedactionCounts:
    """How many items of each kind were replaced."""

    email: int = 0
    phone: int = 0
    card: int = 0

    @property
    def total(self) -> int:
        return self.email + self.phone + self.card

    def add(self, other: "RedactionCounts") -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def to_dict(self) -> dict[str, int]:
        return {"email": self.email, "phone": self.phone, "card": self.card}


def luhn_valid(digits: str) -> bool:
    """The Luhn (mod 10) check of a digit string."""
    total = 0
    for position, char in enumerate(reversed(digits)):
        d = int(char)  # \d also matches non-ASCII digits, which int() reads correctly
        if position % 2 == 1:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


def _is_phone(candidate: str) -> bool:
    groups = _DIGIT_GROUPS_RE.findall(candidate)
    count = sum(len(g) for g in groups)
    if candidate.startswith("+"):
        return 8 <= count <= 15
    if not 10 <= count <= 11:
        return False
    if candidate.startswith("("):
        return True
    if _IPV4_RE.fullmatch(candidate):
        return False
    # 12 000 000 000 or 10.000.000.000: an amount written with thousands separators.
    if len(groups) >= 3 and all(len(g) == 3 for g in groups[1:]) and len(groups[0]) <= 3:
        return False
    # Two groups read as an id ("2026-118842") unless the first has a trunk prefix ("030 12345678").
    return len(groups) >= 3 or groups[0].startswith("0")


def _redact_emails(text: str) -> tuple[str, int]:
    parts: list[str] = []
    cursor = 0  # end of the last replacement
    at = text.find("@")
    while at >= 0:
        local = _LOCAL_RUN_RE.search(text, max(cursor, at - 64), at)
        domain = _DOMAIN_RE.match(text, at + 1) if local is not None else None
        start = local.start() if local is not None else at
        # The local part must be the whole run before "@" (64 characters at most).
        whole = start == 0 or _LOCAL_CHAR_RE.match(text, start - 1) is None
        while start < at and text[start] in _LOCAL_LEADING:
            start += 1
        if domain is not None and whole and start < at:
            parts.append(text[cursor:start])
            parts.append(EMAIL_PLACEHOLDER)
            cursor = domain.end()
            at = text.find("@", cursor)
        else:
            at = text.find("@", at + 1)
    if not parts:
        return text, 0
    parts.append(text[cursor:])
    return "".join(parts), len(parts) // 2


def redact(text: str) -> tuple[str, RedactionCounts]:
    """`text` with e-mails, phones and cards replaced, and what was replaced."""
    counts = RedactionCounts()
    if not text:
        return text, counts
    if "@" in text:
        text, counts.email = _redact_emails(text)
    if _HAS_DIGIT_RE.search(text) is None:
        return text, counts

    def number(match: re.Match[str]) -> str:
        found = match.group()
        if match.group("card") is not None:
            digits = found.replace(" ", "").replace("-", "")
            if 13 <= len(digits) <= 19 and luhn_valid(digits):
                counts.card += 1
                return CARD_PLACEHOLDER
        elif _is_phone(found):
            counts.phone += 1
            return PHONE_PLACEHOLDER
        return found

    text = _NUMBER_RE.sub(number, text)
    return text, counts


def redacted(text: str) -> str:
    """`text` with e-mails, phones and cards replaced (what was replaced is not counted)."""
    return redact(text)[0]


@dataclass(slots=True)
class RedactedSample:
    query: str
    contexts: list[str]
    output: str | None
    expected_output: str | None
    counts: RedactionCounts


class Redactor:
    """Redacts whole samples and keeps a running total of what it replaced (`counts`), which the
    sidecar can export as a metric."""

    def __init__(self) -> None:
        self.counts = RedactionCounts()

    def redact_text(self, text: str | None, counts: RedactionCounts) -> str | None:
        if text is None:
            return None
        redacted, found = redact(text)
        counts.add(found)
        return redacted

    def redact_sample(
        self, query: str, contexts: Sequence[str], output: str | None = None, expected_output: str | None = None
    ) -> RedactedSample:
        counts = RedactionCounts()
        sample = RedactedSample(
            query=self.redact_text(query, counts) or "",
            contexts=[self.redact_text(c, counts) or "" for c in contexts],
            output=self.redact_text(output, counts),
            expected_output=self.redact_text(expected_output, counts),
            counts=counts,
        )
        self.counts.add(counts)
        return sample
