"""`ctxprec demo`: the synthetic RAG app and a live terminal view of the sidecar scoring it."""
