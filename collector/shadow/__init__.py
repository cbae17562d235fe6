"""The shadow judge: a candidate judge that judges a share of the sampled retrievals beside the
live one, so that a user switches judges knowing how far the two agree (shadow.py)."""
