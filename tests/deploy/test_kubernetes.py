"""deploy/kubernetes: every overlay renders (kustomize subset, tests/deploy/kustomize.py), every
core object passes kubernetes-validate (strict), the CRDs pass their vendored schemas (KEDA's
ScaledObject made strict), and the pieces fit together (selectors, ports, HPA and ScaledObject
targets, the KEDA trigger's Kafka settings are the Deployment's, the load-balancing collector's
keys are the exporter's own, ConfigMap keys are real `serve` flags)."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.deploy.kustomize import KustomizeError, render, strategic_merge

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "kubernetes"
SCHEMAS = Path(__file__).resolve().parent / "schemas"
OVERLAYS = ["sidecar", "kafka-consumer", "kafka-consumer-keda", "metrics-token", "otlp-loadbalanced"]
K8S_VERSION = "1.30.0"
CRD_SCHEMAS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "monitoring.coreos.com_v1_servicemonitor.json",
    ("monitoring.coreos.com/v1", "PrometheusRule"): "monitoring.coreos.com_v1_prometheusrule.json",
    ("keda.sh/v1alpha1", "ScaledObject"): "keda.sh_v1alpha1_scaledobject.json",
}
PROMTOOL = "/usr/bin/promtool"


def _by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def _strict(schema: Any) -> Any:
    """A CRD's schema refusing unknown fields: Kubernetes would prune them silently, so a typo in a
    manifest would be lost without a word (kubernetes-validate's strict mode, for CRDs)."""
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: _strict(value) for key, value in schema.items()}
    if ("properties" in out and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


def _validate(doc: dict[str, Any]) -> None:
    key = (doc["apiVersion"], doc["kind"])
    if key in CRD_SCHEMAS:
        schema = _strict(json.loads((SCHEMAS / CRD_SCHEMAS[key]).read_text()))
        jsonschema.Draft7Validator(schema).validate(doc)
    else:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_renders_and_every_object_validates(overlay: str) -> None:
    docs = render(K8S / "overlays" / overlay)
    kinds = sorted(d["kind"] for d in docs)
    assert {"ConfigMap", "Service", "ServiceMonitor", "PrometheusRule", "Deployment"} <= set(kinds)
    for doc in docs:
        _validate(doc)
        assert doc["metadata"]["labels"]["app.kubernetes.io/part-of"] == "ctxprec"


def test_validators_reject_broken_objects() -> None:
    docs = render(K8S / "overlays" / "kafka-consumer")
    deployment = _by_kind(docs, "Deployment")[0]
    broken = strategic_merge(deployment, {"spec": {"template": {"spec": {"containers": [
        {"name": "ctxprec", "imagePullPolicy": 3}]}}}})
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate(broken)
    rule = _by_kind(docs, "PrometheusRule")[0]
    bad_rule = strategic_merge(rule, {"spec": {"groups": [{"name": "x", "rules": [{"alert": "A", "expr": "up", "for": "5 minutes"}]}]}})
    with pytest.raises(jsonschema.ValidationError):
        _validate(bad_rule)
    monitor = _by_kind(docs, "ServiceMonitor")[0]
    with pytest.raises(jsonschema.ValidationError):
        _validate(strategic_merge(monitor, {"spec": {"endpoints": [{"port": "metrics", "intervall": "15s"}]}}))
    (scaled,) = _by_kind(render(K8S / "overlays" / "kafka-consumer-keda"), "ScaledObject")
    kafka = dict(scaled["spec"]["triggers"][0], metadata={**scaled["spec"]["triggers"][0]["metadata"], "lagThreshold": 500})
    with pytest.raises(jsonschema.ValidationError):  # trigger metadata values are strings
        _validate(strategic_merge(scaled, {"spec": {"triggers": [kafka]}}))
    with pytest.raises(jsonschema.ValidationError):  # a misspelt field is refused, not pruned
        _validate(strategic_merge(scaled, {"spec": {"minReplicas": 2}}))
    with pytest.raises(jsonschema.ValidationError):
        _validate(strategic_merge(scaled, {"spec": {"scaleTargetRef": None}}))


def test_renderer_refuses_unsupported_kustomize_fields(tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml").write_text("resources: []\nimages:\n  - name: ctxprec\n    newTag: x\n")
    with pytest.raises(KustomizeError, match="images"):
        render(tmp_path)


def _pod_spec(docs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    deployment = _by_kind(docs, "Deployment")[0]
    return deployment, deployment["spec"]["template"]


def test_sidecar_overlay_runs_ctxprec_beside_the_app_on_localhost() -> None:
    docs = render(K8S / "overlays" / "sidecar")
    deployment, template = _pod_spec(docs)
    containers = {c["name"]: c for c in template["spec"]["containers"]}
    assert set(containers) == {"app", "ctxprec"}
    app_env = {e["name"]: e["value"] for e in containers["app"]["env"]}
    assert app_env["OTEL_EXPORTER_OTLP_ENDPOINT"].startswith("http://127.0.0.1:4318")
    config = _by_kind(docs, "ConfigMap")[0]["data"]
    # The patch merged into the base ConfigMap: base keys kept, sidecar keys added.
    assert config["CTXPREC_JUDGE_MODEL"] == "local"
    assert config["CTXPREC_OTLP_HTTP"] == "127.0.0.1:4318"
    assert config["CTXPREC_WRITE_BACK"] == "span"
    assert containers["ctxprec"]["envFrom"][0]["configMapRef"]["name"] == _by_kind(docs, "ConfigMap")[0]["metadata"]["name"]
    assert not _by_kind(docs, "HorizontalPodAutoscaler")


def test_kafka_consumer_overlay_scales_a_consumer_group() -> None:
    docs = render(K8S / "overlays" / "kafka-consumer")
    deployment, template = _pod_spec(docs)
    hpa = _by_kind(docs, "HorizontalPodAutoscaler")[0]
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])
    assert hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]
    config = _by_kind(docs, "ConfigMap")[0]["data"]
    assert config["CTXPREC_KAFKA_TOPIC"] == "otlp_spans"
    assert config["CTXPREC_WRITE_BACK"] == "evaluator"
    assert config["CTXPREC_KAFKA_FORMAT"] in ("otlp_proto", "otlp_json", "rag_event")


