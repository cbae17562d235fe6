"""The local judge's decision for one context: what it shares with the answer, and whether
that is enough (docs/LOCAL_JUDGE.md has the method and the measured agreement).

Evidence is what the context says that the answer says and the query does not: the same term,
the same word in a form the stemmer misses (or inside a compound), a word of the same synonym
group, a year inside the span the answer's years bound. Echoing the query is being on topic,
not support: it only adds a bonus once there is evidence.

Evidence is not support when the context gives other figures for what the answer states (other
versions, prices, times, years), is about another of the query's figures (`Django 5.0` for a
question on 4.2), is another row of the same table (a head cell that names something else:
`| Free |` for the Business plan), or denies what the answer affirms (or affirms what it
denies)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from ctxprec.scorer.judge.local_text import STRONG, WEAK, Terms

# Figures compare within their kind: a year against years, a clock time against clock times,
# a small count (one digit) against small counts ("line 2" / "line 4", not "3 seconds" / "343 m/s").
_KINDS = {"year": "year", "time": "time", "number": "number", "small": "small"}


@dataclass(frozen=True, slots=True)
class Rules:
    """The decision's weights and thresholds (chosen on the development splits)."""

    # Answer evidence needed at all: one ordinary word or a synonym of one, not a generic word.
    min_evidence: float = 0.75
    topic_bonus: float = 0.25  # per unit of query weight the context shares...
    topic_cap: float = 2.0  # ...counted up to this much query weight
    coverage_bonus: float = 3.0  # times the share of the answer's own weight the context names
    threshold: float = 1.3
    # The context's figures differ from the answer's: a veto when figures are much of what the
    # answer says (this share of its weight or more: "$29 per month"), else a penalty.
    figure_share: float = 0.4
    # A context whose evidence is under `sibling_max` and under this share of the strongest
    # relevant context's in the same sample is a neighbouring entry, not support (0: off).
    sibling_share: float = 0.25
    sibling_max: float = 1.5
    # Evidence below this needs the question's subject too (one shared word alone is often a
    # sibling FAQ entry or a neighbouring fact); 0 turns the rule off.
    alone: float = 0.0
    alone_max_answer: float = 0.0  # ...unless the answer itself weighs at most this much
    conflict_penalty: float = 2.0
    near_match: float = 0.8  # a word the answer has in another form (one a prefix of the other)
    synonym: float = 1.0  # a word of the same synonym group as one of the answer's
    near_year: float = 1.0  # a year inside the span the answer's years bound (1796 in 1789-1797)
    min_query_share: float = 0.5  # reference_kind="query": share of the query's weight covered
    # What turns evidence into no support (each can be switched off for a comparison).
    value_conflict: bool = True
    head_mismatch: bool = True
    negation: bool = True


DEFAULT_RULES = Rules()


@dataclass(frozen=True, slots=True)
class Finding:
    relevant: bool
    answer_terms: tuple[str, ...]  # as written in the context, strongest first
    topic_terms: tuple[str, ...]
    evidence: float
    score: float
    conflict: str | None  # why evidence is not support: "figures", "query figures", "row", "negation"


def decide(context: Terms, query: Terms, reference: Terms, rules: Rules = DEFAULT_RULES, *,
           compounds: bool = False) -> Finding:
    # key -> (weight, as the context writes it); a key is a term, a synonym group or a year.
    found: dict[str, tuple[float, str]] = {}
    for term in context.weights:
        if term in reference.weights and term not in query.weights:
            found[term] = (_strength(term, context, reference), context.surface[term])
    if rules.near_match:
        for term, other in _near_forms(context, query, reference, compounds):
            found.setdefault(term, (rules.near_match * min(reference.weights[other], context.weights[term]),
                                    context.surface[term]))
    if rules.synonym:
        for group, (weight, surface) in _synonyms(context, query, reference).items():
            found[group] = (rules.synonym * weight, surface)
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
    answer_weight = sum(w for t, w in reference.weights.items() if t not in query.weights)
    coverage = min(1.0, evidence / answer_weight) if answer_weight else 0.0
    score = 0.0
    conflict = None
    lone = evidence < rules.alone and topic_weight <= 0 and answer_weight > rules.alone_max_answer
    if evidence >= rules.min_evidence and not lone:
        score = evidence + rules.topic_bonus * min(topic_weight, rules.topic_cap) + rules.coverage_bonus * coverage
        conflict = _conflict(context, query, reference, rules, bool(near_years), compounds)
        if conflict is None and not near_years and _strong_figures_differ(context, reference):
            score -= rules.conflict_penalty
    ranked = sorted(found, key=lambda key: (-found[key][0], key))
    return Finding(
        relevant=score >= rules.threshold and conflict is None,
        answer_terms=tuple(dict.fromkeys(found[key][1] for key in ranked)),
        topic_terms=tuple(dict.fromkeys(topic)),
        evidence=evidence,
        score=score,
        conflict=conflict,
    )


