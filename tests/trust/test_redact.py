"""PII redaction (scorer/redact.py) and its wiring into the engine (JudgeConfig.redact_pii): what
is replaced and what must survive, hostile input, and that the judge over real HTTP (the stub)
only ever sees the placeholders, with verdict cache keys built from the redacted text."""
from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from ctxprec.collector.stub_judge import StubJudge
from ctxprec.scorer import JudgeConfig, build_engine, create_context_precision_scorer
from ctxprec.scorer.redact import (
    CARD_PLACEHOLDER,
    EMAIL_PLACEHOLDER,
    PHONE_PLACEHOLDER,
    Redactor,
    luhn_valid,
    redact,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

PLACEHOLDERS = (EMAIL_PLACEHOLDER, PHONE_PLACEHOLDER, CARD_PLACEHOLDER)


def check_digit(payload: str) -> str:
    """The Luhn check digit for `payload`, computed independently of scorer.redact (doubling from
    the right-most payload digit)."""
    total = 0
    for i, ch in enumerate(reversed(payload)):
        d = int(ch) * (2 if i % 2 == 0 else 1)
        total += d // 10 + d % 10
    return str((10 - total % 10) % 10)


@pytest.mark.parametrize(
    ("text", "expected", "kind"),
    [
        ("write to john.doe+tag@mail.example.co.uk today", "write to [EMAIL] today", "email"),
        ("Email: josé@exemple.fr.", "Email: [EMAIL].", "email"),
        ("a@b.co and c@d.org", "[EMAIL] and [EMAIL]", "email"),
        ("Call +1 (555) 123-4567 now", "Call [PHONE] now", "phone"),
        ("UK office +44 20 7946 0958", "UK office [PHONE]", "phone"),
        ("compact +14155552671", "compact [PHONE]", "phone"),
        ("mobile 06 12 34 56 78", "mobile [PHONE]", "phone"),
        ("US (555) 123-4567", "US [PHONE]", "phone"),
        ("dial 555-123-4567.", "dial [PHONE].", "phone"),
        ("Berlin 030 12345678", "Berlin [PHONE]", "phone"),
        ("tel:+1-555-123-4567", "tel:[PHONE]", "phone"),
        ("Visa 4111 1111 1111 1111 exp 12/29", "Visa [CARD] exp 12/29", "card"),
        ("MC 5555-5555-5555-4444", "MC [CARD]", "card"),
        ("Amex 378282246310005", "Amex [CARD]", "card"),
        ("Discover 6011111111111117.", "Discover [CARD].", "card"),
    ],
)
def test_replaces_pii_with_typed_placeholders(text: str, expected: str, kind: str) -> None:
    out, counts = redact(text)
    assert out == expected
    assert counts.to_dict()[kind] == expected.count(f"[{kind.upper()}]")
    assert counts.total == sum(expected.count(p) for p in PLACEHOLDERS)


@pytest.mark.parametrize(
    "text",
    [
        "Order ORD-2026-118842 shipped",
        "Order 2026-118842 shipped",  # two digit groups, no trunk prefix: an id, not a phone
        "tracking 1234567890123456",  # 16 digits that fail the Luhn check
        "card-like 4111 1111 1111 1112",  # one digit off a valid card
        "4111 1111 1111 1111 2222",  # 20 digits: longer than any card
        "shipped 2026-11-29 12:00:01 UTC",
        "server 192.168.100.200 is up",
        "revenue 12 000 000 000 EUR",
        "version 1.2.3 and 4.10.22",
        "path /files/555-123-4567/readme",
        "user@@example.com, x@y, @handle, name@localhost",
        "no personal data here at all",
    ],
)
def test_leaves_ids_dates_amounts_and_non_addresses_alone(text: str) -> None:
    assert redact(text) == (text, redact("")[1])


def test_luhn_accepts_known_test_cards_and_rejects_their_neighbours() -> None:
    for number in ("4111111111111111", "5555555555554444", "378282246310005", "6011111111111117", "4012888888881881"):
        assert luhn_valid(number)
        broken = number[:-1] + str((int(number[-1]) + 1) % 10)
        assert not luhn_valid(broken)


cards = st.builds(
    lambda prefix, body, sep: sep.join(_groups(prefix + body + check_digit(prefix + body))),
    st.sampled_from(["4", "51", "52", "55", "6011"]),
    st.text(alphabet="0123456789", min_size=11, max_size=14),
    st.sampled_from(["", " ", "-"]),
)


def _groups(digits: str) -> list[str]:
    return [digits[i:i + 4] for i in range(0, len(digits), 4)]


emails = st.builds(
    lambda local, domain, tld: f"{local}@{domain}.{tld}",
    st.from_regex(r"[a-z0-9][a-z0-9._+-]{0,20}", fullmatch=True),
    st.from_regex(r"[a-z0-9][a-z0-9-]{0,15}", fullmatch=True),
    st.sampled_from(["com", "org", "fr", "co.uk", "io"]),
)
phones = st.one_of(
    st.builds(lambda cc, groups: "+" + cc + " " + " ".join(groups),
              st.from_regex(r"[1-9][0-9]{0,2}", fullmatch=True),
              st.lists(st.from_regex(r"[0-9]{3,4}", fullmatch=True), min_size=3, max_size=3)),  # 10-15 digits
    st.builds(lambda a, b, c, sep: f"{a}{sep}{b}{sep}{c}",
              st.from_regex(r"[2-9][0-9]{2}", fullmatch=True), st.from_regex(r"[0-9]{3}", fullmatch=True),
              st.from_regex(r"[0-9]{4}", fullmatch=True), st.sampled_from([" ", "-", "."])),
)
planted = st.one_of(
    emails.map(lambda e: (EMAIL_PLACEHOLDER, e)),
    phones.map(lambda p: (PHONE_PLACEHOLDER, p)),
    cards.map(lambda c: (CARD_PLACEHOLDER, c)),
)
# Items are separated by at least one word character: digit items split only by spaces or dashes
# ("+1 000 000 000 200 000 0000") read as one longer number, which is neither a phone nor a card.
# No digit of any script in the filler: the redactor reads every decimal digit (an NKo or
# Arabic-Indic digit beside a planted phone is part of that number, as it should be).
filler = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Nd",), exclude_characters="@+()"),
                 max_size=40).map(
    lambda s: f" {s.strip()} w " if s.strip() else " w "
)


