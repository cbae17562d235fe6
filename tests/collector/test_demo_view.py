"""The demo's view: a drift alarm that clears because the baseline moved to the new level reads as
an adaptation, not a recovery; a drift shows its drop as everywhere else; the sample rate shows per
service, raised ones highlighted; the diagnostics lines show on the terminal and now and then in
the plain view."""
from __future__ import annotations

from ctxprec.collector.demo.view import ServiceRow, Snapshot, rate_text, render
from ctxprec.scorer.drift import Drift, DriftEnd


def _row(service: str, *, rate: float = 0.1, drift: bool = False, adapted: bool = False) -> ServiceRow:
    return ServiceRow(service=service, sent=100, scored=10, failed=0, window=0.45, recent=0.44, baseline=0.42,
                      drift=Drift(0.9134, 0.4447) if drift else None, rate=rate, base_rate=0.1, adapted=adapted)


def _snapshot(rows: list[ServiceRow], *, show_diagnostics: bool = True) -> Snapshot:
    return Snapshot(elapsed=70.0, duration=90.0, metrics_url="http://127.0.0.1:9464", degrade_service="support-bot",
                    degrade_after=25.0, degraded_at=25.0, rows=rows, decisions={"evaluated": 10},
                    events=["[ 68.6s] support-bot: baseline adapted to 0.42"],
                    diagnostics=["noisy documents support-bot/kb-vector: support-bot/noise/newsletter (9x irrelevant)"],
                    show_diagnostics=show_diagnostics)


def test_a_baseline_that_moved_to_the_new_level_is_an_adaptation() -> None:
    ended = DriftEnd(Drift(0.93, 0.46), baseline=0.42, recent=0.44)
    assert ended.adapted
    assert ended.words("support-bot") == ("precision drift in service 'support-bot' ended: the baseline adapted to "
                                          "0.42 (it was 0.93 before the drift): a new normal, not a recovery")


def test_precision_back_at_its_old_level_is_a_recovery() -> None:
    ended = DriftEnd(Drift(0.93, 0.60), baseline=0.88, recent=0.91)
    assert not ended.adapted
    assert ended.words("support-bot") == ("precision drift in service 'support-bot' ended: precision is back to "
                                          "0.91 (baseline 0.88)")


def test_a_drift_is_told_with_the_drop_between_its_printed_levels() -> None:
    # 0.9134 and 0.4447 print as 0.91 and 0.44: the drop is 0.47, not the 0.4687 between the raw values.
    assert Drift(0.9134, 0.4447).words("support-bot") == "precision drift in service 'support-bot': 0.91 -> 0.44 (drop 0.47)"
    assert Drift(0.5, 0.81).levels() == "0.50 -> 0.81 (rise 0.31)"


def test_the_terminal_view_shows_rates_states_and_diagnostics() -> None:
    text = render(_snapshot([_row("support-bot", rate=0.5, adapted=True), _row("docs-search")]), tty=True)
    support = next(line for line in text.splitlines() if line.startswith("support-bot "))
    docs = next(line for line in text.splitlines() if line.startswith("docs-search"))
    assert "\x1b[1;33m   50%\x1b[0m" in support and "adapted" in support and "stable" not in support
    assert "10%" in docs and "stable" in docs
    assert "noisy documents support-bot/kb-vector" in text and "baseline adapted to 0.42" in text
    assert "/90s (Ctrl-C ends it early)" in text


def test_the_plain_view_prints_the_diagnostics_only_when_asked() -> None:
    rows = [_row("support-bot", drift=True, rate=0.5), _row("docs-search", adapted=True)]
    plain = render(_snapshot(rows, show_diagnostics=False), tty=False)
    assert "rate  50% " in plain and "drift DRIFT (drop 0.47)" in plain and plain.rstrip().endswith("drift adapted")
    assert "noisy documents" not in plain
    assert "noisy documents" in render(_snapshot(rows), tty=False)


def test_rates_read_as_percentages() -> None:
    assert [rate_text(r) for r in (1.0, 0.1, 0.5, 0.005, None)] == ["100%", "10%", "50%", "0.5%", "--"]
