"""The judge: prompts, verdict parsing, caching, the LLM and local judges, and the chat transport."""
