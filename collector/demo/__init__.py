"""`ctxprec demo`: the synthetic RAG app scored live by an in-process sidecar, in the terminal.

The CLI imports this package for the subcommand; the heavy parts (the sidecar, the OpenTelemetry
SDK) load only when the demo runs, and `ctxprec.collector.demo.synthetic_app` stays importable alone."""
from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ctxprec.collector.demo.command import add_arguments as add

    add(parser)


def run(args: argparse.Namespace) -> int:
    from ctxprec.collector.demo.command import run as run_demo

    return run_demo(args)
