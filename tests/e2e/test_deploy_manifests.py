"""deploy/'s files say what the running system does (no cluster or Docker daemon is needed):

- both HAProxy configurations pass ``haproxy -c`` with their addresses set;
- every tokenwire command line in the compose files and the Kubernetes manifests is accepted by the
  real CLI (it stops at the missing model directory, never at a flag);
- every tokenwire and engine container has a readiness probe / healthcheck on ``/health``; a front
  end's liveness probe is not ``/health`` (an engine-tier outage makes that 503 and must not restart
  every front end);
- the grace period before a kill is longer than ``--shutdown-timeout`` plus the preStop pause, so a
  drain is never cut short;
- the engine key: every engine requires it and every front end sends it, from one Secret (one
  variable in compose); a NetworkPolicy admits only the front-end pods to the engine port, and in
  compose the engines are on an internal network that only the front ends share.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.deploy_support import ENGINE_KEY, ENGINES_CFG, FRONTENDS_CFG, SECRET, haproxy_binary
from tests.support.server_proc import run_cli

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
K8S = sorted((DEPLOY / "k8s").glob("*.yaml"))


def k8s_docs() -> list[dict[str, Any]]:
    return [d for f in K8S for d in yaml.safe_load_all(f.read_text()) if d]


TIERS = ("engine", "frontend")  # tokenwire's own tiers; the responses store is Redis


def containers() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(pod spec, container) of every Deployment of the engine and front-end tiers."""
    return [(d["spec"]["template"]["spec"], c) for d in k8s_docs() if d["kind"] == "Deployment"
            and d["spec"]["template"]["metadata"]["labels"].get("tier") in TIERS
            for c in d["spec"]["template"]["spec"]["containers"]]


def compose_services() -> dict[str, dict[str, Any]]:
    data = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    services: dict[str, dict[str, Any]] = data["services"]
    return services


