"""docs/CONFIG.md, generated from the config models, so the reference cannot drift from the code.

    python -m ctxprec.collector.config_docs            # rewrite docs/CONFIG.md
    python -m ctxprec.collector.config_docs --check    # exit 1 when docs/CONFIG.md is out of date
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ctxprec.collector.config import (
    DEPRECATED_FLAGS,
    ENV_PREFIX,
    SETTINGS,
    ServeConfig,
    Setting,
    _shown,
    env_name,
)
from ctxprec.collector.generated_docs import write_or_check
from ctxprec.collector.resolving.config import sources_reference

PATH = Path(__file__).resolve().parents[1] / "docs" / "CONFIG.md"

INTRO = f"""# Configuration of `ctxprec serve`

Generated from the settings' declarations by `python -m ctxprec.collector.config_docs`; a test
fails when this page and the code disagree.

Every setting is a key of the YAML file given with `--config FILE` (or `{ENV_PREFIX}CONFIG`), written
as its section and name (`sampling.default_rate` is `default_rate:` under `sampling:`). Most also
have a flag, and every flag reads `{ENV_PREFIX}<FLAG>` from the environment (`--sample-rate` is
`{ENV_PREFIX}SAMPLE_RATE`). **Flags win over the environment, the environment over the file.** A bad
value is refused at start with one line that names the key and where the value came from, e.g.
`config key sampling.default_rate (from --sample-rate): must be between 0 and 1, got '2'`; an
unknown key names the key it most likely meant.

```yaml
receivers:
  otlp_http: 0.0.0.0:4318
judge:
  model: openai/gpt-4o-mini
sampling:
  default_rate: 0.05
  rules:
    - {{service: checkout-*, rate: 0.2}}
    - {{attributes: {{retriever: kb-v2}}, rate: 0.5}}
export:
  forward_to: http://otel-collector:4318
```

Values: `HOST:PORT` listen addresses take `off` to disable a listener; numbers marked `|off` take
`off` for "no limit"; switches take true/false, yes/no, on/off or 1/0 (a switch flag given alone is
true); durations are seconds.
"""

STRUCTURES = """## Structured keys (YAML only)

- `sampling.rules`: a list, first match wins; each rule has `rate` (0..1), optional `service`
  (a name or a glob such as `checkout-*`) and optional `attributes` (span attributes that must all
  be equal, compared as text). A retrieval that no rule matches gets `sampling.default_rate`. A
  rule with rate 0 excludes on purpose: its retrievals are decided `filtered`.
- `conventions.order`: the conventions tried per span and per nest of spans; of the spans of one
  nest (one inside the other), the first in this list that finds documents reads the retrieval.
  Names: the built-in conventions `openinference`, `genai`, `openllmetry`, `mastra`, `tool` (see
  FORMATS.md, "Span attributes read"), `mapping` (the single `conventions.mapping`), the `name`
  of a `conventions.mappings` entry, and `mappings`, which stands for every entry not named on
  its own. The default puts `mappings` first (your own shapes win) and `mapping` last. A given
  order must name every entry (or `mappings`); a convention left out is not read.
- `conventions.mappings`: your own span attributes, for the spans that match `when`; a list of
  `{name, when, query, contexts, ids, output}`. `when` maps span attributes (or `span.name`) to a
  value or a list of values, all of which must match (compared as text); only those spans are
  read by the entry, and each of them is a retrieval (with no documents found: `no_contexts`),
  even one that builds an index. `query`, `contexts`, `ids` and `output` as in `mapping`; an
  entry may leave `contexts` out: with `ids` its documents are known by id only (their text is
  looked up by a `resolver` source), with neither it gives the query of the retrieval nested in
  the spans it matches (content capture off, the app records the question on a span of its own):
  ```yaml
  conventions:
    mappings:
      - name: retrieve-step
        when: {mastra.workflow_step.step_id: retrieve}
        query: mastra.workflow_step.input$.question
        contexts: mastra.workflow_step.output$.documents[*].text
        ids: mastra.workflow_step.output$.documents[*].id
  ```
