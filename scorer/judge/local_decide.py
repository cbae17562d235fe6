"""The local judge's decision for one context: what it shares with the answer, and whether
that is enough (docs/LOCAL_JUDGE.md has the method and the measured agreement).

Evidence is what the context says that the answer says and the query does not: the same term,
the same word in a form the stemmer misses, a word of the same synonym group, in Japanese a
kanji shared inside different words, a year inside the span the answer's years bound. Echoing
the query is being on topic, not support: it only adds a bonus once there is evidence."""
from __future__ import annotations

from dataclasses import dataclass

from ctxprec.scorer.judge.local_text import STRONG, WEAK, Terms


@dataclass(frozen=True, slots=True)
class Rules:
    """The decision's weights and thresholds (chosen on the development splits)."""

    # Answer evidence needed at all: one ordinary word or a synonym of one, not a generic word.
    min_evidence: float = 0.75
    topic_bonus: float = 0.25  # per unit of query weight the context shares...
    topic_cap: float = 2.0  # ...counted up to this much query weight
    coverage_bonus: float = 3.0  # times the share of the answer's own weight the context names
    conflict_penalty: float = 2.0  # the context's figures contradict the answer's
    threshold: float = 1.3
    near_match: float = 0.8  # a word the answer has in another form (one a prefix of the other)
    synonym: float = 1.0  # a word of the same synonym group as one of the answer's
    shared_kanji: float = 0.3  # Japanese: per kanji shared with the answer inside different words
    near_year: float = 1.0  # a year inside the span the answer's years bound (1796 in 1789-1797)
    min_query_share: float = 0.5  # reference_kind="query": share of the query's weight covered


DEFAULT_RULES = Rules()


@dataclass(frozen=True, slots=True)
class Finding:
    relevant: bool
    answer_terms: tuple[str, ...]  # as written in the context, strongest first
    topic_terms: tuple[str, ...]
    evidence: float
    score: float
    conflict: bool


def decide(context: Terms, query: Terms, reference: Terms, rules: Rules = DEFAULT_RULES) -> Finding:
    # key -> (weight, as the context writes it); a key is a term, a synonym group or a kanji.
    found: dict[str, tuple[float, str]] = {}
    for term in context.weights:
        if term in reference.weights and term not in query.weights:
            found[term] = (_strength(term, context, reference), context.surface[term])
    if rules.near_match:
        for term, other in _near_forms(context, query, reference):
            found[term] = (rules.near_match * reference.weights[other], context.surface[term])
    if rules.synonym:
        for group, (weight, surface) in _synonyms(context, query, reference).items():
            found[group] = (rules.synonym * weight, surface)
    if rules.shared_kanji and context.kanji:
        for char in _shared_kanji(context, query, reference, [surface for _, surface in found.values()]):
            found[char] = (rules.shared_kanji, char)
    near_years = _near_years(context, reference) - set(found)
    for year in near_years:
        found[year] = (rules.near_year, context.surface[year])

    evidence = sum(weight for weight, _ in found.values())
    topic = [context.surface[t] for t in context.weights if t in query.weights]
    topic_weight = sum(context.weights[t] for t in context.weights if t in query.weights)
    # The question's subject in other words ("power" for "electricity") is on topic too.
    for group, weight in context.concepts.items():
        if group in query.concepts and not context.concept_members[group] & query.concept_members[group]:
            topic_weight += min(weight, query.concepts[group])
            topic.append(context.concept_surface[group])
    conflict = not near_years and _numbers_conflict(context, reference)
    answer_weight = sum(w for t, w in reference.weights.items() if t not in query.weights)
    coverage = min(1.0, evidence / answer_weight) if answer_weight else 0.0
    score = 0.0
    if evidence >= rules.min_evidence:
        score = evidence + rules.topic_bonus * min(topic_weight, rules.topic_cap) + rules.coverage_bonus * coverage
        if conflict:
            score -= rules.conflict_penalty
    ranked = sorted(found, key=lambda key: (-found[key][0], key))
    return Finding(
        relevant=score >= rules.threshold,
        answer_terms=tuple(dict.fromkeys(found[key][1] for key in ranked)),
        topic_terms=tuple(dict.fromkeys(topic)),
        evidence=evidence,
        score=score,
        conflict=conflict,
    )


