"""`ctxprec score EVENTS`: score a file of RAG events (JSONL or CSV, scorer/event_files.py) and
write one score record per event.

The input is streamed: at most `window` events are held at once (in flight or waiting in the
reorder buffer), whatever the file's size, and records come out in input order. A line that
cannot be read or a sample the judge fails on gives an error record; the rest are still scored.
Exit status: 0 all scored, 1 some failed, 2 usage error."""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import IO, Any, Awaitable, Callable, Iterable

# Importing any scorer module loads the package, which loads the engine (scorer/__init__.py), so
# these cost nothing extra; litellm and the transports stay lazy inside build_engine.
from ctxprec.scorer.config import JudgeConfig, judge_settings, setting_flag
from ctxprec.scorer.engine import NO_CONTEXT_MESSAGE, ContextPrecisionEngine, build_engine
from ctxprec.scorer.event_files import EventFileError, count_events, jsonl_events, open_event_file
from ctxprec.scorer.events import (
    EventError,
    KeyNotes,
    RagEvent,
    RawEvent,
    parse_rag_event_with_notes,
    resolve_aliases,
)
from ctxprec.scorer.judge.chat import JudgeError, RequestEvent, RequestObserver
from ctxprec.scorer.key_warnings import KeyWarnings
from ctxprec.scorer.labels import LabelledAgreement, agreement_of, agreement_text, record_verdicts
from ctxprec.scorer.records import document_names, failure_record, record_id, record_text, score_record
from ctxprec.scorer.redact import redacted
from ctxprec.scorer.result import JudgeUsage
from ctxprec.scorer.values import METAVAR_OF_PARSER, parse_bool, parse_count, parse_non_negative

DEFAULT_MODEL = "local"
DEFAULT_CONCURRENCY = 16
DEFAULT_RECORD_TEXT_CHARS: int = JudgeConfig.record_text_chars  # type: ignore[assignment]
# Failures said on stderr as they come, with their line and reason; the rest are counted.
FAILURES_SHOWN = 5
LOCAL_JUDGE_NOTE = (
    "ctxprec score: using the local judge (offline, deterministic, lexical; no API key needed). "
    "For an LLM judge pass --judge-model, e.g. --judge-model openai/gpt-4o-mini with OPENAI_API_KEY set, "
    "or --judge-model openai/NAME --judge-api-base http://HOST:PORT/v1 for an OpenAI-compatible server "
    "(vLLM, Ollama, the stub judge).\n"
)


# Hears, per event, what its keys did: (line number, notes).
KeyObserver = Callable[[int, KeyNotes], None]


@dataclass(frozen=True)
class RecordText:
    """What text a record keeps (`record_text_chars`), redacted first with --redact-pii."""

    chars: int = DEFAULT_RECORD_TEXT_CHARS
    redact_pii: bool = False

    def of(self, text: str | None) -> str | None:
        return record_text(text, self.chars, redacted if self.redact_pii else None)

    def documents(self, event: RagEvent) -> tuple[list[str], list[str | None]]:
        return document_names(event.contexts, self.chars, redacted if self.redact_pii else None)


class UsageError(Exception):
    """A bad command line or unreadable file: reported in one line, exit status 2."""


# --- command line ------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("events", metavar="EVENTS",
                        help="RAG events: JSON Lines (one object per line) or CSV with a header row; "
                             "told apart by the extension (.jsonl, .csv), else by the content")
    parser.add_argument("-o", "--output", metavar="SCORES.jsonl", default=None, help="where to write score records (default: stdout)")
    parser.add_argument("--scale", type=flag_type(parse_non_negative), default=1.0,
                        help="multiply scores by this (default 1)")
    parser.add_argument("--concurrency", type=flag_type(parse_count), default=DEFAULT_CONCURRENCY,
                        help=f"samples scored at once (default {DEFAULT_CONCURRENCY}; also the judge's requests "
                             "in flight unless --judge-concurrency says otherwise)")
    parser.add_argument("--strict", action="store_true",
                        help="an unknown key or column, or a field given under two names, makes that event an error "
                             "(default: a warning, once per name)")
    parser.add_argument("--labels", metavar="LABELS.jsonl", default=None,
                        help="people's labels ({trace_id, span_id, relevant}, one JSON object a line): the judge's "
                             "agreement with them (Cohen's kappa with its 95%% interval, precision, recall) is "
                             "said at the end; default: none")
    add_judge_arguments(parser)


