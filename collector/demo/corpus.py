"""The synthetic RAG app's built-in knowledge: questions, answers and documents by service and topic.

Each question's relevant documents repeat the distinctive words of its answer, so a lexical judge
(the local judge) finds them relevant; documents of other topics serve as off-topic results and are
chosen so that they share no content word with the answer and the local judge finds them
irrelevant (`off_topic_pool` enforces it).

Each service also has a few planted noisy documents (`NOISY_DOCUMENTS`): boilerplate (a cookie
notice, a changelog) that its retriever keeps returning and that is never relevant, which is what
the sidecar's noisy-document diagnostics are there to find."""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Document:
    id: str
    topic: str
    content: str


@dataclass(frozen=True, slots=True)
class Question:
    service: str
    topic: str
    query: str
    answer: str
    relevant: tuple[Document, ...]


# Function words only: a judge may ignore more words than these, never fewer, so off-topic
# documents chosen against this list stay off-topic for any lexical judge.
STOPWORDS = frozenset("""
a about above after again all also am an and any are as at be because been before being below
between both but by can could did do does doing down during each few for from further had has
have having he her here hers him his how i if in into is it its itself just me more most my no
nor not now of off on only or other our ours out over own same she should so some such than
that the their theirs them then there these they this those through to too under until up very
was we were what when where which while who whom why will with would you your yours yourself
""".split())

_WORD = re.compile(r"[a-z0-9]+")


def content_words(text: str) -> set[str]:
    """Lower-cased words of three letters or more that are not stopwords."""
    return {w for w in _WORD.findall(text.lower()) if len(w) >= 3 and w not in STOPWORDS}


def _stems(words: set[str]) -> set[str]:
    # A crude stem (first five letters) so that "invoice"/"invoices" count as shared words too.
    return {w[:5] for w in words}


def shares_content(a: str, b: str) -> bool:
    """True when the two texts share a content word, or a word stem, or a number."""
    wa, wb = content_words(a), content_words(b)
    return bool(wa & wb) or bool(_stems(wa) & _stems(wb))


_RAW: dict[str, dict[str, list[tuple[str, str, tuple[str, ...]]]]] = {
    "support-bot": {
        "passwords": [
            ("How do I reset my password?",
             "Open Settings, choose Security, click Reset Password and follow the emailed link within 30 minutes.",
             ("To reset a forgotten password open Settings, choose Security and click Reset Password.",
              "The password reset link is emailed and expires after 30 minutes; follow the link to choose a new password.")),
            ("Why is my login locked?",
             "Logins lock after five failed password attempts; the lock lifts automatically after fifteen minutes.",
             ("Five failed password attempts lock the login to protect the account from guessing.",
              "A locked login lifts automatically after fifteen minutes, or sooner when support unlocks it.")),
        ],
        "billing": [
            ("Where can I download my invoices?",
             "Invoices appear under Billing, Invoice history; each invoice downloads as a PDF.",
             ("Billing, Invoice history shows every invoice sent to the workspace.",
              "Click an invoice in the history and it downloads as a PDF with tax details.")),
            ("How long does a refund take?",
             "Approved refunds reach the original card within five to ten business days.",
             ("Refunds are sent to the original card once approved by the billing team.",
              "Banks post an approved refund within five to ten business days.")),
        ],
        "shipping": [
            ("How can I track my parcel?",
             "Use the tracking number from the shipping confirmation email on the courier tracking page.",
             ("Every shipping confirmation email contains the parcel tracking number.",
              "Enter the tracking number on the courier tracking page to follow the parcel.")),
            ("Do you ship internationally?",
             "International shipping covers forty countries; customs duties are paid by the recipient.",
             ("International shipping is available to forty countries across Europe, Asia and the Americas.",
              "Customs duties on international parcels are paid by the recipient at delivery.")),
        ],
        "subscriptions": [
            ("How do I cancel my subscription?",
             "Cancel the subscription under Plan, Manage plan; access continues until the renewal date.",
             ("Open Plan, Manage plan and press Cancel subscription to stop the renewal.",
              "After you cancel a subscription, access continues until the current renewal date.")),
            ("Can I upgrade to the Team plan mid-month?",
             "Upgrading to the Team plan mid-month charges a prorated amount for the remaining days.",
             ("Upgrading to the Team plan charges only the remaining days of the current month.",
              "A mid-month upgrade charges a prorated amount covering the remaining days of the cycle.")),
        ],
        "security": [
            ("How do I turn on two-factor authentication?",
             "Enable two-factor authentication in Security by scanning the QR code with an authenticator app.",
             ("Two-factor authentication is enabled from the Security page of your profile.",
              "Scan the QR code with an authenticator app such as Aegis to finish two-factor setup.")),
            ("What if I lose my authenticator phone?",
             "Sign in with a recovery code saved during setup, then register the replacement phone.",
             ("Recovery codes saved during setup let you sign in without the authenticator phone.",
              "After signing in with a recovery code, register the replacement phone under Devices.")),
        ],
    },
    "docs-search": {
        "api-keys": [
            ("How do I create an API key?",
             "Create an API key in the Developer console under Keys; the secret token is shown only once.",
             ("The Developer console has a Keys tab where you create an API key for each environment.",
              "A new API key's secret token is shown only once, so copy it into your vault.")),
            ("How do I rotate an API key?",
             "Rotate a key by issuing a second key, deploying it, then revoking the old key in the console.",
             ("To rotate a key, start by issuing a second key and deploying it everywhere.",
              "Then revoking the old key in the console takes effect within a minute for every region.")),
        ],
        "rate-limits": [
            ("What are the API rate limits?",
             "Each token may send 600 requests per minute; excess requests receive HTTP 429 with Retry-After.",
             ("Rate limits allow 600 requests per minute for each token.",
              "Requests above the limit receive HTTP 429 and a Retry-After header in seconds.")),
            ("How should clients handle 429 responses?",
             "Clients should wait for the Retry-After seconds and retry with exponential backoff and jitter.",
             ("On HTTP 429, wait the number of seconds given in Retry-After before you retry.",
              "Exponential backoff with jitter spreads retries so clients do not stampede together.")),
        ],
        "webhooks": [
            ("How are webhook payloads signed?",
             "Webhook payloads carry an HMAC SHA256 signature header computed with your endpoint secret.",
             ("Every webhook delivery includes a signature header holding an HMAC SHA256 digest.",
              "The HMAC is computed over the raw payload with the endpoint secret from the dashboard.")),
            ("What happens when my webhook endpoint is down?",
             "Failed webhook deliveries are retried with backoff for three days before the event is dropped.",
             ("Webhook deliveries that fail are retried with increasing backoff.",
              "Redelivery goes on for three days; after that the event is dropped and logged.")),
        ],
        "sdk": [
            ("How do I install the Python SDK?",
             "Install the Python SDK with pip install acme-sdk; it supports Python 3.9 and newer.",
             ("The Python SDK is published on PyPI: pip install acme-sdk.",
              "acme-sdk supports Python 3.9 and newer on Linux, macOS and Windows.")),
            ("How do I configure the SDK client timeout?",
             "Pass timeout seconds to the Client constructor; the SDK default timeout is 60 seconds.",
             ("The Client constructor accepts a timeout argument in seconds.",
              "Without an explicit timeout the SDK client waits 60 seconds before giving up.")),
        ],
        "pagination": [
            ("How does pagination work in list endpoints?",
             "List endpoints return a next_cursor; pass it as the cursor parameter to fetch the following page.",
             ("List endpoints return next_cursor in every response body, pointing at the following page.",
              "Send next_cursor back as the cursor parameter to fetch the following page of results.")),
            ("What is the maximum page size?",
             "The page size limit parameter accepts up to 200 items; larger values are clamped to 200.",
             ("The limit parameter sets the page size of list endpoints, up to 200 items.",
              "Page size values above 200 are clamped to 200 items silently.")),
        ],
        "export": [
            ("How do I export data as CSV?",
             "Start a CSV export from Reports, Export; a download link arrives by email when the file is ready.",
             ("Reports, Export builds a CSV file of the selected dataset in the background.",
              "When the CSV export file is ready, a download link arrives by email.")),
            ("Is there an export size limit?",
             "A single export holds at most ten million rows; split larger datasets by date range.",
             ("Each export holds at most ten million rows of data.",
              "Split larger datasets into several exports by date range to stay under the rows cap.")),
        ],
    },
}