def flag(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


@pytest.mark.parametrize("config", [FRONTENDS_CFG, ENGINES_CFG], ids=lambda p: p.name)
def test_the_haproxy_configurations_are_valid(config: Path) -> None:
    env = {**os.environ, "TW_LB_BIND": "127.0.0.1:1", "TW_FE1": "127.0.0.1:2", "TW_FE2": "127.0.0.1:3",
           "TW_STATS_BIND": "127.0.0.1:4", "TW_ENGINE_LB_BIND": "127.0.0.1:1", "TW_ENGINE1": "127.0.0.1:2",
           "TW_ENGINE2": "127.0.0.1:3", "TW_ENGINE_STATS_BIND": "127.0.0.1:4"}
    r = subprocess.run([haproxy_binary(), "-c", "-f", str(config)], env=env, capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0 and "Configuration file is valid" in r.stdout + r.stderr, r.stdout + r.stderr


def tokenwire_commands() -> list[tuple[str, list[str]]]:
    out = [(f"k8s {c['name']}", [str(a) for a in c["args"]]) for _, c in containers()
           if str(c["image"]).startswith("tokenwire")]
    for name, service in compose_services().items():
        if str(service.get("image", "")).startswith("tokenwire"):
            args = [re.sub(r"\$\{MODEL[^}]*\}", "model", str(a)) for a in service["command"]]
            out.append((f"compose {name}", args))
    return out


@pytest.mark.parametrize("where,args", tokenwire_commands(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_tokenwire_command_line_is_accepted_by_the_cli(where: str, args: list[str], tmp_path: Path) -> None:
    missing = str(tmp_path / "no-model-here")
    argv = [missing if a.startswith("/models/") else a for a in args]
    argv[argv.index("--port") + 1] = "0"
    r = run_cli(argv, env={"TOKENWIRE_STATE_SECRET": SECRET, "TOKENWIRE_ENGINE_API_KEY": ENGINE_KEY}, timeout=60)
    assert r.returncode == 2, (where, r.stderr)
    assert "no-model-here" in r.stderr and "unrecognized" not in r.stderr, (where, r.stderr)


def test_probes_check_health_and_front_ends_are_not_restarted_for_an_engine_outage() -> None:
    found = containers()
    assert {c["name"] for _, c in found} >= {"engine", "vllm", "frontend"}
    for _, c in found:
        assert c["readinessProbe"]["httpGet"]["path"] == "/health", c["name"]
        if c["name"] == "frontend":
            assert c["livenessProbe"]["httpGet"]["path"] != "/health"
    for name, service in compose_services().items():
        if str(service.get("image", "")).startswith("tokenwire"):
            assert "/health" in " ".join(service["healthcheck"]["test"]), name


def seconds(text: str) -> float:
    m = re.fullmatch(r"(\d+)s", text)
    assert m, text
    return float(m.group(1))


def test_grace_periods_outlast_the_drain() -> None:
    for pod, c in containers():
        args = [str(a) for a in c.get("args", [])]
        drain = float(flag(args, "--shutdown-timeout") or 20)  # tokenwire's default; vLLM has its own
        pause = float(c["lifecycle"]["preStop"]["exec"]["command"][-1])
        assert pod["terminationGracePeriodSeconds"] > drain + pause, c["name"]
    for name, service in compose_services().items():
        if str(service.get("image", "")).startswith("tokenwire"):
            drain = float(flag([str(a) for a in service["command"]], "--shutdown-timeout") or 20)
            assert seconds(service["stop_grace_period"]) > drain, name


def test_the_example_secrets_are_long_enough() -> None:
    secrets = {d["metadata"]["name"]: d["stringData"] for d in k8s_docs() if d["kind"] == "Secret"}
    assert len(secrets["tokenwire-state"]["secret"].encode()) >= 32
    assert len(secrets["tokenwire-engine-key"]["key"].encode()) >= 32


ENGINE_KEY_REF = {"secretKeyRef": {"name": "tokenwire-engine-key", "key": "key"}}
KEY_VARIABLE = {"engine": "TOKENWIRE_API_KEY", "vllm": "VLLM_API_KEY", "frontend": "TOKENWIRE_ENGINE_API_KEY"}


def test_every_engine_requires_the_engine_key_and_every_front_end_sends_it() -> None:
    found = containers()
    assert {c["name"] for _, c in found} == set(KEY_VARIABLE)
    for _, c in found:
        env = {e["name"]: e.get("valueFrom") for e in c.get("env", [])}
        assert env.get(KEY_VARIABLE[c["name"]]) == ENGINE_KEY_REF, c["name"]
        if c["name"] == "frontend":
            assert "TOKENWIRE_API_KEY" not in env  # the engine key is not a client key
            assert "--engine-api-key" not in c["args"]  # from the Secret, not the command line
    services = compose_services()
    key = "${TOKENWIRE_ENGINE_API_KEY:?"
    for name in ("engine1", "engine2"):
        assert services[name]["environment"]["TOKENWIRE_API_KEY"].startswith(key), name
    for name in ("fe1", "fe2"):
        assert services[name]["environment"]["TOKENWIRE_ENGINE_API_KEY"].startswith(key), name
    vllm = yaml.safe_load((DEPLOY / "docker-compose.vllm.yml").read_text())["services"]
    for name in ("engine1", "engine2"):
        assert vllm[name]["environment"]["VLLM_API_KEY"].startswith(key), name


def pod_labels(tier: str) -> dict[str, str]:
    labels = [d["spec"]["template"]["metadata"]["labels"] for d in k8s_docs()
              if d["kind"] == "Deployment" and d["spec"]["template"]["metadata"]["labels"].get("tier") == tier]
    assert labels and all(label == labels[0] for label in labels), tier
    return dict(labels[0])


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector["matchLabels"].items())


def test_a_network_policy_admits_only_the_front_ends_to_the_engine_port() -> None:
    policies = [d for d in k8s_docs() if d["kind"] == "NetworkPolicy"]
    engine, frontend = pod_labels("engine"), pod_labels("frontend")
    mine = [p for p in policies if selects(p["spec"]["podSelector"], engine)]
    assert len(mine) == 1
    spec = mine[0]["spec"]
    assert not selects(spec["podSelector"], frontend)
    assert "Ingress" in spec["policyTypes"]
    (rule,) = spec["ingress"]
    (peer,) = rule["from"]
    assert set(peer) == {"podSelector"} and selects(peer["podSelector"], frontend)
    assert not selects(peer["podSelector"], engine)
    ports = {c["name"]: {p["name"]: p["containerPort"] for p in c["ports"]} for _, c in containers()}
    for name in ("engine", "vllm"):
        assert [p["port"] for p in rule["ports"]] == ["http"] and "http" in ports[name], name


def test_the_responses_store_is_shared_by_the_front_ends_and_reached_by_them_alone() -> None:
    docs = k8s_docs()
    frontend = pod_labels("frontend")
    (store,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "tokenwire-responses-store"]
    store_labels = store["spec"]["template"]["metadata"]["labels"]
    (service,) = [d for d in docs if d["kind"] == "Service" and selects({"matchLabels": d["spec"]["selector"]}, store_labels)]
    (redis,) = store["spec"]["template"]["spec"]["containers"]
    port = {p["name"]: p["containerPort"] for p in redis["ports"]}["redis"]
    assert [p["port"] for p in service["spec"]["ports"]] == [port]
    url = f"redis://{service['metadata']['name']}:{port}/0"
    for _, c in containers():
        env = {e["name"]: e.get("value") for e in c.get("env", [])}
        if c["name"] == "frontend":
            assert env.get("TOKENWIRE_RESPONSES_STORE") == url
        else:
            assert "TOKENWIRE_RESPONSES_STORE" not in env, c["name"]
    # bounded and on no disk, as the compose file's store
    compose = compose_services()["responses-store"]["command"]
    assert redis["args"] == compose
    assert flag(redis["args"], "--maxmemory-policy") == "volatile-ttl" and flag(redis["args"], "--save") == ""
    (policy,) = [d for d in docs if d["kind"] == "NetworkPolicy" and selects(d["spec"]["podSelector"], store_labels)]
    (rule,) = policy["spec"]["ingress"]
    (peer,) = rule["from"]
    assert selects(peer["podSelector"], frontend) and not selects(peer["podSelector"], pod_labels("engine"))
    assert [p["port"] for p in rule["ports"]] == ["redis"]


def test_compose_keeps_the_engines_on_an_internal_network_shared_only_with_the_front_ends() -> None:
    data = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    assert data["networks"]["engines"]["internal"] is True
    on = {name: set(service.get("networks") or ["default"]) for name, service in data["services"].items()}
    assert {name for name, nets in on.items() if "engines" in nets} == {"engine1", "engine2", "engine-lb", "fe1", "fe2"}
    for name in ("engine1", "engine2", "engine-lb"):
        assert on[name] == {"engines"} and "ports" not in data["services"][name], name