def add_judge_arguments(parser: argparse.ArgumentParser) -> None:
    """The judge's flags, as `ctxprec serve` has them: one per flagged JudgeConfig field, read
    through the field's own parser (so a value is refused here in the words serve uses)."""
    for declared in judge_settings():
        flag = setting_flag(declared)
        if flag is None:
            continue
        parse = declared.metadata["parse"]
        default = "local" if declared.name == "model" else declared.default
        shown = "none" if default is None else str(default).lower() if isinstance(default, bool) else default
        help_text = f"{declared.metadata['help']} (default: {shown})"
        if parse is parse_bool:
            # A switch, with its --no- form: a value after it would swallow the EVENTS argument.
            parser.add_argument(flag, dest=declared.name, action=argparse.BooleanOptionalAction, default=None,
                                help=help_text)
            continue
        choices = getattr(parse, "choices", None)
        metavar = declared.metadata["metavar"] or ("|".join(choices) if choices else METAVAR_OF_PARSER.get(parse))
        parser.add_argument(flag, dest=declared.name, type=flag_type(parse), default=None, metavar=metavar,
                            help=help_text)


def flag_type(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse type from a value parser (scorer/values.py): its ValueError, in its words."""
    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    convert.__name__ = getattr(parse, "__name__", "value")
    return convert


def judge_options(args: argparse.Namespace) -> dict[str, Any]:
    """The JudgeConfig fields given on the command line (or in CTXPREC_* variables)."""
    given: dict[str, Any] = {}
    for declared in judge_settings():
        value = getattr(args, declared.name, None) if setting_flag(declared) else None
        if value is not None:
            given[declared.name] = value
    return given


def run(args: argparse.Namespace) -> int:
    judge = judge_options(args)
    if judge.get("api_base") and "model" not in judge:
        sys.stderr.write(
            "ctxprec score: error: --judge-api-base needs --judge-model "
            "(e.g. --judge-model openai/NAME for an OpenAI-compatible server)\n"
        )
        return 2
    options = BatchOptions(
        events_path=args.events,
        output_path=args.output,
        model=judge.pop("model", DEFAULT_MODEL),
        api_base=judge.pop("api_base", None),
        scale=args.scale,
        concurrency=args.concurrency,
        model_given=args.model is not None,
        redact_pii=judge.pop("redact_pii", False),
        strict=args.strict,
        record_text_chars=judge.pop("record_text_chars", DEFAULT_RECORD_TEXT_CHARS),
        judge=judge,
        labels_path=args.labels,
    )
    try:
        return asyncio.run(run_batch(options, stderr=sys.stderr))
    except UsageError as exc:
        sys.stderr.write(f"ctxprec score: error: {exc}\n")
        return 2


# --- the batch -----------------------------------------------------------------------------------


@dataclass
class BatchOptions:
    events_path: str
    output_path: str | None = None
    model: str = DEFAULT_MODEL
    api_base: str | None = None
    scale: float = 1.0
    concurrency: int = DEFAULT_CONCURRENCY
    model_given: bool = True
    redact_pii: bool = False
    strict: bool = False  # unknown keys and two names of one field fail the event instead of a warning
    record_text_chars: int = DEFAULT_RECORD_TEXT_CHARS  # the question and document previews kept in records
    window: int | None = None  # events held at once; default 4 x concurrency
    progress: bool | None = None  # None: only when stderr is a terminal
    judge: dict[str, Any] = field(default_factory=dict)  # other JudgeConfig fields (the --judge-* flags)
    labels_path: str | None = None  # people's labels to measure the judge against (scorer/labels.py)


@dataclass
class JudgeTally:
    """What the judge was asked, counted per HTTP attempt through the engine's request observer,
    so that retries and the calls of samples that failed in the end are paid for in the summary."""

    requests: int = 0
    failed_requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    failed_by_outcome: Counter[str] = field(default_factory=Counter)

    def __call__(self, event: RequestEvent) -> None:
        self.requests += 1
        if event.outcome != "ok":
            self.failed_requests += 1
            self.failed_by_outcome[event.outcome] += 1
        self.prompt_tokens += event.prompt_tokens
        self.completion_tokens += event.completion_tokens
        self.cost_usd += event.cost_usd


@dataclass
class BatchSummary:
    events: int = 0
    scored: int = 0
    score_sum: float = 0.0
    failures: Counter[str] = field(default_factory=Counter)
    elapsed_s: float = 0.0
    failed_calls: int = 0  # judge calls (HTTP attempts) of the samples that failed, from their records
    failed_cost_usd: float = 0.0

    @property
    def failed(self) -> int:
        return sum(self.failures.values())

    def add(self, record: dict[str, Any]) -> None:
        self.events += 1
        if record.get("error"):
            self.failures[record["error"]["type"]] += 1
            judge = record.get("judge") or {}
            self.failed_calls += judge.get("calls", 0)
            self.failed_cost_usd += judge.get("cost_usd", 0.0)
        else:
            self.scored += 1
            self.score_sum += record["score"]

    def text(self, source: str, model: str, judge: JudgeTally) -> str:
        mean = f"{self.score_sum / self.scored:.3f}" if self.scored else "n/a"
        failed = f"{self.failed} failed"
        if self.failures:
            failed += " (" + ", ".join(f"{kind}: {n}" for kind, n in sorted(self.failures.items())) + ")"
        rate = self.events / self.elapsed_s if self.elapsed_s > 0 else 0.0
        if model.strip().lower() == DEFAULT_MODEL:  # the local judge makes no requests to count
            traffic = "offline, no requests"
        else:
            failed_requests = f"{judge.failed_requests} failed"
            if judge.failed_by_outcome:
                failed_requests += ": " + ", ".join(f"{kind} {n}" for kind, n in sorted(judge.failed_by_outcome.items()))
            traffic = (
                f"{judge.requests} requests ({failed_requests}), {judge.prompt_tokens} prompt tokens, "
                f"{judge.completion_tokens} completion tokens, cost ${judge.cost_usd:.4f}"
            )
            if self.failures:
                traffic += (f" (of which the failed samples' {self.failed_calls} calls, "
                            f"${self.failed_cost_usd:.4f})")
        return (
            f"ctxprec score: {source}: {self.events} events, {self.scored} scored, {failed}; "
            f"mean score {mean}\n"
            f"ctxprec score: judge {model}: {traffic}; {self.elapsed_s:.1f}s ({rate:.1f} events/s)\n"
        )


async def run_batch(options: BatchOptions, *, stderr: IO[str]) -> int:
    """Score `options.events_path`; returns the exit status. Raises UsageError before any work."""
    labels = read_labels(options.labels_path) if options.labels_path else None
    try:
        source = open_event_file(options.events_path)
    except EventFileError as exc:
        raise UsageError(str(exc)) from None
    try:
        # A file with no event at all is a mistake a script must see (a wrong path, a failed
        # export), not a run that scored nothing and exited 0; found before the output is opened.
        events = source.nonempty_events()
        sink = _open_output(options.output_path, options.events_path)
    except (UsageError, EventFileError) as exc:
        source.close()
        raise UsageError(str(exc)) from None
    try:
        tally = JudgeTally()
        engine = _build_engine(options, tally)
        if not options.model_given:
            stderr.write(LOCAL_JUDGE_NOTE)
        show_progress = options.progress if options.progress is not None else _is_tty(stderr)
        total = count_events(options.events_path, source.kind) if show_progress else None
        progress = Progress(stderr, total) if show_progress else None

        def say(text: str) -> None:
            if progress:
                progress.clear()  # a warning must not land in the middle of the progress line
            stderr.write(text)

        warnings = KeyWarnings(say, noun=source.key_noun)
        for note in source.notes:
            warnings.note(note)
        failures = FailureLines(say)

        judged: list[dict[str, Any]] = []  # with --labels: each scored record's ids and verdicts

        def write(record: dict[str, Any]) -> bool:
            failures.see(record)
            if labels is not None and record_verdicts(record) is not None:
                judged.append({"trace_id": record["trace_id"], "span_id": record["span_id"],
                               "verdicts": record["verdicts"]})
            return sink.write(record)

        started = time.monotonic()
        try:
            summary = await score_events(
                events,
                engine,
                concurrency=options.concurrency,
                window=options.window or max(16, 4 * options.concurrency),
                write=write,
                on_record=progress.update if progress else None,
                strict=options.strict,
                key_noun=source.key_noun,
                on_keys=warnings,
                text=RecordText(options.record_text_chars, options.redact_pii),
            )
        finally:
            await engine.aclose()
        summary.elapsed_s = time.monotonic() - started
        if progress:
            progress.finish()
    finally:
        source.close()
        sink.close()
    if sink.broken:
        stderr.write("ctxprec score: output closed early; stopped\n")
        return 1
    failures.finish(options.output_path)
    stderr.write(summary.text(options.events_path, options.model, tally))
    if labels is not None and options.labels_path:
        fingerprint = engine.fingerprint
        stderr.write(labels_text(options.labels_path, agreement_of(judged, labels, lambda _: fingerprint),
                                 fingerprint))
    return 0 if summary.failed == 0 else 1


MAX_LABELS_BYTES = 256 * 1024 * 1024


def read_labels(path: str) -> list[bytes]:
    """The label file's lines; UsageError when it cannot be read (before any scoring)."""
    try:
        size = os.path.getsize(path)
        if size > MAX_LABELS_BYTES:
            raise UsageError(f"--labels {path}: {size} bytes, over the limit of {MAX_LABELS_BYTES}")
        with open(path, "rb") as handle:
            return handle.read(MAX_LABELS_BYTES).splitlines()
    except OSError as exc:
        raise UsageError(f"--labels {path}: cannot read ({exc.strerror or exc})") from None


def labels_text(path: str, agreement: LabelledAgreement, judge: str) -> str:
    """The closing lines of a run with --labels."""
    confusion = agreement.per_judge.get(judge)
    lines = []
    if confusion is None or not confusion.total:
        lines.append(f"ctxprec score: labels {path}: no label matched a scored retrieval (labels name them by "
                     "trace_id and span_id)")
    else:
        c = confusion
        lines.append(f"ctxprec score: labels {path}: judge {judge}: {agreement_text(c)}; confusion (judge/people) "
                     f"yes/yes {c.both_relevant}, yes/no {c.judge_only}, no/yes {c.reference_only}, "
                     f"no/no {c.both_irrelevant}")
    left = []
    if agreement.not_found:
        left.append(f"{agreement.not_found} labelled contexts of retrievals not scored here")
    if agreement.refused_count:
        first = agreement.refused[0]
        left.append(f"{agreement.refused_count} lines refused (first: line {first[0]}: {first[1]})")
    if left:
        lines.append(f"ctxprec score: labels {path}: " + "; ".join(left))
    return "".join(line + "\n" for line in lines)


@dataclass
class FailureLines:
    """The first failures on stderr as they come, each with its line and reason, so that nobody
    has to dig them out of the output file; the rest are counted and pointed to."""

    say: Callable[[str], None]
    shown: int = 0
    more: int = 0

    def see(self, record: dict[str, Any]) -> None:
        error = record.get("error")
        if not error:
            return
        if self.shown >= FAILURES_SHOWN:
            self.more += 1
            return
        self.shown += 1
        message = str(error.get("message", ""))
        line = record.get("line")
        prefix = f"line {line}: "
        where = f"line {line}" if line is not None else "an event"
        self.say(f"ctxprec score: {where} failed ({error.get('type')}): {message.removeprefix(prefix)}\n")

    def finish(self, output_path: str | None) -> None:
        if self.more:
            where = output_path if output_path not in (None, "-") else "the records on stdout"
            self.say(f"ctxprec score: {self.more} more failed; their records in {where} say why\n")


async def score_lines(
    lines: Iterable[tuple[int, bytes]],
    engine: ContextPrecisionEngine,
    *,
    concurrency: int,
    window: int,
    write: Callable[[dict[str, Any]], bool],
    on_record: Callable[[int], None] | None = None,
    text: RecordText = RecordText(),
) -> BatchSummary:
    """`score_events` over numbered JSONL lines."""
    return await score_events(
        jsonl_events(lines), engine, concurrency=concurrency, window=window, write=write, on_record=on_record,
        text=text,
    )


async def score_events(
    events: Iterable[RawEvent],
    engine: ContextPrecisionEngine,
    *,
    concurrency: int,
    window: int,
    write: Callable[[dict[str, Any]], bool],
    on_record: Callable[[int], None] | None = None,
    strict: bool = False,
    key_noun: str = "key",
    on_keys: KeyObserver | None = None,
    text: RecordText = RecordText(),
) -> BatchSummary:
    """Score events as read from a file with at most `concurrency` samples in flight and at most
    `window` events held; `write` gets each record in input order and returns False to stop early.
    `on_keys` hears what each event's keys did (aliases read, conflicts, unknown keys), failing
    events' included; `key_noun` is what the input calls them in messages ("column" for CSV).
    `text` says what text the records keep."""
    summary = BatchSummary()
    limit = asyncio.Semaphore(concurrency)
    # Entries are finished records (bad lines) or tasks, in input order: the reorder buffer.
    held: deque[dict[str, Any] | asyncio.Task[dict[str, Any]]] = deque()
    stopped = False

    async def emit_head() -> None:
        nonlocal stopped
        head = held.popleft()
        record = head if isinstance(head, dict) else await head
        summary.add(record)
        if not stopped and not write(record):
            stopped = True
        if on_record:
            on_record(summary.events)

    try:
        for raw in events:
            if stopped:
                break
            item = _prepare(raw, engine, strict=strict, key_noun=key_noun, on_keys=on_keys, text=text)
            held.append(item if isinstance(item, dict) else asyncio.ensure_future(_limited(limit, item)))
            while held and (len(held) >= window or _ready(held[0])):
                await emit_head()
        while held and not stopped:
            await emit_head()
    finally:
        leftover = [entry for entry in held if isinstance(entry, asyncio.Task)]
        for task in leftover:
            task.cancel()
        if leftover:
            await asyncio.gather(*leftover, return_exceptions=True)
    return summary


def _ready(entry: dict[str, Any] | asyncio.Task[dict[str, Any]]) -> bool:
    return isinstance(entry, dict) or entry.done()


async def _limited(limit: asyncio.Semaphore, work: Awaitable[dict[str, Any]]) -> dict[str, Any]:
    async with limit:
        return await work


def _prepare(
    raw: RawEvent,
    engine: ContextPrecisionEngine,
    *,
    strict: bool = False,
    key_noun: str = "key",
    on_keys: KeyObserver | None = None,
    text: RecordText = RecordText(),
) -> dict[str, Any] | Awaitable[dict[str, Any]]:
    """A finished error record for an event that cannot be scored, or a coroutine that scores it."""
    line_no = raw.line_no
    if raw.error is not None:
        _hear_keys(raw, on_keys, strict, key_noun)
        return _bad_input(engine, raw, raw.error, text)
    try:
        parsed = parse_rag_event_with_notes(raw.value, strict=strict, key_noun=key_noun)
    except EventError as exc:
        _hear_keys(raw, on_keys, strict, key_noun)
        return _bad_input(engine, raw, exc.message, text)
    if on_keys:
        on_keys(line_no, parsed.notes)
    event = parsed.event
    if not event.contexts:
        return _failure(engine, event, line_no, "no_contexts", NO_CONTEXT_MESSAGE, text, decision="no_contexts")
    return _score_event(engine, event, line_no, text)


def _hear_keys(raw: RawEvent, on_keys: KeyObserver | None, strict: bool, key_noun: str) -> None:
    """What the keys of an event that failed said: a misspelt `contexs` is most likely why it
    failed. Under --strict the error itself names them."""
    if on_keys is None or strict or not isinstance(raw.value, dict):
        return
    on_keys(raw.line_no, resolve_aliases(raw.value)[1])


async def _score_event(engine: ContextPrecisionEngine, event: RagEvent, line_no: int, text: RecordText) -> dict[str, Any]:
    try:
        result = await engine.score(
            event.query, event.context_texts, output=event.output, expected_output=event.expected_output
        )
    except JudgeError as exc:
        return _failure(engine, event, line_no, exc.kind, str(exc), text, usage=exc.usage)
    except ValueError as exc:
        return _failure(engine, event, line_no, "bad_input", str(exc), text)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - one broken sample must not end the batch
        return _failure(engine, event, line_no, "internal_error", f"{type(exc).__name__}: {exc}", text)
    names, previews = text.documents(event)
    return score_record(result, **_event_fields(engine, event, line_no, text), document_ids=names, previews=previews)


def _failure(
    engine: ContextPrecisionEngine,
    event: RagEvent,
    line_no: int,
    kind: str,
    message: str,
    text: RecordText,
    *,
    decision: str = "failed",
    usage: JudgeUsage | None = None,
) -> dict[str, Any]:
    return failure_record(
        error_type=kind,
        message=f"line {line_no}: {message}",
        scale=engine.scale,
        k=len(event.contexts),
        decision=decision,
        usage=usage,
        **_event_fields(engine, event, line_no, text),
    )


def _event_fields(engine: ContextPrecisionEngine, event: RagEvent, line_no: int, text: RecordText) -> dict[str, Any]:
    """What the score record and the failure record of a parsed event share."""
    return {
        "record_id": _event_record_id(event, engine.fingerprint),
        "trace_id": event.trace_id,
        "span_id": event.span_id,
        "service": event.service,
        "retriever": event.retriever,
        "model": engine.model,
        "prompt_version": engine.prompt_version,
        "answer_source": "event" if event.output else "none",
        "timestamp": event.timestamp,
        "query": text.of(event.query),
        "line": line_no,
        "event_id": event.id,
    }


def _bad_input(engine: ContextPrecisionEngine, raw: RawEvent, problem: str, text: RecordText) -> dict[str, Any]:
    """The record of an event that could not be read or validated: what could be read of its ids
    and question is kept, so that it can still be joined to its trace and found."""
    trace_id, span_id, service, query, event_id = _loose_fields(raw.value)
    return failure_record(
        error_type="bad_input",
        message=f"line {raw.line_no}: {problem}",
        record_id=record_id(trace_id, span_id, engine.fingerprint, content=raw.text),
        trace_id=trace_id,
        span_id=span_id,
        service=service,
        scale=engine.scale,
        model=engine.model,
        prompt_version=engine.prompt_version,
        query=text.of(query),
        line=raw.line_no,
        event_id=event_id,
    )


def _loose_fields(obj: Any) -> tuple[str, str, str, str | None, str | None]:
    """Trace id, span id, service, question and id of an event that failed validation, when they
    are readable."""
    if not isinstance(obj, dict):
        return "", "", "", None, None
    fields, _ = resolve_aliases(obj)
    ids = [fields.get(name) for name in ("trace_id", "span_id", "service")]
    trace_id, span_id, service = (v if isinstance(v, str) else "" for v in ids)
    query = fields.get("query")
    return trace_id, span_id, service, query if isinstance(query, str) else None, _loose_id(fields.get("id"))


def _loose_id(value: Any) -> str | None:
    return str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else None


def _event_record_id(event: RagEvent, fingerprint: str) -> str:
    content = None
    if not event.trace_id and not event.span_id:
        content = json.dumps(
            [event.query, event.context_texts, event.output, event.expected_output], ensure_ascii=False
        )
    return record_id(event.trace_id, event.span_id, fingerprint, content=content)


# --- input, output, engine -------------------------------------------------------------------------


class RecordSink:
    """Writes records as JSON lines to a file or stdout; notices a closed pipe (`| head`)."""

    def __init__(self, stream: IO[str], *, owned: bool) -> None:
        self._stream = stream
        self._owned = owned
        self.broken = False

    def write(self, record: dict[str, Any]) -> bool:
        if self.broken:
            return False
        try:
            self._stream.write(json.dumps(record, ensure_ascii=False) + "\n")
        except BrokenPipeError:
            self.broken = True
            return False
        return True

    def close(self) -> None:
        try:
            if self._owned:
                self._stream.close()
            elif not self.broken:
                self._stream.flush()
        except BrokenPipeError:
            self.broken = True
        if self.broken and not self._owned:
            # Python would report the closed pipe again at exit; point stdout at nothing instead.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)


def _open_output(path: str | None, input_path: str | None = None) -> RecordSink:
    if path is None or path == "-":
        return RecordSink(sys.stdout, owned=False)
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise UsageError(f"-o {path}: the directory {directory} does not exist")
    if os.path.isdir(path):
        raise UsageError(f"-o {path}: is a directory")
    if os.path.exists(path) and input_path and os.path.samefile(path, input_path):
        raise UsageError(f"-o {path}: is the input file; writing would erase it")
    try:
        return RecordSink(open(path, "w", encoding="utf-8", buffering=1 << 16), owned=True)
    except OSError as exc:
        raise UsageError(f"-o {path}: cannot write ({exc.strerror or exc})") from None


def _build_engine(options: BatchOptions, observer: RequestObserver) -> ContextPrecisionEngine:
    try:
        judge = {"concurrency": options.concurrency, **options.judge}
        config = JudgeConfig(model=options.model, api_base=options.api_base, redact_pii=options.redact_pii, **judge)
        return build_engine(config, scale=options.scale, observer=observer)
    except ValueError as exc:
        raise UsageError(f"judge configuration: {exc}") from None


def _is_tty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class Progress:
    """One self-overwriting stderr line: count, rate and ETA. Redrawn at most 10 times a second."""

    def __init__(self, stream: IO[str], total: int | None) -> None:
        self._stream = stream
        self._total = total
        self._started = time.monotonic()
        self._drawn_at = 0.0
        self._done = 0

    def update(self, done: int) -> None:
        self._done = done
        now = time.monotonic()
        if now - self._drawn_at >= 0.1:
            self._drawn_at = now
            self._draw(now)

    def clear(self) -> None:
        """Blank the line so that other text can be written; the next update draws it again."""
        self._stream.write("\r\x1b[K")
        self._drawn_at = 0.0

    def finish(self) -> None:
        self._draw(time.monotonic())
        self._stream.write("\n")

    def _draw(self, now: float) -> None:
        elapsed = max(now - self._started, 1e-9)
        rate = self._done / elapsed
        if self._total:
            left = max(self._total - self._done, 0)
            eta = f"ETA {_duration(left / rate)}" if rate > 0 else "ETA --"
            width = 24
            filled = min(width, int(width * self._done / self._total))
            line = f"[{'#' * filled}{'.' * (width - filled)}] {self._done}/{self._total} {rate:.1f}/s {eta}"
        else:
            line = f"{self._done} scored {rate:.1f}/s"
        self._stream.write("\r" + line + "\x1b[K")
        self._stream.flush()


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"