def _build() -> tuple[Question, ...]:
    questions: list[Question] = []
    for service, topics in _RAW.items():
        for topic, items in topics.items():
            for qi, (query, answer, docs) in enumerate(items):
                relevant = tuple(
                    Document(id=f"{service}/{topic}/{qi}-{di}", topic=topic, content=text)
                    for di, text in enumerate(docs))
                questions.append(Question(service, topic, query, answer, relevant))
    return tuple(questions)


QUESTIONS: tuple[Question, ...] = _build()
ALL_DOCUMENTS: tuple[Document, ...] = tuple(d for q in QUESTIONS for d in q.relevant)
SERVICES: tuple[str, ...] = tuple(_RAW)


# Boilerplate that shares no content word (nor, for the local judge, a synonym) with any question or
# answer of its service (a test holds it so), and so is judged irrelevant every time it is retrieved.
NOISY_DOCUMENTS: dict[str, tuple[Document, ...]] = {
    "support-bot": (
        Document("support-bot/noise/cookie-notice", "noise",
                 "Cookie notice: this site uses cookies for analytics and remembers your language."),
        Document("support-bot/noise/newsletter", "noise",
                 "Our newsletter brings product news and webinar invitations every Friday."),
    ),
    "docs-search": (
        Document("docs-search/noise/changelog", "noise",
                 "Changelog 4.2: dark mode, a redesigned sidebar and keyboard shortcuts."),
        Document("docs-search/noise/status-page", "noise",
                 "Status: all systems operational; maintenance window Sunday night."),
    ),
}


def questions_for(service: str) -> tuple[Question, ...]:
    found = tuple(q for q in QUESTIONS if q.service == service)
    if not found:
        raise ValueError(f"unknown service {service!r}; the corpus has {', '.join(SERVICES)}")
    return found


@functools.lru_cache(maxsize=None)
def off_topic_pool(question: Question) -> tuple[Document, ...]:
    """Documents of other topics that share no content word with the question's query or answer,
    and that the local judge (the demo's) finds irrelevant: it also matches synonyms and stems
    ("deliveries" for "shipping", "retried" for "retry"), which a shared word does not catch."""
    from ctxprec.scorer.judge.local import LocalJudge

    judge = LocalJudge()
    reference = f"{question.query} {question.answer}"
    return tuple(d for d in ALL_DOCUMENTS
                 if d.topic != question.topic and not shares_content(d.content, reference)
                 and not judge.judge_sync(question.query, [d.content], reference_kind="output",
                                          reference=question.answer).verdicts[0].relevant)
