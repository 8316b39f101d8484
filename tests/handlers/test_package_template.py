"""template-zip.yaml: cfn-lint clean, and the real SAM transform gives a zip function on the
python runtime with SnapStart on published versions, reached only through its alias."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse

from core.config import Settings
from demo.models import save, scaler, write_demo_repository
from handlers import package
from tests.test_infra import MODEL_BUCKET_GRANTS, deployed, permissions, role_grants

ROOT = Path(__file__).parents[2]
TEMPLATE = ROOT / "template-zip.yaml"
LINT = "import sys; from cfnlint.runner import main; sys.argv[0] = 'cfn-lint'; sys.exit(main())"


def _lint(path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", LINT, str(path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


class _NoManagedPolicies:
    def load(self) -> dict[str, str]:
        return {}


@pytest.fixture(scope="module")
def cfn(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The template after the real SAM transform, linted."""
    sam = yaml_parse(TEMPLATE.read_text())
    # `sam deploy` uploads CodeUri's zip and puts its S3 location here; do the same
    sam["Resources"]["InferenceFunction"]["Properties"]["CodeUri"] = "s3://deploy-bucket/lambda.zip"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        cfn = transform(sam, {}, _NoManagedPolicies())
    out = tmp_path_factory.mktemp("sam") / "transformed.json"
    out.write_text(json.dumps(cfn))
    _lint(out)
    return dict(cfn)


@pytest.fixture(scope="module")
def resources(cfn: dict[str, Any]) -> dict[str, Any]:
    return dict(cfn["Resources"])


def test_cfn_lint_passes_on_the_template() -> None:
    _lint(TEMPLATE)


def test_zip_function_on_the_python_runtime_with_snapstart(resources: dict[str, Any]) -> None:
    function = resources["InferenceFunction"]["Properties"]
    assert function["SnapStart"] == {"ApplyOn": "PublishedVersions"}
    assert function["Handler"] == "handlers.aws_lambda.handler"
    assert function.get("PackageType", "Zip") == "Zip"
    assert function["Code"] == {"S3Bucket": "deploy-bucket", "S3Key": "lambda.zip"}
    template = yaml_parse(TEMPLATE.read_text())
    runtime = template["Parameters"]["PythonRuntime"]
    assert runtime["AllowedValues"] == [f"python{v}" for v in package.PYTHONS]
    storage = template["Parameters"]["EphemeralStorageSize"]
    assert storage["MaxValue"] <= 512 and storage["Default"] <= 512  # SnapStart's limit
    assert "FileSystemConfigs" not in function  # SnapStart takes no EFS
    kinds = {r["Type"] for r in resources.values()}
    assert "AWS::Lambda::Version" in kinds and "AWS::Lambda::Alias" in kinds
    assert not any(
        "ProvisionedConcurrencyConfig" in r.get("Properties", {}) for r in resources.values()
    )
    default = template["Parameters"]["ConfigPath"]["Default"]
    assert default == f"/var/task/{package.REPOSITORY_FOLDER}/config.json"
    module, name = function["Handler"].rsplit(".", 1)
    # resolved as the Lambda bootstrap does (import the module, look the name up), on an
    # instance with no models: the lookup runs the init phase, which answers 503, not raises
    resolve = (
        f"import importlib; module = importlib.import_module({module!r}); "
        f"print(callable(getattr(module, {name!r})))"
    )
    done = subprocess.run(
        [sys.executable, "-c", resolve],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT), "OVS_CONFIG_PATH": "/nonexistent.json"},
    )
    assert done.returncode == 0 and done.stdout.strip() == "True", done.stderr


def test_url_and_http_api_invoke_the_alias_not_latest(resources: dict[str, Any]) -> None:
    alias = next(name for name, r in resources.items() if r["Type"] == "AWS::Lambda::Alias")
    assert resources[alias]["Properties"]["Name"] == "live"
    url = resources["InferenceFunctionUrl"]["Properties"]
    assert url["TargetFunctionArn"] == {"Ref": alias}  # an alias's Ref is its ARN
    integration = resources["HttpApiIntegration"]["Properties"]
    assert integration["IntegrationUri"] == {"Ref": alias}
    permissions = [
        r["Properties"] for r in resources.values() if r["Type"] == "AWS::Lambda::Permission"
    ]
    assert permissions and all(p["FunctionName"] == {"Ref": alias} for p in permissions)


