"""The judge canary: a small set of samples with known verdicts, re-judged on a schedule, that
notices when the judge answers differently from how it answered at the baseline (a hosted model
updated behind the same name, a changed prompt or setting), so that a precision drop is not
blamed on the retriever for the judge's fault. See runner.py for the schedule, detector.py for
the rule, watch.py for what a change raises."""
