"""Diagnostics on live verdicts: which documents are noisy, which top-k is right, which slice of
traffic a precision drop comes from. Bounded memory throughout; see docs/DIAGNOSTICS.md."""
