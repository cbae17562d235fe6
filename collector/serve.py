"""`ctxprec serve`: the sidecar's entry point.

`add_arguments(parser)` and `run(args) -> int` are what the CLI calls; `serve(config, ...)` runs
the pipeline in an already running event loop (tests, the demo) until `stop` is set or, when run
from `run`, until SIGTERM or SIGINT, then shuts down gracefully. A bad configuration exits with
status 2 and one line that names the key, never a traceback.
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import signal
import sys
from typing import Callable

from ctxprec.collector import config as config_module
from ctxprec.collector.config import NO_JUDGE_WARNING, ConfigError, ServeConfig
from ctxprec.collector.pipeline import Pipeline

log = logging.getLogger("ctxprec.serve")


# The config loader reads CTXPREC_* itself (it names the variable in its errors); the CLI must not
# turn them into flag defaults as it does for the other commands.
READS_OWN_ENVIRONMENT = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    config_module.add_arguments(parser)
    parser.epilog = config_module.describe_help()


def _describe(pipeline: Pipeline) -> str:
    c = pipeline.config
    parts = []
    if pipeline.otlp_grpc_port is not None and c.receivers.otlp_grpc is not None:
        parts.append(f"OTLP/gRPC {c.receivers.otlp_grpc[0]}:{pipeline.otlp_grpc_port}")
    if pipeline.otlp_http_port is not None and c.receivers.otlp_http is not None:
        parts.append(f"OTLP/HTTP {c.receivers.otlp_http[0]}:{pipeline.otlp_http_port}")
    if c.kafka.enabled:
        parts.append(f"Kafka {c.kafka.topic} ({c.kafka.format})")
    if pipeline.metrics_server is not None:
        parts.append(f"metrics {pipeline.metrics_server.host}:{pipeline.metrics_server.port}")
    forward_to = c.export.forward_to
    out = f"write-back {c.write_back} to {forward_to}" if forward_to else "no OTLP write-back (--forward-to unset)"
    if c.export.forward_headers:  # names only: values are credentials
        out += f" with header{'s' if len(c.export.forward_headers) > 1 else ''} " + ", ".join(
            name for name, _ in c.export.forward_headers)
    sinks = f"; sinks {', '.join(map(str, c.export.sinks))}" if c.export.sinks else ""
    return (f"ctxprec serving: {', '.join(parts) or 'no inputs'}; judge {pipeline.engine.model}; "
            f"sample rate {c.sampling.default_rate:g}; {out}{sinks}")


async def serve(config: ServeConfig, *, ready: asyncio.Event | None = None, stop: asyncio.Event | None = None,
                on_start: Callable[[Pipeline], None] | None = None) -> None:
    """Run until `stop` is set (or the task is cancelled), then shut down gracefully."""
    if config.judge.defaulted:
        log.warning(NO_JUDGE_WARNING)
    pipeline = Pipeline(config)
    await pipeline.start()
    # Everything allocated so far (modules, the pipeline, clients, compiled patterns) lives as long
    # as the service. Freezing it keeps the cyclic GC from walking it again on every full
    # collection (tens of ms each on a small CPU, in the middle of scoring); frozen objects are
    # still freed by reference counting. Undone on the way out, so an embedding process (tests,
    # the demo) gets its collector back.
    gc.collect()
    gc.freeze()
    try:
        log.info(_describe(pipeline))
        if on_start is not None:
            on_start(pipeline)
        if ready is not None:
            ready.set()
        await (stop or asyncio.Event()).wait()
    finally:
        log.info("ctxprec shutting down (deadline %.1fs)", config.scoring.shutdown_timeout_s)
        try:
            await asyncio.shield(pipeline.stop())
        finally:
            gc.unfreeze()


async def _serve_until_signalled(config: ServeConfig) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):  # not the main thread, or no signals here
            pass
    await serve(config, stop=stop)


def run(args: argparse.Namespace) -> int:
    try:
        config = config_module.load(args)
    except ConfigError as exc:
        print(f"ctxprec serve: {exc}", file=sys.stderr)
        return 2
    if not logging.getLogger().handlers:
        logging.basicConfig(level=config.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        asyncio.run(_serve_until_signalled(config))
    except OSError as exc:  # a port in use, a certificate that will not load
        print(f"ctxprec serve: cannot start: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:  # a part refused its settings at construction
        print(f"ctxprec serve: bad configuration: {exc}", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ctxprec serve", description="Score live RAG traffic.")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