- `conventions.mapping`: your own span attributes, read on every span that has the `query`
  attribute and the `contexts` (a JSON path must reach a list): `query` (an attribute key, or
  `key$json.path`), `contexts` (a key holding a list or JSON list, a `key$json.path` such as
  `app.hits$.documents[*].text`, or a per-item pattern such as `app.docs.{i}.text`), optional
  `ids` (the documents' ids, in the same forms) and optional `output` (the answer).
- `conventions.tools`: agent tool calls (OpenTelemetry GenAI `execute_tool` spans, OpenInference
  `TOOL` spans) are read as retrievals when their result is a list of documents (`mode: auto`);
  `mode: off` reads none. `include` and `exclude` are lists of tool names or globs: a tool in
  `include` is taken whatever its result's shape (a text, an object of another shape), one in
  `exclude` never; a tool in neither is taken by its result's shape. Tools seen and not taken are
  counted and listed (METRICS.md, DIAGNOSTICS.md):
  ```yaml
  conventions:
    tools:
      include: [kb_lookup]
      exclude: [list_*]
  ```
- `export.sinks`: a list of `KIND=URL` (`- phoenix=http://phoenix:6006`), or of one-key mappings
  (`- langfuse: https://cloud.langfuse.com`); `CTXPREC_SINK` takes them separated by commas or
  spaces; each `--sink` flag adds one. See PHOENIX.md and LANGFUSE.md.
- `export.forward_headers`: a list of `NAME=VALUE`, or a mapping of names to values;
  `CTXPREC_FORWARD_HEADER` takes them separated by commas; each `--forward-header` adds one.
  `$VAR` or `${VAR}` in a value is read from the environment (`Authorization=Bearer ${KEY}`), a
  value `@/path/file` from a file (trailing newlines removed); `\\$` is a literal `$` and a
  leading `\\@` a literal `@`; a missing variable or file stops the start.
"""
RESOLVER_EXAMPLE = """
  ```yaml
  resolver:
    sources:
      - name: kb
        kind: postgres
        when: {service.name: support-bot}
        dsn: postgresql://reader@db:5432/kb
        password_env: KB_DB_PASSWORD
        query: SELECT id, content FROM documents WHERE id = ANY($1)
  ```
  One example per kind, and what each instrumentor writes with content capture off, are in
  FORMATS.md, "Traces without document text".
"""


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|")


def _row(setting: Setting) -> str:
    default = setting.default
    if setting.secret:
        shown = "none" if not default else "(set)"
    elif default is None:
        shown = "none"
    elif isinstance(default, (list, tuple)) and not (isinstance(default, tuple) and len(default) == 2
                                                      and isinstance(default[1], int)):
        shown = ", ".join(map(str, default)) or "(empty)"
    else:
        shown = _shown(default)
    flag = f"`{setting.flag}`" if setting.flag else ""
    env = f"`{setting.env}`" if setting.env else ""
    meaning = setting.help
    if setting.choices:
        meaning += f" (one of: {', '.join(map(str, setting.choices))})"
    return f"| `{setting.key}` | {flag} | {env} | `{_cell(shown)}` | {_cell(meaning)} |"


def render() -> str:
    parts = [INTRO]
    sections: dict[str, list[Setting]] = {}
    for setting in SETTINGS:
        sections.setdefault(setting.path[0] if len(setting.path) > 1 else "", []).append(setting)
    fields = ServeConfig.model_fields
    for section, members in sections.items():
        title = f"## `{section}`: {fields[section].description}" if section else "## Top level"
        parts.append(title + "\n")
        parts.append("| key | flag | environment | default | meaning |\n|---|---|---|---|---|")
        parts.extend(_row(member) for member in members)
        parts.append("")
    parts.append(STRUCTURES + sources_reference() + RESOLVER_EXAMPLE)
    deprecated = [f"- `{flag}` (`{env_name(flag)}`): use `{next(s.flag for s in SETTINGS if s.path == path)}`."
                  for flag, path in DEPRECATED_FLAGS.items()]
    parts.append("## Deprecated spellings\n\nStill accepted, with a note on stderr:\n\n" + "\n".join(deprecated) + "\n")
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    return write_or_check(PATH, render, "ctxprec.collector.config_docs", __doc__, argv)


if __name__ == "__main__":
    raise SystemExit(main())
