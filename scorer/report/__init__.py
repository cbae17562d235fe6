"""`ctxprec report SCORES.jsonl -o REPORT.html`: score records as one self-contained HTML page.
Exit status: 0 written, 1 no score records in the input (the page says so), 2 usage error."""
from __future__ import annotations

import argparse
import os
import sys

from ctxprec.scorer.labels import agreement_of
from ctxprec.scorer.report.load import LoadedRecords, load_records
from ctxprec.scorer.report.render_judge import judge_agreement_section, judge_of_record
from ctxprec.scorer.report.render import render_report
from ctxprec.scorer.report.stats import ReportData, compute

MAX_LABELS_BYTES = 256 * 1024 * 1024

__all__ = ["add_arguments", "run", "build_report", "load_records", "compute", "render_report"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scores", metavar="SCORES.jsonl", help="score records written by 'ctxprec score' or the sidecar")
    parser.add_argument("-o", "--output", metavar="REPORT.html", required=True, help="where to write the HTML report")
    parser.add_argument("--labels", metavar="LABELS.jsonl", default=None,
                        help="people's labels ({trace_id, span_id, relevant}, one JSON object a line): the report "
                             "shows the judge's agreement with them (Cohen's kappa with its 95%% interval, "
                             "precision, recall, confusion counts); default: none")


def build_report(path: str, labels_path: str | None = None) -> tuple[str, LoadedRecords, ReportData]:
    with open(path, "rb") as stream:
        loaded = load_records(stream)
    data = compute(loaded.records)
    judge_section = ""
    if labels_path is not None:
        with open(labels_path, "rb") as stream:
            lines = stream.read(MAX_LABELS_BYTES).splitlines()
        agreement = agreement_of(loaded.records, lines, judge_of_record)
        judge_section = judge_agreement_section(agreement, labels_path)
    return render_report(path, loaded, data, judge_section), loaded, data


def run(args: argparse.Namespace) -> int:
    source, target = args.scores, args.output
    if os.path.isdir(source):
        return _usage(f"{source}: is a directory, expected a JSONL file of score records")
    if not os.path.exists(source):
        return _usage(f"{source}: no such file")
    labels = getattr(args, "labels", None)
    if labels is not None and not os.path.isfile(labels):
        return _usage(f"--labels {labels}: no such file")
    directory = os.path.dirname(os.path.abspath(target))
    if not os.path.isdir(directory):
        return _usage(f"-o {target}: the directory {directory} does not exist")
    try:
        html, loaded, data = build_report(source, labels)
    except OSError as exc:
        return _usage(f"{exc.filename or source}: cannot read ({exc.strerror or exc})")
    try:
        with open(target, "w", encoding="utf-8") as out:
            out.write(html)
    except OSError as exc:
        return _usage(f"-o {target}: cannot write ({exc.strerror or exc})")
    if loaded.problem_count:
        first = loaded.problems[0]
        sys.stderr.write(f"ctxprec report: skipped {loaded.problem_count} line(s) that are not score records (first: {first})\n")
    if not loaded.records:
        # Nothing to report is a failure a script must see (a wrong path, the events file instead
        # of the scores); the page is still written so that a published link says why.
        read = f"{loaded.lines} line(s) read" if loaded.lines else "the file is empty"
        sys.stderr.write(
            f"ctxprec report: error: no score records in {source} ({read}); make them with "
            f"'ctxprec score EVENTS -o SCORES.jsonl'. Wrote {target}, which says so.\n"
        )
        return 1
    sys.stderr.write(f"ctxprec report: {data.total} records ({data.scored} scored, {data.failed} failed) -> {target}\n")
    return 0


def _usage(message: str) -> int:
    sys.stderr.write(f"ctxprec report: error: {message}\n")
    return 2
