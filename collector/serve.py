"""`ctxprec serve`: the sidecar's entry point.

`add_arguments(parser)` and `run(args) -> int` are what the CLI calls; `serve(config, ...)` runs
the pipeline in an already running event loop (tests, the demo) until `stop` is set or, when run
from `run`, until SIGTERM, SIGINT or SIGHUP, then shuts down gracefully. A bad configuration exits
with status 2 and one line that names the key, never a traceback; a listener's address in use,
with status 1 and one line that names its flag.
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
from ctxprec.collector.config import NO_JUDGE_WARNING, ConfigError, ServeConfig, flag_of
from ctxprec.collector.listener_security import is_loopback
from ctxprec.collector.listeners import AddressInUse, check_free, descriptor_shortfall, raise_open_files_limit
from ctxprec.collector.log_setup import setup_logging
from ctxprec.collector.pipeline import Pipeline

log = logging.getLogger("ctxprec.serve")


# The config loader reads CTXPREC_* itself (it names the variable in its errors); the CLI must not
# turn them into flag defaults as it does for the other commands.
READS_OWN_ENVIRONMENT = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    config_module.add_arguments(parser)
    parser.epilog = config_module.describe_help()


def environment_variables() -> set[str]:
    """The variables the config loader reads, flags or not (CTXPREC_METRICS_TOKEN has no flag)."""
    return config_module.environment_variables()


def describe(pipeline: Pipeline) -> list[str]:
    """What the sidecar is doing, one line per input, judge, exporter and the metrics address."""
    c = pipeline.config
    lines = []
    if pipeline.otlp_grpc_port is not None and c.receivers.otlp_grpc is not None:
        lines.append(f"input: OTLP/gRPC on {c.receivers.otlp_grpc[0]}:{pipeline.otlp_grpc_port}")
    if pipeline.otlp_http_port is not None and c.receivers.otlp_http is not None:
        lines.append(f"input: OTLP/HTTP on {c.receivers.otlp_http[0]}:{pipeline.otlp_http_port} (/v1/traces)")
    if c.kafka.enabled:
        lines.append(f"input: Kafka topic {c.kafka.topic} ({c.kafka.format}) at {c.kafka.bootstrap}, "
                     f"group {c.kafka.group}")
    if not lines:
        lines.append("input: none (every receiver is off)")
    judge = c.judge
    where = f" at {judge.api_base}" if judge.api_base else ""
    lines.append(f"judge: {pipeline.engine.model}{where}; sample rate {c.sampling.default_rate:g}"
                 + (" (adaptive: raised while a drift is suspected)" if c.sampling.adaptive else "")
                 + (" (the local judge: lexical, offline)" if pipeline.engine.model == "local" else "")
                 # The URL may hold a password: only that there is one.
                 + ("; verdicts cached in a store shared by replicas" if pipeline.shared_cache else ""))
    if c.resolver.sources:  # names and kinds only: addresses and secrets are never logged
        lines.append("documents known by id: their text looked up in "
                     + ", ".join(f"{s.name} ({s.kind})" for s in c.resolver.sources))
    forward_to = c.export.forward_to
    if forward_to:
        headers = ""
        if c.export.forward_headers:  # names only: values are credentials
            headers = (f" with header{'s' if len(c.export.forward_headers) > 1 else ''} "
                       + ", ".join(name for name, _ in c.export.forward_headers))
        lines.append(f"output: write-back {c.write_back} to {forward_to}{headers}")
    else:
        lines.append("output: no OTLP write-back (--forward-to unset); scores reach metrics"
                     + (" and the Kafka results topic" if c.kafka.results_topic else ""))
    for sink in c.export.sinks:
        lines.append(f"output: {sink.kind} sink at {sink.url}")
    if c.kafka.enabled and c.kafka.results_topic:
        lines.append(f"output: score records to Kafka topic {c.kafka.results_topic}")
    if c.kafka.enabled and c.kafka.diagnostics_topic:
        lines.append(f"output: noisy-document summaries to Kafka topic {c.kafka.diagnostics_topic} every "
                     f"{c.kafka.diagnostics_interval_s:g}s"
                     + (" (by the replica owning partition 0)" if pipeline.cluster_feed is not None else ""))
    if pipeline.cluster_feed is not None:
        lines.append(f"cluster: learning from every replica's scores in {c.kafka.results_topic} "
                     f"(this replica: {pipeline.replica})")
    server = pipeline.metrics_server
    if server is not None:
        access = ("token required" if server.security.bearer_token is not None and not server.metrics_open
                  else "open, /diagnostics/ needs the token" if server.security.bearer_token is not None
                  else "open")
        lines.append(f"metrics: {'https' if server.security.tls else 'http'}://{server.host}:{server.port}/metrics "
                     f"({access}; /healthz, /readyz open)")
    else:
        lines.append("metrics: off")
    return lines


def exposure_warnings(config: ServeConfig) -> list[str]:
    """One line per listener bound beyond loopback with neither a token nor TLS: anyone who can
    reach the address can send spans, or read scores and document ids. `--metrics-open` is an
    explicit choice for the metrics endpoint and is not warned about."""
    warnings = []
    receivers = config.receivers.security()
    for name, listen in (("OTLP/gRPC", config.receivers.otlp_grpc), ("OTLP/HTTP", config.receivers.otlp_http)):
        if listen is not None and not is_loopback(listen[0]) and not receivers.protected:
            warnings.append(f"{name} listens on {listen[0]}:{listen[1]} with no token and no TLS: anyone who reaches "
                            f"it can send spans (set --receiver-auth-token-file or --receiver-tls-cert, or bind "
                            f"127.0.0.1)")
    metrics = config.metrics
    if metrics.listen is not None and not is_loopback(metrics.listen[0]) and not metrics.open \
            and not metrics.security().protected:
        warnings.append(f"metrics listen on {metrics.listen[0]}:{metrics.listen[1]} with no token and no TLS: anyone "
                        f"who reaches it can read scores (set --metrics-token-file or CTXPREC_METRICS_TOKEN, "
                        f"--metrics-open to choose an open scrape, or bind 127.0.0.1)")
    return warnings


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
        for line in describe(pipeline):
            log.info(line)
        for line in exposure_warnings(config):
            log.warning(line)
        listeners = sum(listen is not None for listen in (config.receivers.otlp_grpc, config.receivers.otlp_http,
                                                          config.metrics.listen))
        shortfall = descriptor_shortfall(listeners, config.listeners)
        if shortfall is not None:
            log.warning(shortfall)
        await pipeline.check_judge()
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


# SIGHUP (the terminal closed, `kill -HUP`, a unit's ExecReload) finishes like SIGTERM: its default
# action killed the process at once, and what it had acknowledged was lost. There is no
# configuration reload to map it to; a changed configuration needs a restart.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


async def _serve_until_signalled(config: ServeConfig) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def stop_on(sig: signal.Signals) -> None:
        if not stop.is_set():
            log.info("%s received: finishing what was taken in, then exiting", sig.name)
        stop.set()

    for sig in STOP_SIGNALS:
        try:
            loop.add_signal_handler(sig, stop_on, sig)
        except (NotImplementedError, RuntimeError):  # not the main thread, or no signals here
            pass
    await serve(config, stop=stop)


def listen_addresses(config: ServeConfig) -> list[tuple[str, str, int]]:
    """(flag, host, port) of every listener the configuration turns on."""
    keys = (("receivers.otlp_grpc", config.receivers.otlp_grpc), ("receivers.otlp_http", config.receivers.otlp_http),
            ("metrics.listen", config.metrics.listen))
    return [(flag_of(key), listen[0], listen[1]) for key, listen in keys if listen is not None]


def address_in_use(config: ServeConfig, error: AddressInUse | None = None) -> str | None:
    """The one line for a listener whose address is taken, naming its flag: checked before
    anything starts (so that nothing else is printed first), or for `error`, raised by a
    listener that lost the race to its address."""
    for flag, host, port in listen_addresses(config):
        if error is not None:
            if (error.host, error.port) != (host, port):
                continue
        else:
            try:
                check_free(host, port)
                continue
            except AddressInUse:
                pass
        return (f"{flag} {host}:{port} is already in use (another ctxprec serve, or another server, listens "
                f"there); stop it or give {flag} another address")
    return None


def run(args: argparse.Namespace) -> int:
    try:
        config = config_module.load(args)
    except ConfigError as exc:
        print(f"ctxprec serve: {exc}", file=sys.stderr)
        return 2
    busy = address_in_use(config)
    if busy is not None:
        print(f"ctxprec serve: cannot start: {busy}", file=sys.stderr)
        return 1
    setup_logging(config.log_level, config.log_format)
    # Only where serve owns the process: an embedding process keeps its own limits.
    before, after = raise_open_files_limit()
    if after != before:
        log.debug("open-file limit raised from %d to %d", before, after)
    try:
        asyncio.run(_serve_until_signalled(config))
    except AddressInUse as exc:  # taken between the check and the listener's bind
        print(f"ctxprec serve: cannot start: {address_in_use(config, exc) or exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # a certificate that will not load
        print(f"ctxprec serve: cannot start: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:  # a part refused its settings at construction
        print(f"ctxprec serve: bad configuration: {exc}", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ctxprec serve", description="Score live RAG traffic.", allow_abbrev=False)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
