"""A real Arize Phoenix server for tests, and a small client for its REST and GraphQL APIs.

    server = PhoenixServer()
    server.start()                          # about 12 s on this machine (fresh SQLite + migrations)
    ... export OTLP to server.otlp_http_traces_url or 127.0.0.1:server.grpc_port ...
    client = PhoenixClient(server.url)
    spans = client.wait_for_spans("shop-rag", lambda s: s["name"] == "retrieve")
    server.stop()

Phoenix lives in its own venv (.venv-phoenix, made by `make test`) because it pins many
libraries of its own; the tests only talk to it over HTTP/gRPC, never import it.

Phoenix is eventually consistent: it answers an OTLP export or an annotation POST before what was
sent is readable. Every read a test makes after a write goes through `poll`, which reads again
until the answer is the expected one or the deadline passes; reads of what is not stored yet
answer empty (the client turns Phoenix's "not found" into []), never fail the test early.
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from tests.helpers.processes import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
PHOENIX_VENV = REPO_ROOT / ".venv-phoenix"
# Keep in step with the Makefile target that installs it.
PHOENIX_VERSION = "20.26.1"

# Settings that keep Phoenix hermetic: with these it opens no connection off this machine
# (checked with strace under `unshare -rn`). Without them it tries, at startup, to download a
# WASM sandbox binary and to reach a hosted docs MCP server (both fail soft but cost time).
_OFFLINE_ENV = {
    "PHOENIX_TELEMETRY_ENABLED": "false",
    "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
    "PHOENIX_DISABLE_AGENT_ASSISTANT": "true",
    "PHOENIX_ALLOWED_SANDBOX_PROVIDERS": "NONE",
    "PHOENIX_ENABLE_MCP_SERVER": "false",
    # Migrations otherwise echo every SQL statement (~4,000 lines) into the log.
    "PHOENIX_LOG_MIGRATIONS": "false",
}


# The server is always on loopback: never route these requests through an http_proxy from the env.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class PhoenixNotInstalled(RuntimeError):
    pass


def phoenix_executable(venv: Path = PHOENIX_VENV) -> Path:
    exe = venv / "bin" / "phoenix"
    if not exe.is_file():
        raise PhoenixNotInstalled(
            f"Phoenix is not installed: {exe} is missing. Run `make test` (it installs "
            f"arize-phoenix=={PHOENIX_VERSION} into {venv.name}) and try again."
        )
    return exe


class PhoenixServer:
    """One `phoenix serve` subprocess with all its state in a temporary folder."""

    def __init__(
        self,
        venv: Path = PHOENIX_VENV,
        startup_timeout: float = 90.0,
        extra_env: Mapping[str, str] | None = None,
    ) -> None:
        self._exe = phoenix_executable(venv)
        self._startup_timeout = startup_timeout
        self._extra_env = dict(extra_env or {})
        self._proc: subprocess.Popen[bytes] | None = None
        self._tmp: Path | None = None
        self._port = 0
        self._grpc_port = 0
        self.startup_seconds: float | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    @property
    def otlp_http_traces_url(self) -> str:
        return f"{self.url}/v1/traces"

    @property
    def grpc_port(self) -> int:
        return self._grpc_port

    @property
    def log_path(self) -> Path:
        assert self._tmp is not None, "server not started"
        return self._tmp / "phoenix.log"

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except (OSError, AssertionError):
            return ""

    def _env(self, tmp: Path) -> dict[str, str]:
        # Drop the caller's PHOENIX_*/OTEL_* settings: a developer's PHOENIX_API_KEY, collector
        # endpoint or OTEL_EXPORTER_* would change how the server behaves or where it reports.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PHOENIX_", "OTEL_"))}
        env.update(_OFFLINE_ENV)
        env.update(
            PHOENIX_HOST="127.0.0.1",
            PHOENIX_PORT=str(self._port),
            PHOENIX_GRPC_PORT=str(self._grpc_port),
            PHOENIX_WORKING_DIR=str(tmp / "working"),
            # Phoenix writes a pid file under tempfile.gettempdir() and some libraries read
            # ~ or ~/.cache; point them all inside our folder so nothing leaks between runs.
            TMPDIR=str(tmp / "tmp"),
            HOME=str(tmp / "home"),
            XDG_CACHE_HOME=str(tmp / "home" / ".cache"),
            PYTHONUNBUFFERED="1",
        )
        env.update(self._extra_env)
        return env

    def start(self) -> None:
        """Launch and wait for /healthz. On failure the temp folder (with the log) is kept."""
        if self._proc is not None:
            raise RuntimeError("already started")
        self._tmp = Path(tempfile.mkdtemp(prefix="phoenix-"))
        for sub in ("working", "tmp", "home"):
            (self._tmp / sub).mkdir()
        # Free ports can be taken between our probe and Phoenix's bind; retry a few times.
        last_error = ""
        for _ in range(3):
            self._port, self._grpc_port = free_port(), free_port()
            if self._launch_and_wait():
                return
            last_error = self.log_tail()
            if not any(m in last_error.lower() for m in ("address already in use", "failed to bind")):
                break
        self.stop()
        raise RuntimeError(f"Phoenix did not start; last log lines:\n{last_error}")

    def _launch_and_wait(self) -> bool:
        assert self._tmp is not None
        began = time.monotonic()
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                [str(self._exe), "serve"],
                env=self._env(self._tmp),
                cwd=self._tmp,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C in pytest must not reach it before stop()
            )
        deadline = began + self._startup_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                self._proc = None
                return False
            try:
                # /healthz answers only after the ASGI lifespan finished, which is also
                # when the gRPC receiver has been started.
                with _OPENER.open(f"{self.url}/healthz", timeout=2) as resp:
                    if resp.status == 200:
                        self.startup_seconds = time.monotonic() - began
                        return True
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.2)
        tail = self.log_tail()
        self.stop()
        raise TimeoutError(f"Phoenix not ready after {self._startup_timeout:.0f}s; log:\n{tail}")

    def stop(self, timeout: float = 20.0) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=timeout)

    def cleanup(self) -> None:
        """stop() and remove the temporary folder, log included."""
        self.stop()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> PhoenixServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


@dataclass(frozen=True)
class HttpResult:
    status: int
    body: Any  # parsed JSON when the answer is JSON, else text

    def json(self) -> Any:
        if self.status >= 400:
            raise AssertionError(f"HTTP {self.status}: {self.body!r}")
        return self.body


class PhoenixClient:
    """Blocking HTTP client (stdlib only, so it works from sync tests and fixtures)."""

    def __init__(self, base_url: str, api_key: str | None = None, timeout: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._timeout = timeout
        self._headers = {"Accept": "application/json"}
        if api_key:
            # Phoenix takes API keys (and PHOENIX_ADMIN_SECRET) as a bearer token.
            self._headers["Authorization"] = f"Bearer {api_key}"

    def request(
        self,
        method: str,
        path: str,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
    ) -> HttpResult:
        """Any call; never raises on an HTTP error status, so tests can assert on 404/422."""
        url = self.base_url + path
        if params:
            # doseq: list filters are repeated keys (?span_ids=a&span_ids=b), as Phoenix expects.
            url += "?" + urllib.parse.urlencode(params, doseq=True)
        data = None if body is None else json.dumps(body).encode()
        headers = dict(self._headers)
        if data is not None:
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with _OPENER.open(req, timeout=self._timeout) as resp:
                return HttpResult(resp.status, _decode(resp.read(), resp.headers.get_content_type()))
        except urllib.error.HTTPError as err:
            return HttpResult(err.code, _decode(err.read(), err.headers.get_content_type()))

    def _paged(self, path: str, params: dict[str, Any], missing_ok: bool = False) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            page = self.request("GET", path, {**params, **({"cursor": cursor} if cursor else {})})
            if missing_ok and page.status == 404:
                return rows
            rows.extend(page.json()["data"])
            cursor = page.body.get("next_cursor")
            if not cursor:
                return rows

    def list_projects(self) -> list[dict[str, Any]]:
        """[{"name", "description", "id"}]; Phoenix always has "default"."""
        return self._paged("/v1/projects", {"limit": 100})

    def spans(self, project: str, **filters: Any) -> list[dict[str, Any]]:
        """All spans of a project (name or GlobalID), following next_cursor.

        Filters are the endpoint's query parameters, e.g. span_id=[...], trace_id=[...],
        name=[...], span_kind=["RETRIEVER"]. A project that does not exist yet answers 404,
        which this returns as [] because a test polling for its first span expects that.
        """
        path = f"/v1/projects/{urllib.parse.quote(project, safe='')}/spans"
        return self._paged(path, {"limit": 1000, **filters}, missing_ok=True)

    def wait_for_spans(
        self,
        project: str,
        match: Callable[[dict[str, Any]], bool] = lambda _: True,
        count: int = 1,
        timeout: float = 30.0,
        **filters: Any,
    ) -> list[dict[str, Any]]:
        """Poll until `count` spans of `project` (narrowed by `filters`, as in spans()) satisfy
        `match`. Needed because Phoenix answers an OTLP export before it has stored the spans."""
        deadline = time.monotonic() + timeout
        found: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            found = [s for s in self.spans(project, **filters) if match(s)]
            if len(found) >= count:
                return found
            time.sleep(0.25)
        raise TimeoutError(f"{len(found)}/{count} matching spans in project {project!r} after {timeout}s")

    def span_annotations(self, project: str, span_ids: Iterable[str]) -> list[dict[str, Any]]:
        """Annotations on these spans: [{"id", "name", "span_id", "annotator_kind",
        "result": {"label", "score", "explanation"}, "metadata", "identifier", "source", ...}].
        Phoenix answers 404 ("None of the supplied span_ids exist in this project") while none of
        the spans is stored yet: that reads as no annotations, for a poll to try again."""
        ids = list(span_ids)
        if not ids:
            return []
        path = f"/v1/projects/{urllib.parse.quote(project, safe='')}/span_annotations"
        return self._paged(path, {"span_ids": ids, "limit": 1000}, missing_ok=True)

    def document_annotations(self, span_ids: Iterable[str]) -> dict[str, list[dict[str, Any]]]:
        """Document annotations by span id. Phoenix 20.x has no REST endpoint that reads them
        (only POST /v1/document_annotations), so this asks GraphQL for each span."""
        out: dict[str, list[dict[str, Any]]] = {}
        for span_id in span_ids:
            data = self.graphql(_DOCUMENT_ANNOTATIONS_QUERY, {"spanId": span_id})
            span = data["getSpanByOtelId"]
            out[span_id] = [] if span is None else list(span["documentEvaluations"])
        return out

    def graphql(self, query: str, variables: Mapping[str, Any] | None = None) -> dict[str, Any]:
        result = self.request("POST", "/graphql", body={"query": query, "variables": dict(variables or {})})
        payload = result.json()
        if payload.get("errors"):
            raise AssertionError(f"GraphQL errors: {payload['errors']}")
        return dict(payload["data"])


async def poll(read: Callable[[], Any], done: Callable[[Any], bool], timeout: float, what: str) -> Any:
    """Calls the blocking `read` (in a thread) until `done(result)`, at most `timeout` seconds;
    the assertion names `what` and the last result."""
    deadline = time.monotonic() + timeout
    while True:
        result = await asyncio.to_thread(read)
        if done(result):
            return result
        assert time.monotonic() < deadline, f"timed out after {timeout:g} s waiting for {what}: {result!r}"[:2000]
        await asyncio.sleep(0.25)


_DOCUMENT_ANNOTATIONS_QUERY = """
query DocumentAnnotations($spanId: String!) {
  getSpanByOtelId(spanId: $spanId) {
    documentEvaluations {
      id name annotatorKind label score explanation metadata identifier documentPosition source
    }
  }
}
"""


def _decode(raw: bytes, content_type: str) -> Any:
    text = raw.decode("utf-8", errors="replace")
    if content_type == "application/json" and text:
        return json.loads(text)
    return text
