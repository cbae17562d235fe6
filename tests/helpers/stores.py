"""The real document stores the resolver tests and benchmark look documents up in, each started on
a free 127.0.0.1 port in a temporary directory and stopped at the end: PostgreSQL (a throwaway
cluster made with Debian's `initdb` and run with `pg_ctl`; `make test` installs the `postgresql`
package when missing), Chroma (`chroma run`) and Milvus Lite (`milvus-lite server`) from their
wheels in .venv-stores (built by `make test`). Redis is tests/helpers/redis_server.py.

`stop()` then `start()` again keeps the port and the data, as a store that goes away and comes
back would."""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers.processes import free_port, stop_process, wait_listening

ROOT = Path(__file__).resolve().parents[2]
STORES_BIN = ROOT / ".venv-stores" / "bin"
# PostgreSQL refuses to run as root: a root test run starts it as Debian's `postgres` user.
PG_USER = "postgres"


def _stores_binary(name: str) -> str:
    path = STORES_BIN / name
    if not path.exists():
        raise RuntimeError(f"{path} is missing: run `make test` (it builds the document stores' environment)")
    return str(path)


def pg_binary(name: str) -> str:
    """initdb / pg_ctl from PATH, else from Debian's versioned folder (not on PATH there)."""
    found = shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)),
                                       None)
    if found is None:
        raise RuntimeError(f"{name} is not installed: run `sh tests/install-system-deps.sh` (make test does)")
    return found


