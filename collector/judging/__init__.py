"""How far to trust the judge: people's labels matched to the judge's verdicts, and the judge's
agreement with them (or a shadow judge's with the live one), per judge fingerprint. See
docs/JUDGES.md, "How far to trust the judge"."""
