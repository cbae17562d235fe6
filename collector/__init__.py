"""The ctxprec sidecar: receivers -> assembly -> sampling -> scoring -> exporters."""
if __name__ != "ctxprec.collector":
    # The folder is installed as ctxprec.collector. Loaded under another name (the repository root on
    # sys.path) it would be a second copy with its own module state; refuse instead.
    raise ImportError(f"import ctxprec.collector, not {__name__} (this folder is the package ctxprec.collector)")
