"""NetworkPolicies against the "Allowed traffic" table of deploy/README.md, and the table against the code.

The two README tables (parties, allowed traffic) are parsed; a small evaluator applies the Kubernetes
NetworkPolicy semantics (a pod selected by no policy of a direction is open in it; once selected, only
what some rule admits passes; a connection needs the source's egress and the destination's ingress) to a
representative pod of every party, on every port anyone here uses plus one nobody does. The policies must
allow every row and nothing else. Then the connections the code and manifests make (the scaler's and
exporter's listen ports, --exporters-service, --peers-service, the examples' scalerAddress and
prometheusAddress, the activator's listeners, scaler URL, models and exporters, the API server for every
ServiceAccount with RBAC grants) must each be a row: a new connection without its row (and so its
policy) fails here.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from test_deploy_manifests import (
    ACTIVATOR,
    BASE,
    DEPLOY,
    EXAMPLE_FILES,
    EXPORTER_NS,
    KUSTOMIZATIONS,
    NAMESPACE,
    build,
    container,
    find,
    granted,
    load_docs,
    parse_cli,
    scaler_args,
    service_port,
    split_service_dns,
)

from keda_llm.activator import cli as activator_cli
from keda_llm.activator.config import ActivatorConfig
from keda_llm.activator.config import parse as parse_activator_config
from keda_llm.activator.config import with_flags as activator_with_flags
from keda_llm.exporter.config import parse_config
from keda_llm.scaler import cli as scaler_cli

JSON = dict[str, Any]
README = DEPLOY / "README.md"
ANY_PORT = "any"


@dataclass(frozen=True)
class Party:
    name: str
    namespace: str | None  # None: any namespace (a representative one is used); "" for the API server
    labels: tuple[tuple[str, str], ...]
    is_pod: bool = True
    ports: dict[str, int] = field(default_factory=dict, compare=False, hash=False)  # named container ports


def _table_after(marker: str) -> list[list[str]]:
    text = README.read_text()
    assert marker in text, f"deploy/README.md lost the table marked {marker!r}"
    rows = []
    for line in text[text.index(marker):].splitlines()[1:]:
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if set("".join(cells)) <= set("-: "):
            continue
        rows.append(cells)
    return rows[1:]  # without the header


def _code(cell: str) -> str:
    m = re.match(r"`([^`]*)`", cell)
    assert m, f"expected a `code` value first in {cell!r}"
    return m.group(1)


def parties() -> dict[str, Party]:
    out = {}
    for name_cell, ns_cell, pods_cell in _table_after("<!-- parties:"):
        name = _code(name_cell)
        if ns_cell.startswith("("):
            out[name] = Party(name, "", (), is_pod=False)
            continue
        labels: tuple[tuple[str, str], ...] = ()
        if pods_cell != "any":
            key, _, value = _code(pods_cell).partition("=")
            labels = ((key, value),)
        out[name] = Party(name, None if ns_cell == "any" else _code(ns_cell), labels)
    return out


def allowed_rows() -> set[tuple[str, str, str]]:
    """(from, to, port/proto or 'any') for every row of the table."""
    rows = set()
    for src, dst, ports, _why in _table_after("<!-- allowed traffic:"):
        for port in ports.split(","):
            rows.add((_code(src), _code(dst), port.strip()))
    return rows


# ------------------------------------------------------------------------------- the evaluator


@dataclass(frozen=True)
class Pod:
    namespace: str
    ns_labels: dict[str, str]
    labels: dict[str, str]
    ports: dict[str, int]


def matches(selector: JSON | None, labels: dict[str, str]) -> bool:
    """A LabelSelector; only matchLabels is used in deploy/ (matchExpressions fails the test, not the pod)."""
    assert selector is not None
    assert "matchExpressions" not in selector, "the evaluator supports matchLabels only"
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def peer_matches(peer: JSON, policy_ns: str, other: Pod | None) -> bool:
    assert "ipBlock" not in peer, "the evaluator does not model ipBlock peers: extend it before using one"
    if other is None:  # not a pod (the API server): only an empty peer list ("to" omitted) reaches it
        return False
    ns_sel, pod_sel = peer.get("namespaceSelector"), peer.get("podSelector")
    if ns_sel is None and other.namespace != policy_ns:
        return False
    if ns_sel is not None and not matches(ns_sel, other.ns_labels):
        return False
    return pod_sel is None or matches(pod_sel, other.labels)


def port_matches(ports: list[JSON] | None, port: int, proto: str, dst: Pod | None) -> bool:
    if not ports:
        return True
    for p in ports:
        if p.get("protocol", "TCP") != proto:
            continue
        want = p.get("port")
        if want is None:
            return True
        if isinstance(want, str):
            if dst is None or want not in dst.ports:
                continue
            want = dst.ports[want]
        if want <= port <= p.get("endPort", want):
            return True
    return False


def direction_allows(policies: list[JSON], pod: Pod, direction: str, other: Pod | None, port: int, proto: str,
                     dst: Pod | None) -> bool:
    kind, peers_key = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
    selecting = [p for p in policies if p["metadata"]["namespace"] == pod.namespace
                 and direction in p["spec"].get("policyTypes", ["Ingress"]) and matches(p["spec"]["podSelector"],
                                                                                        pod.labels)]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy["spec"].get(kind) or []:
            peers = rule.get(peers_key)
            peer_ok = not peers or any(peer_matches(peer, pod.namespace, other) for peer in peers)
            if peer_ok and port_matches(rule.get("ports"), port, proto, dst):
                return True
    return False


def connection_allowed(policies: list[JSON], src: Pod | None, dst: Pod | None, port: int, proto: str) -> bool:
    egress = src is None or direction_allows(policies, src, "Egress", dst, port, proto, dst)
    ingress = dst is None or direction_allows(policies, dst, "Ingress", src, port, proto, dst)
    return egress and ingress


# ------------------------------------------------------------------------------- the world


def all_policies() -> list[JSON]:
    objs = [o for d in KUSTOMIZATIONS for o in build(d) if o["kind"] == "NetworkPolicy"]
    objs += [d for p in EXAMPLE_FILES for d in load_docs(p) if d["kind"] == "NetworkPolicy"]
    unique = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in objs}
    return list(unique.values())


def workload_pods() -> dict[str, Pod]:
    """The real pod templates of the parties deploy/ runs (labels and named ports from the manifests)."""
    base = build(ACTIVATOR)  # the base plus the activator: every workload deploy/ runs
    out = {}
    for party, kind, name, ns in WORKLOADS:
        tmpl = find(base, kind, name, ns)["spec"]["template"]
        ports = {p["name"]: p["containerPort"] for c in tmpl["spec"]["containers"] for p in c.get("ports", [])}
        out[party] = Pod(ns, {"kubernetes.io/metadata.name": ns}, dict(tmpl["metadata"]["labels"]), ports)
    (engine,) = [d for p in EXAMPLE_FILES for d in load_docs(p) if d["kind"] == "Deployment"
                 and d["metadata"]["name"] == "llama-8b"]
    tmpl = engine["spec"]["template"]
    ports = {p.get("name", ""): p["containerPort"] for c in tmpl["spec"]["containers"] for p in c.get("ports", [])}
    out["engine"] = Pod("llm", {"kubernetes.io/metadata.name": "llm"}, dict(tmpl["metadata"]["labels"]), ports)
    return out


#: (party, kind, name, namespace) of every workload deploy/ runs.
WORKLOADS = (("scaler", "Deployment", "keda-llm-scaler", NAMESPACE),
             ("exporter", "DaemonSet", "keda-llm-exporter", EXPORTER_NS),
             ("activator", "Deployment", "keda-llm-activator", NAMESPACE))


def representative(party: Party, real: dict[str, Pod]) -> Pod | None:
    if not party.is_pod:
        return None
    if party.name in real:
        pod = real[party.name]
        if party.namespace is not None:
            assert pod.namespace == party.namespace, f"README says {party.name} runs in {party.namespace}"
        assert all(pod.labels.get(k) == v for k, v in party.labels), \
            f"README's labels for {party.name} {party.labels} are not on its pods {pod.labels}"
        return pod
    ns = party.namespace or "elsewhere"
    return Pod(ns, {"kubernetes.io/metadata.name": ns}, dict(party.labels), {})


#: Every port any row names, plus one nobody uses; each with TCP and UDP.
PROBE_PORTS = [(p, proto) for p in (53, 443, 6443, 8000, 8080, 9090, 9091, 9092, 9400, 12345)
               for proto in ("TCP", "UDP")]
STRANGER = Party("stranger", "default", (("app", "something-else"),))


def row(rows: set[tuple[str, str, str]], src: str, dst: str, port: int, proto: str) -> bool:
    return (src, dst, ANY_PORT) in rows or (src, dst, f"{port}/{proto}") in rows


#: Which direction the policies here govern for each party's pods (the example model: ingress only).
MANAGED = {"scaler": {"Ingress", "Egress"}, "exporter": {"Ingress", "Egress"}, "activator": {"Ingress", "Egress"},
           "engine": {"Ingress"}}


def expected(rows: set[tuple[str, str, str]], src: str, dst: str, dst_is_pod: bool, port: int, proto: str) -> bool:
    """What the table allows, read as the README explains it: `any-pod` is every pod, `kube-apiserver` is
    any address on its ports (so egress to it also reaches any pod on those ports)."""
    egress = ("Egress" not in MANAGED.get(src, set()) or row(rows, src, dst, port, proto)
              or (dst_is_pod and row(rows, src, "any-pod", port, proto))
              or row(rows, src, "kube-apiserver", port, proto))
    ingress = "Ingress" not in MANAGED.get(dst, set()) or row(rows, src, dst, port, proto)
    return egress and ingress


@pytest.fixture(scope="module")
def world() -> tuple[list[JSON], dict[str, Party], dict[str, Pod]]:
    return all_policies(), parties(), workload_pods()


def test_tables_parse_and_name_only_known_parties(world: Any) -> None:
    _, ps, _ = world
    rows = allowed_rows()
    assert len(rows) >= 10 and {"scaler", "exporter", "keda", "prometheus", "kube-apiserver"} <= set(ps)
    for src, dst, port in rows:
        assert src in ps and dst in ps, (src, dst)
        assert port == ANY_PORT or re.fullmatch(r"\d+/(TCP|UDP)", port), port


def test_every_pod_deploy_runs_is_selected_by_a_default_deny_both_ways(world: Any) -> None:
    policies, _, real = world
    for party, *_ in WORKLOADS:
        pod = real[party]
        denies = [p for p in policies if p["metadata"]["namespace"] == pod.namespace and p["spec"]["podSelector"] == {}
                  and not p["spec"].get("ingress") and not p["spec"].get("egress")]
        assert denies and {"Ingress", "Egress"} <= set(denies[0]["spec"]["policyTypes"]), party


def test_every_policy_selects_a_pod_that_exists(world: Any) -> None:
    policies, _, real = world
    for policy in policies:
        if policy["spec"]["podSelector"] == {}:
            continue
        hits = [n for n, pod in real.items() if pod.namespace == policy["metadata"]["namespace"]
                and matches(policy["spec"]["podSelector"], pod.labels)]
        assert hits, f"NetworkPolicy {policy['metadata']['name']} selects no pod deploy/ runs"


def test_policies_allow_exactly_the_tables_connections(world: Any) -> None:
    policies, ps, real = world
    rows = allowed_rows()
    everyone = {**ps, STRANGER.name: STRANGER}
    wrong = []
    for src_name, src_party in everyone.items():
        for dst_name, dst_party in everyone.items():
            if "Egress" not in MANAGED.get(src_name, set()) and "Ingress" not in MANAGED.get(dst_name, set()):
                continue  # neither end is governed here
            src, dst = representative(src_party, real), representative(dst_party, real)
            if src is None and dst is None:
                continue
            for port, proto in PROBE_PORTS:
                got = connection_allowed(policies, src, dst, port, proto)
                want = expected(rows, src_name, dst_name, dst is not None, port, proto)
                if got != want:
                    wrong.append(f"{src_name} -> {dst_name} {port}/{proto}: policies {'allow' if got else 'deny'}, "
                                 f"table {'allows' if want else 'does not'}")
    assert wrong == [], "\n".join(wrong)


# ------------------------------------------------------------------------------- the code's connections


def _port_of(address: str) -> int:
    return int(address.rpartition(":")[2])


def test_every_connection_the_code_makes_has_a_row() -> None:
    rows = allowed_rows()
    base = build(BASE)
    c, args = scaler_args(base)
    need: set[tuple[str, str, str]] = set()

    # listeners: the scaler's gRPC for KEDA and HTTP for Prometheus, peers and activation clients
    need.add(("keda", "scaler", f"{_port_of(args.grpc_address)}/TCP"))
    need.add(("prometheus", "scaler", f"{_port_of(args.http_address)}/TCP"))
    need.add(("activation-client", "scaler", f"{_port_of(args.http_address)}/TCP"))
    # the code's own defaults are the manifests' (a changed default needs a new row, not a silent gap)
    defaults = argparse.ArgumentParser()
    scaler_cli.add_arguments(defaults)
    d = defaults.parse_args([])
    assert (_port_of(d.grpc_address), _port_of(d.http_address)) == (_port_of(args.grpc_address),
                                                                    _port_of(args.http_address))
    # --exporters-service and --peers-service: the scaler dials them
    name, ns, port = split_service_dns(args.exporters_service)
    assert (name, ns) == ("keda-llm-exporter", EXPORTER_NS)
    need.add(("scaler", "exporter", f"{port}/TCP"))
    need.add(("prometheus", "exporter", f"{port}/TCP"))
    assert args.peers_service
    need.add(("scaler", "scaler", f"{_port_of(args.http_address)}/TCP"))
    # the exporter's listen port, from its config as the DaemonSet gives it
    cm = find(base, "ConfigMap", "keda-llm-exporter", EXPORTER_NS)
    cfg = parse_config(yaml.safe_load(cm["data"]["exporter.yaml"]), {"NODE_NAME": "n"})
    assert cfg.listen_address[1] == port == parse_config({}, {"NODE_NAME": "n"}).listen_address[1]
    # the API server, for every ServiceAccount RBAC grants anything
    for sa, ns_, party in (("keda-llm-scaler", NAMESPACE, "scaler"), ("keda-llm-exporter", EXPORTER_NS, "exporter")):
        if granted(base, sa, ns_):
            need |= {(party, "kube-apiserver", "443/TCP"), (party, "kube-apiserver", "6443/TCP")}
    # Service names are resolved through cluster DNS
    need |= {("scaler", "kube-dns", "53/UDP"), ("scaler", "kube-dns", "53/TCP")}
    # every example's scalerAddress and prometheusAddress
    for path in EXAMPLE_FILES:
        for doc in load_docs(path):
            if doc["kind"] != "ScaledObject":
                continue
            for trig in doc["spec"]["triggers"]:
                meta = trig["metadata"]
                need.add(("keda", "scaler", f"{_port_of(meta['scalerAddress'])}/TCP"))
                if meta.get("prometheusAddress"):
                    need.add(("scaler", "prometheus", f"{urlsplit(meta['prometheusAddress']).port or 80}/TCP"))
    need |= activator_connections()
    missing = {n for n in need if n not in rows and (n[0], n[1], ANY_PORT) not in rows}
    assert missing == set(), f"connections with no row (and so no policy): {sorted(missing)}"
    assert c is not None


def activator_connections() -> set[tuple[str, str, str]]:
    """What `keda-llm activator` dials and serves, from overlays/activator's command line and config as
    the activator's own parsers read them."""
    objects = build(ACTIVATOR)
    c = container(find(objects, "Deployment", "keda-llm-activator", NAMESPACE), "activator")
    args = parse_cli(activator_cli.add_arguments, c["args"], "activator")
    cm = find(objects, "ConfigMap", "keda-llm-activator", NAMESPACE)
    cfg = activator_with_flags(parse_activator_config(yaml.safe_load(cm["data"]["activator.yaml"])),
                               {**vars(args), "config": None})
    need = {("inference-client", "activator", f"{_port_of(cfg.listen)}/TCP"),
            ("prometheus", "activator", f"{_port_of(args.admin_listen)}/TCP")}  # /metrics on the admin port
    # the code's defaults are the manifests' (a changed default needs a new row)
    defaults = argparse.ArgumentParser()
    activator_cli.add_arguments(defaults)
    assert _port_of(defaults.parse_args([]).admin_listen) == _port_of(args.admin_listen)
    assert _port_of(ActivatorConfig().listen) == _port_of(cfg.listen)
    # the scaler's activation endpoint, by Service name (so DNS too)
    scaler = urlsplit(cfg.scaler)
    name, ns, _ = split_service_dns(scaler.hostname or "")
    assert (name, ns) == ("keda-llm-scaler", NAMESPACE)
    need.add(("activator", "scaler", f"{scaler.port}/TCP"))
    need |= {("activator", "kube-dns", "53/UDP"), ("activator", "kube-dns", "53/TCP")}
    # each model's replicas, at the container port its Service's named port leads to
    examples = [d for p in EXAMPLE_FILES for d in load_docs(p)]
    for m in cfg.models:
        assert m.service, "a static upstream needs its own row (and egress rule): add them"
        (svc,) = [d for d in examples if d["kind"] == "Service"
                  and (d["metadata"]["namespace"], d["metadata"]["name"]) == (m.namespace, m.service)]
        (dep,) = [d for d in examples if d["kind"] == "Deployment" and d["metadata"]["namespace"] == m.namespace
                  and all(d["spec"]["template"]["metadata"]["labels"].get(k) == v
                          for k, v in svc["spec"]["selector"].items())]
        target = service_port(svc, m.port_name)["targetPort"]
        if isinstance(target, str):
            target = next(p["containerPort"] for c_ in dep["spec"]["template"]["spec"]["containers"]
                          for p in c_.get("ports", []) if p.get("name") == target)
        need.add(("activator", "engine", f"{target}/TCP"))
    for url in cfg.exporters:
        need.add(("activator", "exporter", f"{urlsplit(url).port}/TCP"))
    if granted(objects, "keda-llm-activator", NAMESPACE):
        need |= {("activator", "kube-apiserver", "443/TCP"), ("activator", "kube-apiserver", "6443/TCP")}
    return need