def _conflict(context: Terms, query: Terms, reference: Terms, rules: Rules, near_years: bool,
              compounds: bool) -> str | None:
    clash = _figures_clash(context.values, query.values, reference.values) if rules.value_conflict and not near_years else None
    # Other figures than the answer's weigh little when figures are little of what it says
    # (a recipe's amounts beside its steps): then they only take a penalty (above).
    if clash == "figures" and _figure_share(reference, query) < rules.figure_share:
        clash = None
    if clash:
        return clash
    if rules.head_mismatch and (context.head or context.head_values):
        if _head_mismatch(context, query, reference, compounds):
            return "row"
    if rules.negation and not reference.negated and _denies(context, query, reference, compounds):
        return "negation"
    return None


def _figure_share(reference: Terms, query: Terms) -> float:
    """How much of what the answer says (its weight, the query's terms left out) is figures."""
    own = {t: w for t, w in reference.weights.items() if t not in query.weights}
    figures = reference.numbers
    total = sum(own.values())
    return sum(w for t, w in own.items() if t in figures) / total if total else 0.0


def _strong_figures_differ(context: Terms, reference: Terms) -> bool:
    """Both name figures from 10 up (small counts are everywhere) and none is the same."""
    ours = {v for v in context.numbers if context.weights.get(v, 0.0) >= STRONG}
    theirs = {v for v in reference.numbers if reference.weights.get(v, 0.0) >= STRONG}
    return bool(ours and theirs and not ours & theirs)


def _denies(context: Terms, query: Terms, reference: Terms, compounds: bool) -> bool:
    """The context denies something the query or the answer says ("was not discovered by",
    "are not allowed"), while the answer denies nothing."""
    if not context.negated_terms:
        return False
    known = query.weights.keys() | reference.weights.keys()
    return any(_known(term, known, compounds) for term in context.negated_terms)