def test_function_url_none_is_public_on_the_alias(cfn: dict[str, Any]) -> None:
    """A NONE Function URL answers 403 unless the policy of what it invokes (the live alias)
    allows lambda:InvokeFunctionUrl and lambda:InvokeFunction (InvokedViaFunctionUrl) to
    everyone: SAM adds neither when AuthType is a !Ref. AWS_IAM grants nothing public."""
    res = deployed(cfn)["Resources"]  # the defaults: NONE
    assert res["InferenceFunctionUrl"]["Properties"]["AuthType"] == "NONE"
    alias = {"Ref": "InferenceFunctionAliaslive"}
    public = [p for p in permissions(res) if p["Principal"] == "*"]
    assert {
        "Action": "lambda:InvokeFunctionUrl",
        "FunctionName": alias,
        "Principal": "*",
        "FunctionUrlAuthType": "NONE",
    } in public
    assert {
        "Action": "lambda:InvokeFunction",
        "FunctionName": alias,
        "Principal": "*",
        "InvokedViaFunctionUrl": True,
    } in public
    res = deployed(cfn, FunctionUrlAuthType="AWS_IAM")["Resources"]
    assert res["InferenceFunctionUrl"]["Properties"]["AuthType"] == "AWS_IAM"
    assert [p for p in permissions(res) if p["Principal"] == "*"] == []


def _function_env(cfn: dict[str, Any], **parameters: str) -> dict[str, str]:
    function = deployed(cfn, **parameters)["Resources"]["InferenceFunction"]["Properties"]
    return dict(function["Environment"]["Variables"])


@pytest.mark.parametrize("form", ["config_path", "model_path"])
def test_each_baked_package_deploys_with_the_variables_its_build_names(
    cfn: dict[str, Any], form: str, tmp_path: Path
) -> None:
    """What `package lambda-zip` bakes (a config's folder, or one model's folder), deployed
    with the template's parameters as docs/deploy.md gives them, serves that repository: the
    function's OVS_* variables are the ones the build prints, and the settings read them
    without a config error."""
    staging = tmp_path / "staging"
    if form == "config_path":
        options = package.Options(config_path=write_demo_repository(tmp_path / "models"))
        parameters: dict[str, str] = {}  # the default ConfigPath
    else:
        save(scaler(2.0), tmp_path / "scaler" / "1")
        options = package.Options(model_path=tmp_path / "scaler", model_name="doubler")
        parameters = {"ModelPath": f"/var/task/{package.REPOSITORY_FOLDER}/doubler"}
        parameters["ModelName"] = "doubler"
    printed = package.bake(options, staging)
    env = _function_env(cfn, **parameters)
    assert {k: v for k, v in env.items() if k in printed} == printed
    location = {"OVS_CONFIG_PATH", "OVS_MODEL_PATH", "OVS_MODEL_NAME"}
    assert location & set(env) == location & set(printed)  # nothing else names models
    # the task root is where the build staged it
    local = {k: v.replace(package.TASK_ROOT, str(staging)) for k, v in env.items()}
    config = Settings.from_env(local).server_config()
    served = {model.name: Path(model.base_path) for model in config.models}
    assert set(served) == ({"classifier", "scaler"} if form == "config_path" else {"doubler"})
    assert all((folder / "1").is_dir() for folder in served.values())


def test_the_role_reads_the_model_bucket_and_nothing_more(cfn: dict[str, Any]) -> None:
    bucket = {"ModelBucket": "models", "ConfigPath": "s3://models/config.json"}
    assert role_grants(deployed(cfn, **bucket)["Resources"]) == MODEL_BUCKET_GRANTS
    assert role_grants(deployed(cfn)["Resources"]) == set()  # baked models: no bucket


def _http_api_auth(resources: dict[str, Any]) -> list[str]:
    """The authorization of every way into the HTTP API: each route resource's, or each
    operation's of an OpenAPI body (SAM's events), where no `security` means NONE."""
    auth = []
    for resource in resources.values():
        props = resource.get("Properties", {})
        if resource["Type"] == "AWS::ApiGatewayV2::Route":
            auth.append(props["AuthorizationType"])
        if resource["Type"] == "AWS::ApiGatewayV2::Api" and "Body" in props:
            for operations in props["Body"]["paths"].values():
                for operation in operations.values():
                    auth.append("AWS_IAM" if operation.get("security") else "NONE")
    return auth


def test_aws_iam_signs_the_http_api_too(cfn: dict[str, Any]) -> None:
    """FunctionUrlAuthType is the stack's one auth choice, as in template.yaml: with AWS_IAM
    the HTTP API takes only SigV4-signed calls as well; with NONE both are public."""
    assert set(_http_api_auth(deployed(cfn)["Resources"])) == {"NONE"}
    signed = deployed(cfn, FunctionUrlAuthType="AWS_IAM")["Resources"]
    assert set(_http_api_auth(signed)) == {"AWS_IAM"}