@settings(max_examples=300, deadline=500, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(filler, planted), min_size=1, max_size=6), filler)
def test_every_planted_item_is_replaced_and_counted(parts: list[tuple[str, tuple[str, str]]], tail: str) -> None:
    text = "".join(f + item for f, (_, item) in parts) + tail
    out, counts = redact(text)
    for _, (_, item) in parts:
        assert item not in out
    assert counts.total == len(parts)
    assert out == "".join(f + placeholder for f, (placeholder, _) in parts) + tail


hostile = st.text(alphabet=st.sampled_from(list("0123456789 .-+()@aZé_:/%\n")), max_size=2000)


@settings(max_examples=300, deadline=1000)
@given(st.one_of(hostile, st.text(max_size=500)))
def test_any_text_redacts_idempotently_and_never_grows_much(text: str) -> None:
    out, counts = redact(text)
    again, more = redact(out)
    assert again == out and more.total == 0
    # Each replacement adds at most 2 characters ("a@b.co" -> "[EMAIL]"); nothing else grows.
    assert len(out) <= len(text) + 2 * counts.email
    assert sum(out.count(p) - text.count(p) for p in PLACEHOLDERS) == counts.total


def test_long_hostile_runs_finish() -> None:
    """Inputs that make naive PII regexes backtrack (quadratic or worse); 200 KB each."""
    n = 200_000
    inputs = ["1" * n, "1 " * (n // 2), "a" * n, "a@" * (n // 2), "a." * (n // 2) + "@", "+1 " * (n // 3),
              "12 " * (n // 3), "(12) " * (n // 5), ("x" * 63 + "@") * (n // 64), "a@b." * (n // 4), "-1-" * (n // 3)]
    done: list[int] = []

    def work() -> None:
        for text in inputs:
            redact(text)
            done.append(1)

    worker = threading.Thread(target=work, daemon=True)
    started = time.monotonic()
    worker.start()
    worker.join(timeout=30)
    assert len(done) == len(inputs), f"redaction hung on input {len(done)} after {time.monotonic() - started:.0f}s"


def test_config_field_is_validated() -> None:
    assert JudgeConfig().redact_pii is False
    with pytest.raises(ValueError, match="redact_pii"):
        JudgeConfig(redact_pii="yes")  # type: ignore[arg-type]


# --- wiring into the engine, against the stub judge over HTTP ------------------------------------

QUERY = "Why was my card 4111 1111 1111 1111 charged twice? Reach me at ana@example.com"
CONTEXTS = [
    "Duplicate charges are refunded within 5 days; contact billing@shop.example for card disputes.",
    "Our opening hours are 9 to 5. Call +44 20 7946 0958 for the store.",
    "[relevant] Order ORD-2026-118842 was charged twice due to a retry.",
]
ANSWER = "The duplicate charge on card 5555-5555-5555-4444 will be refunded; we will email ana@example.com."
RAW = ["4111 1111 1111 1111", "ana@example.com", "billing@shop.example", "+44 20 7946 0958", "5555-5555-5555-4444"]


def sent_text(stub: StubJudge) -> str:
    body: dict[str, Any] | None = stub.recent[-1].body
    assert body is not None
    return "\n".join(m["content"] for m in body["messages"])


def data_block(stub: StubJudge) -> dict[str, Any]:
    user = [m["content"] for m in stub.recent[-1].body["messages"] if m["role"] == "user"][-1]  # type: ignore[index]
    return json.loads(user.split("BEGIN_DATA\n", 1)[1].split("\nEND_DATA", 1)[0])


async def test_judge_sees_only_placeholders_and_counts_are_kept(stub_judge: StubJudge) -> None:
    config = JudgeConfig(model="openai/stub", api_base=stub_judge.url, redact_pii=True)
    engine = build_engine(config)
    try:
        result = await engine.score(QUERY, CONTEXTS, output=ANSWER)
    finally:
        await engine.aclose()
    prompt = sent_text(stub_judge)
    for raw in RAW:
        assert raw not in prompt
    data = data_block(stub_judge)
    assert data["query"] == "Why was my card [CARD] charged twice? Reach me at [EMAIL]"
    assert data["reference"] == "The duplicate charge on card [CARD] will be refunded; we will email [EMAIL]."
    assert [c["text"] for c in data["contexts"]] == [
        "Duplicate charges are refunded within 5 days; contact [EMAIL] for card disputes.",
        "Our opening hours are 9 to 5. Call [PHONE] for the store.",
        "[relevant] Order ORD-2026-118842 was charged twice due to a retry.",
    ]
    assert engine.redactor is not None
    assert engine.redactor.counts.to_dict() == {"email": 3, "phone": 1, "card": 2}
    assert result.k == 3 and len(result.verdicts) == 3


async def test_without_the_option_the_text_goes_out_unchanged(stub_judge: StubJudge) -> None:
    engine = build_engine(JudgeConfig(model="openai/stub", api_base=stub_judge.url))
    try:
        await engine.score(QUERY, CONTEXTS, output=ANSWER)
    finally:
        await engine.aclose()
    prompt = sent_text(stub_judge)
    assert all(raw in prompt for raw in RAW)
    assert engine.redactor is None


async def test_cache_keys_use_the_redacted_text(stub_judge: StubJudge) -> None:
    """Two samples that differ only in personal data redact to the same text: the second is
    answered from the verdict cache, without a judge call."""
    engine = build_engine(JudgeConfig(model="openai/stub", api_base=stub_judge.url, redact_pii=True))
    try:
        first = await engine.score("Refund for ana@example.com?", ["Refunds go to ana@example.com within 5 days."])
        calls = stub_judge.stats.requests
        second = await engine.score("Refund for bo@corp.org?", ["Refunds go to bo@corp.org within 5 days."])
    finally:
        await engine.aclose()
    assert stub_judge.stats.requests == calls == 1
    assert second.usage.cached_contexts == 1 and second.usage.calls == 0
    assert [v.relevant for v in second.verdicts] == [v.relevant for v in first.verdicts]


def test_fingerprint_moves_only_when_redaction_is_on() -> None:
    plain = build_engine(JudgeConfig()).fingerprint
    assert build_engine(JudgeConfig(redact_pii=False)).fingerprint == plain
    assert build_engine(JudgeConfig(redact_pii=True)).fingerprint != plain


async def test_library_option_reaches_the_engine() -> None:
    scorer = create_context_precision_scorer(
        "local", context=["Mail support@example.com to reset your password."], redact_pii=True
    )
    result = await scorer.run("How do I reset my password? I am ana@example.com", "Mail support to reset it.")
    assert scorer.engine.redactor is not None
    assert scorer.engine.redactor.counts.email == 2
    assert result.k == 1
    await scorer.aclose()


def test_redactor_totals_accumulate_across_samples() -> None:
    redactor = Redactor()
    one = redactor.redact_sample("a@b.co", ["+14155552671", "none"], output=None, expected_output="4111111111111111")
    assert one.counts.to_dict() == {"email": 1, "phone": 1, "card": 1}
    assert one.output is None and one.contexts == ["[PHONE]", "none"]
    redactor.redact_sample("x@y.io", [], output="c@d.org")
    assert redactor.counts.to_dict() == {"email": 3, "phone": 1, "card": 1}
