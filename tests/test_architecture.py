"""The shape of the code: imports flow one way, and nothing imports itself in a circle.

Read from the source with `ast`, so that lazy (function-level) imports count too: a cycle that
only closes at run time is still a cycle for the next reader."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"scorer": "ctxprec.scorer", "collector": "ctxprec.collector"}


def _modules() -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for folder, package in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join((package, *parts))] = path
    return modules


def _imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the project modules it imports (a `from package import name` of a submodule
    counts as importing that submodule)."""
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets.add(node.module)
                targets.update(f"{node.module}.{alias.name}" for alias in node.names)
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    found: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                found.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return found


GRAPH = _imports(_modules())


def test_no_import_cycles() -> None:
    assert _cycles(GRAPH) == []


def test_the_scorer_library_knows_nothing_of_the_sidecar() -> None:
    offenders = {m: sorted(t for t in targets if t.startswith("ctxprec.collector"))
                 for m, targets in GRAPH.items() if m.startswith("ctxprec.scorer")}
    assert {m: t for m, t in offenders.items() if t} == {}


def test_results_flow_forward_assembly_sampling_and_scoring_know_no_exporter() -> None:
    early = ("ctxprec.collector.receivers", "ctxprec.collector.assembly", "ctxprec.collector.sampling",
             "ctxprec.collector.resolving", "ctxprec.collector.scoring")
    offenders = {m: sorted(t for t in targets if t.startswith("ctxprec.collector.exporters"))
                 for m, targets in GRAPH.items() if m.startswith(early)}
    assert {m: t for m, t in offenders.items() if t} == {}


def test_the_graph_is_read_at_all() -> None:
    # A broken reader would make the tests above pass vacuously.
    assert "ctxprec.collector.assembly.ingest" in GRAPH
    assert "ctxprec.collector.assembly.conventions" in GRAPH["ctxprec.collector.assembly.ingest"]
    assert len(GRAPH) > 60


# A stage's modules may use these of another stage's: shared data and protocols, never a stage
# itself (a stage is given its neighbours by the composition root).
STAGES = ("receivers", "assembly", "sampling", "resolving", "scoring", "exporters", "diagnostics", "cluster")
SHARED_ACROSS_STAGES = {
    "ctxprec.collector.metrics.registry",  # the one registry every stage counts in
    "ctxprec.collector.metrics.children",
    "ctxprec.collector.metrics.drift",  # the diagnostics read the drift monitor's alarms
    "ctxprec.collector.scoring.identity",  # exporters write the scorer's identity attributes
    "ctxprec.collector.sampling.sampler",  # the Kafka byte peek asks the gate's sampler (a Protocol)
    "ctxprec.collector.diagnostics.heavy_hitters",  # Space-Saving, a data structure: the activity log's top services
    "ctxprec.collector.assembly.specs",  # a resolver source's `when` matches as a mappings entry's does
}


def _stage(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 3 and parts[1] == "collector" and parts[2] in STAGES else None


def test_only_the_composition_root_wires_stages() -> None:
    """No stage imports another stage's modules (beyond the shared ones above): stages meet only
    in collector/pipeline.py, through the seams of collector/components.py."""
    offenders = {m: sorted(t for t in targets if _stage(t) not in (None, _stage(m)) and t not in SHARED_ACROSS_STAGES)
                 for m, targets in GRAPH.items() if _stage(m) is not None}
    assert {m: t for m, t in offenders.items() if t} == {}


def test_the_service_graph_is_declared_in_one_place() -> None:
    users = sorted(m for m, targets in GRAPH.items() if "ctxprec.collector.service_graph" in targets)
    assert users == ["ctxprec.collector.pipeline"]


def test_seams_and_the_lifecycle_are_declared_once() -> None:
    """The seams' Protocols live in components.py alone: no other module declares a Protocol
    under a seam's name."""
    import ctxprec.collector.components as components

    seams = {name for name, value in vars(components).items()
             if isinstance(value, type) and getattr(value, "_is_protocol", False)}
    assert {"Component", "TraceConsumer", "RetrievalSink", "ResultSink", "ScoringQueue"} <= seams
    doubles = []
    for name, path in _modules().items():
        if name == "ctxprec.collector.components":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and node.name in seams:
                doubles.append(f"{name}.{node.name}")
    assert doubles == []