def _kafka_settings(docs: list[dict[str, Any]]) -> dict[str, str]:
    """The Kafka settings the consumer Deployment runs with: its ConfigMap, then its own env."""
    config = dict(_by_kind(docs, "ConfigMap")[0]["data"])
    deployment, template = _pod_spec(docs)
    ctxprec = next(c for c in template["spec"]["containers"] if c["name"] == "ctxprec")
    assert ctxprec["envFrom"][0]["configMapRef"]["name"] == _by_kind(docs, "ConfigMap")[0]["metadata"]["name"]
    config.update({e["name"]: e["value"] for e in ctxprec.get("env", []) if "value" in e})
    return config


def test_keda_overlay_scales_the_consumer_group_on_its_lag_instead_of_the_hpa() -> None:
    docs = render(K8S / "overlays" / "kafka-consumer-keda")
    assert not _by_kind(docs, "HorizontalPodAutoscaler")  # KEDA makes the one HPA of the workload
    (scaled,) = _by_kind(docs, "ScaledObject")
    deployment, _ = _pod_spec(docs)
    target = scaled["spec"]["scaleTargetRef"]
    assert (target.get("kind", "Deployment"), target["name"]) == ("Deployment", deployment["metadata"]["name"])
    assert 1 <= scaled["spec"]["minReplicaCount"] <= scaled["spec"]["maxReplicaCount"]
    triggers = {t["type"]: t for t in scaled["spec"]["triggers"]}
    assert set(triggers) == {"kafka", "cpu"}
    settings = _kafka_settings(docs)
    kafka = triggers["kafka"]["metadata"]
    assert kafka["bootstrapServers"] == settings["CTXPREC_KAFKA_BOOTSTRAP"]
    assert kafka["consumerGroup"] == settings["CTXPREC_KAFKA_GROUP"]
    assert kafka["topic"] == settings["CTXPREC_KAFKA_TOPIC"]
    assert int(kafka["lagThreshold"]) > 0
    assert triggers["cpu"]["metricType"] == "Utilization" and 0 < int(triggers["cpu"]["metadata"]["value"]) <= 100
    # The same workload as the HPA overlay, only the autoscaler differs.
    hpa_docs = render(K8S / "overlays" / "kafka-consumer")
    assert _pod_spec(hpa_docs)[0] == deployment
    assert _kafka_settings(hpa_docs) == settings


