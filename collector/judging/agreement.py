"""The judge agreement registry: one `Confusion` per (judge, against), published as the
`ctxprec_judge_*` metrics and as `/diagnostics/judge`.

`judge` is the judge's fingerprint (`cp-` and 16 hex digits, the `identifier` of score records
and annotations): a fingerprint changes whenever the model, prompt version or a setting that can
change a verdict does, so agreement measured for one configuration is never mixed into another's.
What a fingerprint stands for (model, prompt version, role) is registered with `describe` and
exposed as `ctxprec_judge_info`. `against` is `human` (people's labels) or `live` (a shadow judge
compared with the live one).

Other components add to it: the human labels (collector/judging/labels.py) call `add`; a shadow
judge or a canary registers its judge with `describe(role=...)`, adds its comparisons with `add`,
and may publish a section of its own in `/diagnostics/judge` with `add_section`."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from ctxprec.collector.diagnostics.views import JsonResponse
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.scorer.agreement import Confusion

AGAINST = ("human", "live")
ROLES = ("live", "shadow", "canary")
# The alert's defaults (deploy/prometheus rules, docs/JUDGES.md): kappa's upper bound under this,
# with at least this many labelled contexts, means the judge is not to be trusted.
DEFAULT_KAPPA_ALERT = 0.4
MIN_LABELLED_FOR_ALERT = 50


@dataclass(frozen=True, slots=True)
class JudgeDescription:
    judge: str  # the fingerprint
    model: str
    prompt_version: str
    role: str  # live | shadow | canary

    def to_dict(self) -> dict[str, str]:
        return {"judge": self.judge, "model": self.model, "prompt_version": self.prompt_version, "role": self.role}


@dataclass(slots=True)
class AgreementEntry:
    judge: str
    against: str
    confusion: Confusion = field(default_factory=Confusion)
    annotators: set[str] = field(default_factory=set)

    def to_dict(self, threshold: float) -> dict[str, Any]:
        body = self.confusion.as_dict()
        interval = body["kappa_interval_95"]
        body["contexts"] = self.confusion.total
        # The same condition the alert rule tests, so that the view and the alert never disagree.
        # Against people only: a shadow judge far from the live one says nothing about either's truth.
        body["trusted"] = (None if self.against != "human" or self.confusion.total < MIN_LABELLED_FOR_ALERT
                           or interval is None else interval[1] >= threshold)
        return {"judge": self.judge, "against": self.against, **body,
                "annotators": sorted(self.annotators)[:20]}


class JudgeAgreement:
    """Thread-safe: a scoring process's results and the labels endpoint both add to it."""

    def __init__(self, metrics: Metrics | None = None, *, kappa_alert: float = DEFAULT_KAPPA_ALERT,
                 max_annotators: int = 100) -> None:
        self.metrics = metrics
        self.kappa_alert = kappa_alert
        self.max_annotators = max_annotators
        self.judges: dict[str, JudgeDescription] = {}
        self.entries: dict[tuple[str, str], AgreementEntry] = {}
        self.sections: dict[str, Callable[[], Any]] = {}
        self.unmatched: dict[str, int] = {}
        self._lock = threading.Lock()

    def describe(self, judge: str, *, model: str, prompt_version: str, role: str = "live") -> None:
        """Registers what the fingerprint `judge` stands for; its agreement series start at 0
        against people (and, for a shadow, against the live judge) so that panels show them."""
        if role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
        description = JudgeDescription(judge, model, prompt_version, role)
        with self._lock:
            self.judges[judge] = description
        if self.metrics is not None:
            self.metrics.judge_info.labels(judge=judge, model=model, prompt_version=prompt_version, role=role).set(1)
            for against in ("human", "live") if role == "shadow" else ("human",):
                self.metrics.judge_labels.labels(judge=judge, against=against)

    def add(self, judge: str, against: str, verdicts: Sequence[bool], reference: Sequence[bool],
            annotator: str | None = None) -> int:
        """Pairs `verdicts[i]` (the judge's) with `reference[i]` (people's, or the live judge's);
        the two must be the same length. Returns the number of contexts counted."""
        if len(verdicts) != len(reference):
            raise ValueError(f"{len(verdicts)} verdicts against {len(reference)} reference verdicts")
        return self.apply(judge, against, list(zip(verdicts, reference)), (), annotator)

    def apply(self, judge: str, against: str, added: Sequence[tuple[bool, bool]],
              removed: Sequence[tuple[bool, bool]] = (), annotator: str | None = None) -> int:
        """Counts the (judge, reference) pairs `added` and takes back `removed` (the pairs of a
        label that was replaced by a newer one for the same context and annotator). Returns the
        net change in labelled contexts."""
        if against not in AGAINST:
            raise ValueError(f"against must be one of {', '.join(AGAINST)}, got {against!r}")
        if not added and not removed:
            return 0
        with self._lock:
            entry = self.entries.get((judge, against))
            if entry is None:
                entry = self.entries[(judge, against)] = AgreementEntry(judge, against)
            for said, truth in added:
                entry.confusion.add(bool(said), bool(truth))
            for said, truth in removed:
                _take_back(entry.confusion, bool(said), bool(truth))
            if annotator and len(entry.annotators) < self.max_annotators:
                entry.annotators.add(annotator)
            confusion = Confusion()
            confusion.merge(entry.confusion)
        net = len(added) - len(removed)
        self._publish(judge, against, confusion, max(0, net))
        return net

    def count_unmatched(self, reason: str, n: int = 1) -> None:
        """Labels that were not compared (evicted, expired, overflow, mismatch): counted, never lost silently."""
        if n <= 0:
            return
        with self._lock:
            self.unmatched[reason] = self.unmatched.get(reason, 0) + n
        if self.metrics is not None:
            self.metrics.judge_labels_unmatched.labels(reason=reason).inc(n)

    def add_section(self, name: str, provider: Callable[[], Any]) -> None:
        """`provider()` is served under `name` in `/diagnostics/judge` (a canary's state, a shadow
        judge's budget); it runs on the event loop, so it must be quick and must not block."""
        if name in ("judges", "agreement", "unmatched_labels", "kappa_alert", "sections"):
            raise ValueError(f"{name!r} is a section of its own in /diagnostics/judge")
        self.sections[name] = provider

    def confusion(self, judge: str, against: str) -> Confusion:
        """A copy of the counts so far (empty if none)."""
        copy = Confusion()
        with self._lock:
            entry = self.entries.get((judge, against))
            if entry is not None:
                copy.merge(entry.confusion)
        return copy

    def _publish(self, judge: str, against: str, confusion: Confusion, added: int) -> None:
        m = self.metrics
        if m is None:
            return
        m.judge_labels.labels(judge=judge, against=against).inc(added)
        if confusion.agreement is not None:
            m.judge_agreement.labels(judge=judge, against=against).set(confusion.agreement)
        if confusion.kappa is not None:
            m.judge_kappa.labels(judge=judge, against=against).set(confusion.kappa)
        interval = confusion.kappa_interval()
        if interval is not None:
            m.judge_kappa_lower.labels(judge=judge, against=against).set(interval[0])
            m.judge_kappa_upper.labels(judge=judge, against=against).set(interval[1])

    def view(self, params: Mapping[str, str]) -> JsonResponse:
        """`/diagnostics/judge?judge=&against=`: the judges known, and per (judge, against) the
        labelled contexts, agreement, kappa with its 95% interval, precision and recall of
        "relevant", the confusion counts, and whether the alert's condition holds."""
        wanted_judge = params.get("judge") or None
        wanted_against = params.get("against") or None
        if wanted_against is not None and wanted_against not in AGAINST:
            return JsonResponse(400, {"error": f"against must be one of {', '.join(AGAINST)}, "
                                               f"got {wanted_against[:40]!r}"})
        with self._lock:
            judges = [d.to_dict() for d in self.judges.values()]
            entries = [e.to_dict(self.kappa_alert) for e in self.entries.values()
                       if (wanted_judge is None or e.judge == wanted_judge)
                       and (wanted_against is None or e.against == wanted_against)]
            unmatched = dict(self.unmatched)
        body: dict[str, Any] = {
            "judges": judges,
            "agreement": entries,
            "unmatched_labels": unmatched,
            "kappa_alert": {"threshold": self.kappa_alert, "min_labelled_contexts": MIN_LABELLED_FOR_ALERT},
        }
        sections: dict[str, Any] = {}
        for name, provider in list(self.sections.items()):
            try:
                sections[name] = provider()
            except Exception as error:  # a section's failure must not take the view down
                sections[name] = {"error": f"{type(error).__name__}: {error}"[:200]}
        body["sections"] = sections
        return JsonResponse(200, body)


def _take_back(confusion: Confusion, judge: bool, reference: bool) -> None:
    """The inverse of `Confusion.add` (never below 0)."""
    name = ("both_relevant" if judge and reference else "judge_only" if judge
            else "reference_only" if reference else "both_irrelevant")
    setattr(confusion, name, max(0, getattr(confusion, name) - 1))