@dataclass
class PostgresServer:
    """A throwaway cluster: trust for the superuser over the local socket, passwords (SCRAM) over
    TCP, so that a test connects as a reader with a password, as a deployment would. Its folder is
    a fresh one under the system's temporary directory (the `postgres` user must reach it, which
    it cannot inside pytest's private one); `remove()` deletes it."""

    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="ctxprec-pg-")))
    port: int = 0
    superuser: str = "ctxprec"
    _as_root: bool = field(default=False, init=False)

    @property
    def data(self) -> Path:
        return self.root / "data"

    def _run(self, *args: str) -> subprocess.CompletedProcess[bytes]:
        user = PG_USER if self._as_root else None
        return subprocess.run(list(args), user=user, capture_output=True, timeout=60, check=False)

    def start(self) -> None:
        self._as_root = os.geteuid() == 0
        self.root.mkdir(parents=True, exist_ok=True)
        if self._as_root:
            entry = pwd.getpwnam(PG_USER)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        if not self.data.exists():
            done = self._run(pg_binary("initdb"), "-D", str(self.data), "-U", self.superuser, "--auth-local=trust",
                             "--auth-host=scram-sha-256", "-E", "UTF8", "--no-sync")
            if done.returncode != 0:
                raise RuntimeError(f"initdb failed: {done.stderr.decode(errors='replace')[-2000:]}")
        self.port = self.port or free_port()
        options = f"-h 127.0.0.1 -p {self.port} -k {self.root} -F -c fsync=off"
        done = self._run(pg_binary("pg_ctl"), "-D", str(self.data), "-l", str(self.root / "log"), "-o", options,
                         "-w", "-t", "30", "start")
        if done.returncode != 0:
            raise RuntimeError(f"pg_ctl start failed; see {self.root / 'log'}: {done.stderr.decode(errors='replace')}")

    def stop(self) -> None:
        if self.data.exists():
            self._run(pg_binary("pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def dsn(self, user: str, database: str = "postgres") -> str:
        return f"postgresql://{user}@127.0.0.1:{self.port}/{database}"

    @property
    def socket_dir(self) -> str:
        return str(self.root)


@dataclass
class _WheelServer:
    """A server from a wheel of .venv-stores, on a free 127.0.0.1 port, its data under `root`."""

    root: Path
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        raise NotImplementedError

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        name = self.command()[0].rpartition("/")[2]
        log_path = self.root / f"{name}.log"
        with open(log_path, "ab") as log:
            # Chroma's product telemetry off (the server has none to send here anyway: no network).
            self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                         env={**os.environ, "ANONYMIZED_TELEMETRY": "False"})
        wait_listening(self.proc, self.port, name=name, log_path=log_path, timeout_s=60)

    def stop(self) -> None:
        stop_process(self.proc)
        self.proc = None


class ChromaServer(_WheelServer):
    def command(self) -> list[str]:
        return [_stores_binary("chroma"), "run", "--path", str(self.root / "data"), "--host", "127.0.0.1",
                "--port", str(self.port)]


class MilvusLiteServer(_WheelServer):
    @property
    def uri(self) -> str:
        return self.url

    def command(self) -> list[str]:
        return [_stores_binary("milvus-lite"), "server", "--data-dir", str(self.root / "data"), "--host", "127.0.0.1",
                "--port", str(self.port)]


# -- the documents each store holds, as an app's own store would -----------------------------------

Document = tuple[str, str, list[float]]  # id, text, embedding


async def seed_postgres(server: PostgresServer, documents: list[Document], *, reader: str = "reader",
                        password: str = "reader-secret") -> None:
    """Table `documents(id text, content text)`, readable by `reader` (password over TCP)."""
    import asyncpg

    connection = await asyncpg.connect(host=server.socket_dir, port=server.port, user=server.superuser,
                                       database="postgres")
    try:
        await connection.execute(f"DROP TABLE IF EXISTS documents; CREATE TABLE documents (id text PRIMARY KEY, "
                                 f"content text NOT NULL); DROP ROLE IF EXISTS {reader}; "
                                 f"CREATE ROLE {reader} LOGIN PASSWORD '{password}'; "
                                 f"GRANT SELECT ON documents TO {reader}")
        await connection.executemany("INSERT INTO documents VALUES ($1, $2)", [(i, t) for i, t, _ in documents])
    finally:
        await connection.close()


def seed_redis(url: str, documents: list[Document]) -> None:
    """Each text under `doc:{id}` (a string) and in field `text` of the hash `kb:{id}`."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        pipeline = client.pipeline()
        for doc_id, text, _ in documents:
            pipeline.set(f"doc:{doc_id}", text)
            pipeline.hset(f"kb:{doc_id}", mapping={"text": text, "source": "kb"})
        pipeline.execute()
    finally:
        client.close()


def seed_chroma(server: ChromaServer, collection: str, documents: list[Document]) -> None:
    import chromadb
    from chromadb.config import Settings

    client = chromadb.HttpClient(host="127.0.0.1", port=server.port, settings=Settings(anonymized_telemetry=False))
    if collection in [c.name for c in client.list_collections()]:
        client.delete_collection(collection)
    created = client.create_collection(collection, embedding_function=None)
    for start in range(0, len(documents), 500):
        part = documents[start:start + 500]
        created.add(ids=[i for i, _, _ in part], documents=[t for _, t, _ in part], embeddings=[e for _, _, e in part])


def seed_milvus(server: MilvusLiteServer, collection: str, documents: list[Document]) -> None:
    """A collection with the primary key `id` (text), the field `text` and a vector."""
    from pymilvus import DataType, MilvusClient

    client = MilvusClient(uri=server.uri)
    try:
        if client.has_collection(collection):
            client.drop_collection(collection)
        schema = client.create_schema(auto_id=False)
        schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=128)
        schema.add_field("text", DataType.VARCHAR, max_length=8192)
        schema.add_field("vector", DataType.FLOAT_VECTOR, dim=len(documents[0][2]))
        index = client.prepare_index_params()
        index.add_index("vector", index_type="FLAT", metric_type="IP")
        client.create_collection(collection, schema=schema, index_params=index)
        for start in range(0, len(documents), 500):
            client.insert(collection, [{"id": i, "text": t, "vector": e} for i, t, e in documents[start:start + 500]])
    finally:
        client.close()