def test_every_declared_port_has_a_row() -> None:
    """A container port or Service port added without a row for who may reach it fails here."""
    rows = allowed_rows()
    base = build(ACTIVATOR)  # the base and the activator
    party_of = {"keda-llm-scaler": "scaler", "keda-llm-exporter": "exporter", "keda-llm-activator": "activator"}
    for obj in base:
        if obj["kind"] in ("Deployment", "DaemonSet"):
            party = party_of[obj["metadata"]["name"]]
            for c in obj["spec"]["template"]["spec"]["containers"]:
                for p in c.get("ports", []):
                    port = f"{p['containerPort']}/{p.get('protocol', 'TCP')}"
                    assert any(r[1] == party and r[2] in (port, ANY_PORT) for r in rows), \
                        f"{party} listens on {port}, which no row of deploy/README.md admits"
        if obj["kind"] == "Service":
            for p in obj["spec"]["ports"]:
                assert any(r[2] == f"{p['port']}/{p.get('protocol', 'TCP')}" for r in rows), obj["metadata"]["name"]


def test_the_evaluator_refuses_what_it_should() -> None:
    """Sanity of the evaluator: a default deny blocks, a rule admits only its peer and port."""
    deny = {"metadata": {"namespace": "a", "name": "d"}, "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}}
    allow = {"metadata": {"namespace": "a", "name": "x"}, "spec": {
        "podSelector": {"matchLabels": {"app": "x"}}, "policyTypes": ["Ingress"],
        "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "c"}}}], "ports": [{"port": "http"}]}]}}
    x = Pod("a", {"kubernetes.io/metadata.name": "a"}, {"app": "x"}, {"http": 80})
    c_same = Pod("a", {"kubernetes.io/metadata.name": "a"}, {"app": "c"}, {})
    c_other = Pod("b", {"kubernetes.io/metadata.name": "b"}, {"app": "c"}, {})
    assert connection_allowed([deny, allow], c_same, x, 80, "TCP")
    assert not connection_allowed([deny, allow], c_same, x, 81, "TCP")
    assert not connection_allowed([deny, allow], c_same, x, 80, "UDP")
    assert not connection_allowed([deny, allow], c_other, x, 80, "TCP")  # podSelector alone: own namespace
    assert not connection_allowed([deny], c_same, x, 80, "TCP")
    assert connection_allowed([], c_other, x, 80, "TCP")


def test_readme_tables_and_policy_file_are_where_the_docs_say() -> None:
    assert (BASE / "networkpolicies.yaml").exists()
    k = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    assert "networkpolicies.yaml" in k["resources"]
    assert Path(DEPLOY / "examples" / "networkpolicy-llm.yaml").exists()
    c = container(find(build(BASE), "Deployment", "keda-llm-scaler", NAMESPACE), "scaler")
    assert c["name"] == "scaler"