def _strength(term: str, context: Terms, reference: Terms) -> float:
    """How much a shared term says: as little as either text says of it (a name in the answer
    met as a common word in the context, "Retry-After" vs "retried", is only a word). A word
    capitalised only at a sentence start may or may not be a name: the other text decides."""
    ours, theirs = context.weights[term], reference.weights[term]
    if term in reference.unsure:
        theirs = max(theirs, ours) if theirs > WEAK else theirs
    if term in context.unsure:
        ours = max(ours, theirs) if ours > WEAK else ours
    return min(ours, theirs)


def _near_forms(context: Terms, query: Terms, reference: Terms) -> list[tuple[str, str]]:
    """(context term, answer term) pairs that are one word in forms the stemmer does not join,
    when neither is the query's."""
    pairs = []
    for term in context.weights:
        if term in reference.weights or term in query.weights:
            continue
        other = _near(term, reference.weights)
        if other is not None and other not in query.weights and _near(term, query.weights) is None:
            pairs.append((term, other))
    return pairs


def _near(term: str, others: dict[str, float]) -> str | None:
    """A term of `others` that is the same word in another form ("japan" / "japanese",
    "econom" / "economi"): one is a prefix of the other, at least five letters long."""
    if len(term) < 4 or not term.isalpha():
        return None
    for other in others:
        if len(other) >= 4 and other.isalpha() and other != term:
            short, long = (term, other) if len(term) <= len(other) else (other, term)
            if len(short) >= 5 and long.startswith(short):
                return other
    return None


def _synonyms(context: Terms, query: Terms, reference: Terms) -> dict[str, tuple[float, str]]:
    """Synonym groups the context names in other words than the answer: group -> (weight, the
    context's words, "≈ the answer's"). A group the query names is the question's subject, not
    support; one the context names with the answer's own word is already counted as that word;
    a context word counts once however many groups it is in."""
    found: dict[str, tuple[float, str]] = {}
    used: set[object] = set()
    for group in sorted(context.concepts, key=lambda g: (-context.concepts[g], g)):
        if group not in reference.concepts or group in query.concepts:
            continue
        ours = context.concept_members[group]
        if ours & reference.concept_members[group] or ours & used:
            continue
        used |= ours
        weight = min(context.concepts[group], reference.concepts[group])
        found[group] = (weight, f"{context.concept_surface[group]} ≈ {reference.concept_surface[group]}")
    return found


def _shared_kanji(context: Terms, query: Terms, reference: Terms, matched: list[str]) -> list[str]:
    """Kanji the context shares with the answer but not through a word already matched (whose
    text is in `matched`), and not the query's (脱水 in the answer, 水分 in the context: 水)."""
    covered = {char for text in matched for char in text}
    shared = (context.kanji & reference.kanji) - query.kanji - covered
    return sorted(char for char in shared if char not in context.weights or char not in reference.weights)


def _numbers_conflict(context: Terms, reference: Terms) -> bool:
    """Both name figures (10 and up: small counts are everywhere) and none is the same; or both
    count the same thing ("business days") with small figures, none in common ("1-2" against
    "3 to 5")."""
    ours = {n for n in context.numbers if context.weights.get(n, 0.0) >= STRONG}
    theirs = {n for n in reference.numbers if reference.weights.get(n, 0.0) >= STRONG}
    if ours and theirs and not ours & theirs:
        return True
    if context.numbers & reference.numbers:
        return False
    for unit, counts in context.quantities.items():
        their_counts = reference.quantities.get(unit)
        # Small counts only (figures from 10 up are judged above): "one kilometre in three
        # seconds" does not contradict "343 metres per second".
        if their_counts and not counts & their_counts and _has_small(counts) and _has_small(their_counts):
            return True
    return False


def _has_small(numbers: set[str]) -> bool:
    return any(n.isdigit() and len(n) == 1 for n in numbers)


def _years(terms: Terms) -> set[int]:
    return {int(n) for n in terms.numbers if len(n) == 4 and n.isdigit() and 1000 <= int(n) <= 2100}


def _near_years(context: Terms, reference: Terms) -> set[str]:
    """The context's years inside the span the answer's years bound, when it is a few decades
    at most ("in 1796" for a presidency of 1789-1797): the same period, not a contradiction.
    A year next to the answer's is not enough ("reunified in 1990" for a wall that fell in 1989)."""
    theirs = _years(reference)
    if len(theirs) < 2 or max(theirs) - min(theirs) > 30:
        return set()
    low, high = min(theirs), max(theirs)
    return {str(year) for year in _years(context) if low < year < high and year not in theirs}