def _by_kind(values: dict[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for kind, found in values.items():
        out.setdefault(_KINDS.get(kind, kind), set()).update(found)
    return out


def _figures_clash(context: dict[str, set[str]], query: dict[str, set[str]], answer: dict[str, set[str]]) -> str | None:
    """The context gives figures of a kind the query or the answer gives, none of them the same,
    and shares none of their figures beyond small counts: "Django 5.0" for a question on 4.2
    ("query figures"), "$19/month" against "$29 per month" ("figures")."""
    ours, asked, stated = _by_kind(context), _by_kind(query), _by_kind(answer)
    for kind in ours:
        if kind != "small" and ours[kind] & (asked.get(kind, set()) | stated.get(kind, set())):
            return None
    for kind in ours:
        if asked.get(kind) and not ours[kind] & (asked[kind] | stated.get(kind, set())):
            return "query code" if kind == "code" else "query figures"
    for kind in ours:
        if stated.get(kind) and not ours[kind] & stated[kind]:
            return "code" if kind == "code" else "figures"
    return None


def _head_mismatch(context: Terms, query: Terms, reference: Terms, compounds: bool) -> bool:
    """A row or label whose head cell names something the query and the answer do not: another
    row of the same table (`| Free |` for the Business plan, `Line 2 (red)` for line 4)."""
    known = query.weights.keys() | reference.weights.keys()
    content = [t for t, w in context.head.items() if w > 0 and not t.replace(".", "").isdigit()]
    named = any(_known(t, known, compounds) for t in content)
    # Figures in the head: when the query or the answer has figures of that kind, one must match.
    both = _by_kind({k: query.values.get(k, set()) | reference.values.get(k, set())
                     for k in query.values.keys() | reference.values.keys()})
    for kind, values in _by_kind(context.head_values).items():
        if kind in both and both[kind] and not values & both[kind]:
            return True
        if kind in both and values & both[kind]:
            named = True
    calls = [t for t in content if t.endswith("()")]
    if calls and not any(_known(t, known, compounds) for t in calls):
        return True
    return bool(content) and not named


def _known(term: str, known: set[str] | frozenset[str], compounds: bool) -> bool:
    bare = term.rstrip("()_")
    if term in known or bare in known or bare + "()" in known:
        return True
    return _Forms(known, compounds).near(term) is not None


def _strength(term: str, context: Terms, reference: Terms) -> float:
    """How much a shared term says: as little as either text says of it (a name in the answer
    met as a common word in the context is only a word). A word capitalised only at a sentence
    start may or may not be a name: the other text decides."""
    ours, theirs = context.weights[term], reference.weights[term]
    if term in reference.unsure:
        theirs = max(theirs, ours) if theirs > WEAK else theirs
    if term in context.unsure:
        ours = max(ours, theirs) if ours > WEAK else ours
    return min(ours, theirs)


def _near_forms(context: Terms, query: Terms, reference: Terms, compounds: bool) -> list[tuple[str, str]]:
    """(context term, answer term) pairs that are one word in forms the stemmer does not join,
    when neither is the query's."""
    pairs = []
    answer, asked = _forms(reference, compounds), _forms(query, compounds)
    for term in context.weights:
        if term in reference.weights or term in query.weights:
            continue
        other = answer.near(term)
        if other is not None and other not in query.weights and asked.near(term) is None:
            pairs.append((term, other))
    return pairs


def _forms(terms: Terms, compounds: bool) -> "_Forms":
    key = f"forms:{compounds}"
    found = terms.cache.get(key)
    if not isinstance(found, _Forms):
        found = terms.cache[key] = _Forms(terms.weights, compounds)
    return found


class _Forms:
    """Terms indexed by their first five and last four letters, so that finding another form of
    a word (`_near`) looks at a handful of candidates, not at every term."""

    def __init__(self, terms: dict[str, float] | set[str] | frozenset[str], compounds: bool) -> None:
        self.terms, self.compounds = terms, compounds
        self.heads: dict[str, list[str]] = {}
        self.tails: dict[str, list[str]] = {}
        self.cjk: list[str] = []
        for term in terms:
            if not term.isalpha():
                continue
            if _is_cjk(term):
                self.cjk.append(term)
            elif len(term) >= 4:
                self.heads.setdefault(term[:5], []).append(term)
                if compounds:
                    self.tails.setdefault(term[-4:], []).append(term)

    def near(self, term: str) -> str | None:
        if not term.isalpha():
            return None
        if _is_cjk(term):
            return _near(term, self.cjk, self.compounds) if len(term) >= 2 else None
        if len(term) < 4:
            return None
        candidates = self.heads.get(term[:5], []) + (self.tails.get(term[-4:], []) if self.compounds else [])
        return _near(term, candidates, self.compounds)


def _is_cjk(term: str) -> bool:
    return not term.isascii() and all(ord(ch) > 0x2E80 for ch in term)


def _near(term: str, others: Iterable[str], compounds: bool) -> str | None:
    """A term of `others` that is the same word in another form: one is a prefix of the other,
    at least five letters long ("japan" / "japanese"); in languages that write compounds as one
    word (German, Dutch; Chinese, Japanese and Korean words), also a suffix of at least four
    letters, or two characters ("bremsbelag" / "belag", "罚款" / "逾期罚款")."""
    if not term.isalpha():
        return None
    cjk = _is_cjk(term)
    if len(term) < (2 if cjk else 4):
        return None
    for other in others:
        if other == term or not other.isalpha():
            continue
        short, long = (term, other) if len(term) <= len(other) else (other, term)
        if cjk:
            if len(short) >= 2 and short in long and _is_cjk(long):
                return other
            continue
        if len(short) >= 5 and long.startswith(short):
            return other
        if compounds and len(short) >= 4 and len(long) >= len(short) + 3 and long.endswith(short):
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


def _years(terms: Terms) -> set[int]:
    return {int(n) for n in terms.values.get("year", ())}


def _near_years(context: Terms, reference: Terms) -> set[str]:
    """The context's years inside the span the answer's years bound, when it is a few decades
    at most ("in 1796" for a presidency of 1789-1797): the same period, not a contradiction.
    A year next to the answer's is not enough ("reunified in 1990" for a wall that fell in 1989)."""
    theirs = _years(reference)
    if len(theirs) < 2 or max(theirs) - min(theirs) > 30:
        return set()
    low, high = min(theirs), max(theirs)
    return {str(year) for year in _years(context) if low < year < high and year not in theirs}


def query_share(context: Terms, query: Terms) -> tuple[float, list[str]]:
    """reference_kind="query": the share of the query's weight the context covers."""
    query_weight = sum(query.weights.values())
    shared = [t for t in context.weights if t in query.weights]
    covered = sum(query.weights[t] for t in shared) / query_weight if query_weight else 0.0
    return covered, shared


__all__ = ["DEFAULT_RULES", "Finding", "Rules", "STRONG", "decide", "query_share"]