LOADBALANCING = json.loads((SCHEMAS / "loadbalancingexporter-config.json").read_text())


def _unknown_keys(config: dict[str, Any], prefix: str = "") -> list[str]:
    """Keys of the load-balancing exporter's config that its config struct does not have (down to
    the resolvers; `protocol.otlp` is the OTLP exporter's own config)."""
    known = LOADBALANCING["keys"]
    unknown = [f"{prefix}{key}" for key in config if key not in known[prefix.rstrip(".")]]
    for key, value in config.items():
        if f"{prefix}{key}" in known and isinstance(value, dict):
            unknown += _unknown_keys(value, f"{prefix}{key}.")
    return unknown


def _gateway(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (config_map,) = [d for d in _by_kind(docs, "ConfigMap") if d["metadata"]["name"] == "otel-gateway-config"]
    return yaml.safe_load(config_map["data"]["config.yaml"])


def test_otlp_replicas_get_whole_traces_from_the_load_balancing_exporter() -> None:
    docs = render(K8S / "overlays" / "otlp-loadbalanced")
    gateway = _gateway(docs)
    exporter = gateway["exporters"]["loadbalancing"]
    assert _unknown_keys(exporter) == []
    assert exporter["routing_key"] == "traceID" and exporter["routing_key"] in LOADBALANCING["routing_key_values"]
    # The k8s resolver on a headless Service selecting the ctxprec pods, on their OTLP gRPC port.
    resolver = exporter["resolver"]["k8s"]
    (headless,) = [s for s in _by_kind(docs, "Service") if s["metadata"]["name"] == resolver["service"].split(".")[0]]
    assert headless["spec"]["clusterIP"] == "None"
    deployment, template = _pod_spec(docs)
    assert deployment["spec"]["replicas"] >= 2
    assert all(template["metadata"]["labels"].get(k) == v for k, v in headless["spec"]["selector"].items())
    ctxprec = next(c for c in template["spec"]["containers"] if c["name"] == "ctxprec")
    ports = {p["name"]: p["containerPort"] for p in ctxprec["ports"]}
    assert [p["port"] for p in headless["spec"]["ports"]] == resolver["ports"] == [ports["otlp-grpc"]]
    config = _by_kind(docs, "ConfigMap")[0]["data"]
    assert config["CTXPREC_OTLP_GRPC"] == f"0.0.0.0:{ports['otlp-grpc']}"
    # Scored spans come back on a receiver whose pipeline does not lead to the load balancer.
    scored_port = int(config["CTXPREC_FORWARD_TO"].rsplit(":", 1)[1])
    receivers = [name for name, r in gateway["receivers"].items()
                 if r["protocols"].get("grpc", {}).get("endpoint", "").endswith(f":{scored_port}")]
    assert len(receivers) == 1
    for pipeline in gateway["service"]["pipelines"].values():
        if receivers[0] in pipeline["receivers"]:
            assert "loadbalancing" not in pipeline["exporters"]
    # The collector may watch the Service's endpoints.
    (collector,) = [d for d in _by_kind(docs, "Deployment") if d["metadata"]["name"] == "otel-gateway"]
    account = collector["spec"]["template"]["spec"]["serviceAccountName"]
    (binding,) = _by_kind(docs, "RoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account}]
    (role,) = _by_kind(docs, "Role")
    assert any("endpoints" in rule["resources"] and {"list", "watch"} <= set(rule["verbs"]) for rule in role["rules"])


def test_the_key_check_refuses_keys_the_exporter_does_not_have() -> None:
    exporter = _gateway(render(K8S / "overlays" / "otlp-loadbalanced"))["exporters"]["loadbalancing"]
    assert _unknown_keys({**exporter, "routing_keys": "traceID"}) == ["routing_keys"]
    assert _unknown_keys({**exporter, "resolver": {"k8s": {"service": "x", "port": 4317}}}) == ["resolver.k8s.port"]
    assert LOADBALANCING["read_from"][0]["commit"] and len(LOADBALANCING["read_from"][0]["commit"]) == 40


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_service_and_monitor_select_the_ctxprec_pods(overlay: str) -> None:
    docs = render(K8S / "overlays" / overlay)
    _, template = _pod_spec(docs)
    service = _by_kind(docs, "Service")[0]
    pod_labels = template["metadata"]["labels"]
    assert all(pod_labels.get(k) == v for k, v in service["spec"]["selector"].items())
    ctxprec = next(c for c in template["spec"]["containers"] if c["name"] == "ctxprec")
    port_names = {p["name"]: p["containerPort"] for p in ctxprec["ports"]}
    assert port_names["metrics"] == 9464
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"
    assert ctxprec["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert ctxprec["readinessProbe"]["httpGet"]["path"] == "/readyz"
    monitor = _by_kind(docs, "ServiceMonitor")[0]
    assert all(service["metadata"]["labels"].get(k) == v for k, v in monitor["spec"]["selector"]["matchLabels"].items())
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]


def test_configmap_keys_are_serve_flags() -> None:
    """Every CTXPREC_* key the manifests set is the variable of a real `ctxprec serve` flag."""
    from ctxprec.collector.config import ENV_PREFIX, SETTINGS

    known = {s.env for s in SETTINGS if s.env} | {ENV_PREFIX + "CONFIG"}
    for overlay in OVERLAYS:
        data = _by_kind(render(K8S / "overlays" / overlay), "ConfigMap")[0]["data"]
        unknown = sorted(set(data) - known)
        assert not unknown, f"{overlay}: ConfigMap keys with no serve flag: {unknown}"


def test_prometheusrule_is_generated_from_the_rule_files(tmp_path: Path) -> None:
    from deploy.kubernetes import prometheusrule

    assert prometheusrule.main(["--check"]) == 0, "run python -m deploy.kubernetes.prometheusrule"
    rule = yaml.safe_load((K8S / "base" / "prometheusrule.yaml").read_text())
    rules_file = tmp_path / "rules.yml"
    rules_file.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    done = subprocess.run([PROMTOOL, "check", "rules", str(rules_file)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_metrics_token_overlay_gives_ctxprec_and_prometheus_the_same_secret() -> None:
    docs = render(K8S / "overlays" / "metrics-token")
    (deployment,) = _by_kind(docs, "Deployment")
    (container,) = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "ctxprec"]
    (variable,) = [e for e in container["env"] if e["name"] == "CTXPREC_METRICS_TOKEN"]
    ref = variable["valueFrom"]["secretKeyRef"]
    (monitor,) = _by_kind(docs, "ServiceMonitor")
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["authorization"]["type"] == "Bearer"
    assert endpoint["authorization"]["credentials"] == {"name": ref["name"], "key": ref["key"]}
    from ctxprec.collector.config import SETTINGS

    assert any(s.key == "metrics.token" and s.env == "CTXPREC_METRICS_TOKEN" for s in SETTINGS)
    # The probes need no token: kubelet sends none.
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
