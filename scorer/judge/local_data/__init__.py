"""The local judge's word lists, one data file per language (read by local_words.py)."""
