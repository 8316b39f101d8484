"""`ov-serverless package lambda-zip OUT.zip`: a Lambda zip package (python runtime, SnapStart).

The build, in order:
  1. resolve the project's dependencies (and the chosen extras) for the Lambda platform: CPython
     3.12/3.13 and the manylinux tags Amazon Linux 2023's glibc 2.34 can load, wheels only
     (`pip install --dry-run --report` with `--platform`/`--python-version`/`--implementation`);
  2. download those exact wheels into a folder under pip's cache (a second build reuses them);
  3. install them with `pip install --target` into a staging folder, copy the project's own
     packages beside them, and bake in a model repository when one is given;
  4. prune what Lambda never uses: OpenVINO's GPU/NPU plugins (and the GPU kernel cache), the
     frontends the baked models do not need, headers, CMake/pkg-config files, type stubs, tests,
     `__pycache__`;
  5. byte-compile every module with a CPython of the target version when this machine has one
     (Lambda's /var/task is read-only: without .pyc files each cold start compiles every module
     it imports); hash-based .pyc files that name /var/task paths, so the bytes do not depend
     on when or where the build ran;
  6. refuse a result over Lambda's unzipped limit, listing its biggest items;
  7. write a deterministic zip: sorted entries, a fixed timestamp, modes 0644/0755 only.

The managed runtime supplies awslambdaric and snapshot-restore-py: they are not packaged.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

LAMBDA_UNZIPPED_LIMIT = 262_144_000  # bytes, function code and layers, unzipped
AL2023_GLIBC = (2, 34)  # the glibc of Amazon Linux 2023, which the python3.12+ runtimes run on
ARCHES = {"x86_64": "x86_64", "arm64": "aarch64"}  # Lambda's name -> the wheel tags' name
PYTHONS = ("3.12", "3.13")  # the runtimes with SnapStart
PROJECT_PACKAGES = ("core", "handlers", "demo")  # protos only serve gRPC, which Lambda has not
RUNTIME_PROVIDED = {"awslambdaric", "snapshot-restore-py"}  # in the managed runtime already
REPOSITORY_FOLDER = "model_repository"  # baked repository, under the task root
TASK_ROOT = "/var/task"  # LAMBDA_TASK_ROOT: where Lambda unzips the package
ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip entry can hold
# the frontend each model file needs; IR (.xml) is read by libopenvino_ir_frontend
FRONTENDS = {
    ".xml": "ir",
    ".onnx": "onnx",
    ".tflite": "tensorflow_lite",
    ".pb": "tensorflow",
    ".pdmodel": "paddle",
    ".gguf": "gguf",
}
ALL_FRONTENDS = ("ir", "onnx", "tensorflow", "tensorflow_lite", "paddle", "pytorch", "jax", "gguf")
NEVER_FRONTENDS = ("pytorch", "jax")  # they convert in-memory framework objects, not files
PRUNED_LIBS = (
    "libopenvino_intel_gpu_plugin.so",
    "libopenvino_intel_npu_plugin.so",
    "libopenvino_c.so",  # the C API: Python uses the C++ one
    "cache.json",
)  # the GPU plugin's kernel cache
PRUNED_DIRS = {"tests", "__pycache__", "include", "cmake", "pkgconfig"}
PRUNED_SUFFIXES = (".pyi", ".pyc", ".pc", ".h", ".hpp")


class PackageError(Exception):
    """A build that cannot produce a usable package; the message says why and what to do."""


@dataclass(frozen=True)
class Target:
    arch: str = "x86_64"  # Lambda's name: x86_64 | arm64
    python: str = "3.12"

    @property
    def machine(self) -> str:
        return ARCHES[self.arch]

    def platforms(self, glibc: tuple[int, int] = AL2023_GLIBC) -> list[str]:
        """Every manylinux tag a glibc of this version loads (pip does not expand them)."""
        tags = [f"manylinux_2_{minor}_{self.machine}" for minor in range(glibc[1], 16, -1)]
        return [*tags, f"manylinux2014_{self.machine}"]

    def pip_options(self, glibc: tuple[int, int] = AL2023_GLIBC) -> list[str]:
        options = ["--implementation", "cp", "--python-version", self.python, "--only-binary=:all:"]
        for platform in self.platforms(glibc):
            options += ["--platform", platform]
        return options


@dataclass
class Report:
    out: Path
    unzipped_bytes: int = 0
    zipped_bytes: int = 0
    pruned: list[tuple[str, int]] = field(default_factory=list)
    wheels: list[str] = field(default_factory=list)
    frontends: tuple[str, ...] = ()
    environment: dict[str, str] = field(default_factory=dict)
    bytecode: str = ""  # the interpreter that compiled the .pyc files, "" when none did

    def lines(self) -> list[str]:
        pruned = sum(size for _, size in self.pruned)
        lines = [
            f"wrote {self.out}",
            f"unzipped {self.unzipped_bytes:,} bytes ({_mib(self.unzipped_bytes)}) of "
            f"Lambda's {LAMBDA_UNZIPPED_LIMIT:,}; zipped {self.zipped_bytes:,} bytes "
            f"({_mib(self.zipped_bytes)})",
            f"wheels: {', '.join(self.wheels)}",
            f"OpenVINO frontends kept: {', '.join(self.frontends)}",
            f"bytecode: compiled by {self.bytecode}"
            if self.bytecode
            else "bytecode: none (no CPython of the target version here): each cold start "
            "compiles the modules it imports",
            f"pruned {len(self.pruned)} items, {pruned:,} bytes ({_mib(pruned)}):",
        ]
        lines += [f"  {path}  {_mib(size)}" for path, size in _biggest(self.pruned, 12)]
        if len(self.pruned) > 12:
            lines.append(f"  ... and {len(self.pruned) - 12} smaller items")
        if self.environment:
            lines.append(
                "set on the function: "
                + " ".join(f"{k}={v}" for k, v in sorted(self.environment.items()))
            )
        return lines


@dataclass(frozen=True)
class Options:
    target: Target = Target()
    config_path: Path | None = None  # an OVMS config.json to bake in with its folder
    model_path: Path | None = None  # one model's folder (versions inside) to bake in
    model_name: str = ""
    extras: tuple[str, ...] = ()
    frontends: tuple[str, ...] = ()  # empty: those the baked models need (all when none baked)
    allow_older_openvino: bool = False
    bytecode: bool = True  # compile .pyc files when a CPython of the target version is here
    wheel_cache: Path | None = None  # default: <pip cache dir>/ov-serverless-lambda


def build(out: Path, options: Options) -> Report:
    """Build the zip at `out` and say what went in and what was pruned."""
    check_inputs(options)  # before any download: a mistake fails in a second
    target = options.target
    requirements = project_requirements(options.extras)
    resolved = resolve(requirements, target)
    _check_openvino(resolved, requirements, target, options.allow_older_openvino)
    wheels = download(resolved, target, options.wheel_cache or default_wheel_cache(target))
    report = Report(out, wheels=[w.name for w in wheels])
    with tempfile.TemporaryDirectory(prefix="ovs-lambda-") as tmp:
        staging = Path(tmp, "task")
        install(wheels, target, staging)
        copy_project(staging)
        report.environment = bake(options, staging)
        report.frontends = frontends_needed(options, staging)
        report.pruned = prune(staging, report.frontends)
        if options.bytecode:
            report.bytecode = compile_bytecode(staging, target)
        report.unzipped_bytes = check_size(staging)
        out.parent.mkdir(parents=True, exist_ok=True)
        write_zip(staging, out)
    report.zipped_bytes = out.stat().st_size
    return report


# -- what to install ---------------------------------------------------------------------------


def project_root() -> Path:
    return Path(__file__).resolve().parents[1]


def project_requirements(extras: Iterable[str]) -> list[str]:
    """The project's dependencies and those of `extras`, less what the runtime provides."""
    wanted, optional = _declared_requirements()
    for extra in extras:
        if extra not in optional or extra == "dev":
            known = ", ".join(sorted(set(optional) - {"dev"}))
            raise PackageError(f"unknown extra {extra!r}; the extras are: {known}")
        wanted += optional[extra]
    return [r for r in wanted if _name(r) not in RUNTIME_PROVIDED]


def _declared_requirements() -> tuple[list[str], dict[str, list[str]]]:
    """(dependencies, {extra: its dependencies}) from pyproject.toml in a checkout, else
    from the installed distribution's metadata."""
    import tomllib
    from importlib.metadata import requires

    pyproject = project_root() / "pyproject.toml"
    if pyproject.is_file():
        project = tomllib.loads(pyproject.read_text())["project"]
        return list(project["dependencies"]), dict(project.get("optional-dependencies", {}))
    base: list[str] = []
    optional: dict[str, list[str]] = {}
    for requirement in requires("ov-serverless") or []:
        spec, _, marker = requirement.partition(";")
        extra = re.fullmatch(r"\s*extra\s*==\s*[\"']([^\"']+)[\"']\s*", marker)
        if extra:
            optional.setdefault(extra.group(1), []).append(spec.strip())
        elif not marker.strip():
            base.append(spec.strip())
    return base, optional


def _name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9._-]+", requirement)
    return re.sub(r"[-_.]+", "-", match.group(0) if match else requirement).lower()


@dataclass(frozen=True)
class Resolved:
    name: str
    version: str
    url: str

    @property
    def filename(self) -> str:
        return self.url.rsplit("/", 1)[-1].split("#", 1)[0]


def resolve(
    requirements: list[str], target: Target, glibc: tuple[int, int] = AL2023_GLIBC
) -> list[Resolved]:
    """The wheels pip picks for `target` (metadata only: nothing is downloaded)."""
    with tempfile.TemporaryDirectory(prefix="ovs-resolve-") as tmp:
        report = Path(tmp, "report.json")
        _pip(
            "install",
            "--dry-run",
            "--ignore-installed",
            "--quiet",
            "--report",
            str(report),
            "--target",
            str(Path(tmp, "none")),
            *target.pip_options(glibc),
            *requirements,
            what=f"resolving the dependencies for CPython {target.python} on {target.arch} Lambda",
        )
        items = json.loads(report.read_text())["install"]
    return sorted(
        (
            Resolved(
                _name(item["metadata"]["name"]),
                item["metadata"]["version"],
                item["download_info"]["url"],
            )
            for item in items
        ),
        key=lambda r: r.name,
    )


def _check_openvino(
    resolved: list[Resolved], requirements: list[str], target: Target, allow_older: bool
) -> None:
    """Stop when the newest openvino has no wheel that Lambda's glibc loads (arm64 today),
    unless the user asked for the newest one that loads."""
    ours = next((r for r in resolved if r.name == "openvino"), None)
    spec = next((r for r in requirements if _name(r) == "openvino"), "openvino")
    newest = resolve([spec], target, glibc=(2, 99))
    latest = next((r for r in newest if r.name == "openvino"), None)
    if ours is None or latest is None or ours.version == latest.version or allow_older:
        return
    needs = re.search(r"manylinux_(\d+)_(\d+)", latest.filename)
    glibc = f"glibc {needs.group(1)}.{needs.group(2)}" if needs else "a newer glibc"
    raise PackageError(
        f"openvino {latest.version} for {target.arch} needs {glibc} ({latest.filename}); "
        f"Lambda's Amazon Linux 2023 has glibc {AL2023_GLIBC[0]}.{AL2023_GLIBC[1]}. The "
        f"newest openvino that loads there is {ours.version}: pass --allow_older_openvino to "
        "build with it, or deploy the container image (template.yaml), which brings its "
        "own glibc."
    )


# -- download and install ----------------------------------------------------------------------


def default_wheel_cache(target: Target) -> Path:
    folder = subprocess.run(
        [sys.executable, "-m", "pip", "cache", "dir"], capture_output=True, text=True, check=False
    ).stdout.strip()
    base = (
        Path(folder)
        if folder and not folder.startswith("ERROR")
        else Path.home() / ".cache" / "pip"
    )
    return base / "ov-serverless-lambda" / f"cp{target.python.replace('.', '')}-{target.arch}"


def download(resolved: list[Resolved], target: Target, cache: Path) -> list[Path]:
    """The resolved wheels, from `cache` when there, else downloaded into it."""
    cache.mkdir(parents=True, exist_ok=True)
    missing = [r for r in resolved if not (cache / r.filename).is_file()]
    if missing:
        _pip(
            "download",
            "--no-deps",
            "--quiet",
            "--dest",
            str(cache),
            *target.pip_options(),
            *[f"{r.name}=={r.version}" for r in missing],
            what="downloading the wheels",
        )
    wheels = [cache / r.filename for r in resolved]
    absent = [w.name for w in wheels if not w.is_file()]
    if absent:
        raise PackageError(f"pip did not download {', '.join(absent)}")
    return wheels


def install(wheels: list[Path], target: Target, staging: Path) -> None:
    _pip(
        "install",
        "--no-deps",
        "--no-index",
        "--no-compile",
        "--quiet",
        "--target",
        str(staging),
        *target.pip_options(),
        *map(str, wheels),
        what="installing the wheels into the staging folder",
    )
    for leftover in staging.glob("bin"):  # console scripts: nothing on Lambda runs them
        shutil.rmtree(leftover)


def _pip(*args: str, what: str) -> None:
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "pip", *args], capture_output=True, text=True, env=env, check=False
    )
    if done.returncode != 0:
        errors = [
            line
            for line in done.stderr.splitlines()
            if line.strip() and not line.startswith("WARNING")
        ]
        raise PackageError(f"pip failed {what}:\n" + "\n".join(errors[-15:]))


def copy_project(staging: Path) -> None:
    root = project_root()
    for package in PROJECT_PACKAGES:
        shutil.copytree(
            root / package, staging / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )


# -- the model repository ------------------------------------------------------------------------


def check_inputs(options: Options) -> None:
    if options.target.arch not in ARCHES:
        raise PackageError(
            f"--arch must be one of {', '.join(ARCHES)}, not {options.target.arch!r}"
        )
    unknown = set(options.frontends) - set(ALL_FRONTENDS)
    if unknown:
        raise PackageError(
            f"unknown frontend {', '.join(sorted(unknown))}; the frontends "
            f"are: {', '.join(ALL_FRONTENDS)}"
        )
    if options.config_path is not None and options.model_path is not None:
        raise PackageError("give --config_path or --model_path, not both")
    if options.config_path is not None:
        if not options.config_path.is_file():
            raise PackageError(f"--config_path {options.config_path}: no such file")
        _check_relative(options.config_path)
    if options.model_path is not None and not options.model_path.is_dir():
        raise PackageError(f"--model_path {options.model_path}: no such folder")
    project_requirements(options.extras)  # an unknown extra


def bake(options: Options, staging: Path) -> dict[str, str]:
    """Copy the repository under the task root; -> the env the function needs to serve it."""
    dest = staging / REPOSITORY_FOLDER
    if options.config_path is not None:
        config = options.config_path
        shutil.copytree(config.parent, dest, ignore=_repository_ignore)
        return {"OVS_CONFIG_PATH": f"{TASK_ROOT}/{REPOSITORY_FOLDER}/{config.name}"}
    if options.model_path is not None:
        name = options.model_name or options.model_path.name
        shutil.copytree(options.model_path, dest / name, ignore=_repository_ignore)
        return {"OVS_MODEL_PATH": f"{TASK_ROOT}/{REPOSITORY_FOLDER}/{name}", "OVS_MODEL_NAME": name}
    return {}


def _repository_ignore(folder: str, names: list[str]) -> list[str]:
    return [n for n in names if n in ("__pycache__", "cache", ".git")]


def _check_relative(config: Path) -> None:
    """A baked config must name its models by paths inside its folder (or bucket URLs)."""
    try:
        document = json.loads(config.read_text())
    except ValueError as exc:
        raise PackageError(f"--config_path {config.name} is not JSON: {exc}") from None
    for entry in document.get("model_config_list", []):
        base = str((entry.get("config") or {}).get("base_path", ""))
        if "://" in base:
            continue
        inside = (config.parent / base).resolve()
        if Path(base).is_absolute() or not inside.is_relative_to(config.parent.resolve()):
            raise PackageError(
                f"model base_path {base!r} is outside the config's folder: a baked "
                "repository must use paths relative to config.json (or bucket URLs)"
            )


def frontends_needed(options: Options, staging: Path) -> tuple[str, ...]:
    if options.frontends:
        return tuple(sorted({*options.frontends, "ir"}))
    repository = staging / REPOSITORY_FOLDER
    if not repository.is_dir() or _reads_buckets(options):
        return tuple(f for f in ALL_FRONTENDS if f not in NEVER_FRONTENDS)
    found = {FRONTENDS[p.suffix] for p in repository.rglob("*") if p.suffix in FRONTENDS}
    return tuple(sorted(found | {"ir"}))


def _reads_buckets(options: Options) -> bool:
    """A baked config that names bucket URLs: their formats are unknown when building."""
    if options.config_path is None:
        return False
    return "://" in options.config_path.read_text()


# -- bytecode ------------------------------------------------------------------------------------

_PRINT_VERSION = "import sys; print('%d.%d' % sys.version_info[:2])"


def find_python(version: str) -> str | None:
    """A CPython of `version` here (PATH, then pyenv's versions), or None."""
    import glob

    found = [
        shutil.which(f"python{version}"),
        *sorted(
            glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python{version}")),
            reverse=True,
        ),
    ]
    for candidate in filter(None, found):
        done = subprocess.run(
            [candidate, "-c", _PRINT_VERSION], capture_output=True, text=True, check=False
        )
        if done.returncode == 0 and done.stdout.strip() == version:
            return candidate
    return None


def compile_bytecode(staging: Path, target: Target, root: str = TASK_ROOT) -> str:
    """.pyc files for the target CPython, naming sources under `root` (where Lambda puts
    the folder); -> what compiled them, "" when no such CPython is here."""
    python = find_python(target.python)
    if python is None:
        return ""
    done = subprocess.run(
        [
            python,
            "-m",
            "compileall",
            "-q",
            "-q",
            "--invalidation-mode",
            "unchecked-hash",
            "-s",
            str(staging),
            "-p",
            root,
            str(staging),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise PackageError(
            f"compiling the modules with {python} failed:\n{(done.stdout + done.stderr)[-2000:]}"
        )
    return f"CPython {target.python}"


# -- prune, measure, zip -------------------------------------------------------------------------


def prune(staging: Path, frontends: Iterable[str]) -> list[tuple[str, int]]:
    """Delete what Lambda never uses; -> (path, bytes) of each item removed."""
    keep = set(frontends)
    doomed = [p for p in _walk(staging) if _prunable(p.relative_to(staging), keep)]
    pruned = []
    for path in doomed:
        if not path.exists():  # inside a folder removed before it
            continue
        pruned.append((path.relative_to(staging).as_posix(), _size(path)))
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
    return pruned


def _walk(folder: Path) -> Iterator[Path]:
    for path in sorted(folder.iterdir()):
        yield path
        if path.is_dir() and not path.is_symlink():
            yield from _walk(path)


def _prunable(rel: Path, frontends: set[str]) -> bool:
    if rel.parts[0] == REPOSITORY_FOLDER:
        return False
    name = rel.name
    if rel.parts[0] == "openvino":
        frontend = _frontend_of(rel)
        if frontend and frontend not in frontends:
            return True
        if rel.parts[:2] == ("openvino", "torch"):  # torch.compile backend: needs torch
            return True
        if any(name.startswith(lib) for lib in PRUNED_LIBS):
            return True
    return name in PRUNED_DIRS or name.endswith(PRUNED_SUFFIXES)


def _frontend_of(rel: Path) -> str:
    """The frontend a file of the openvino package belongs to, or ''."""
    match = re.fullmatch(r"libopenvino_(\w+?)_frontend\.so.*", rel.name)
    if match:
        return match.group(1)
    if len(rel.parts) >= 3 and rel.parts[1] == "frontend" and (rel.parts[2] in ALL_FRONTENDS):
        return rel.parts[2]
    return ""


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size


def check_size(staging: Path) -> int:
    total = _size(staging)
    if total > LAMBDA_UNZIPPED_LIMIT:
        items = [
            (p.relative_to(staging).as_posix(), _size(p))
            for p in _walk(staging)
            if p.is_file() or p.parent == staging
        ]
        biggest = "\n".join(f"  {path}  {_mib(size)}" for path, size in _biggest(items, 15))
        raise PackageError(
            f"the package is {total:,} bytes unzipped ({_mib(total)}), over Lambda's limit of "
            f"{LAMBDA_UNZIPPED_LIMIT:,} bytes by {_mib(total - LAMBDA_UNZIPPED_LIMIT)}. "
            f"The biggest items:\n{biggest}\nKeep the models in a bucket (no --config_path), "
            "keep fewer frontends (--frontends), or deploy the container image."
        )
    return total


def write_zip(staging: Path, out: Path) -> None:
    """Same files, same bytes: sorted entries, one timestamp, modes 0644 or 0755."""
    files = sorted(
        (p for p in staging.rglob("*") if p.is_file()),
        key=lambda p: p.relative_to(staging).as_posix(),
    )
    partial = out.with_name(out.name + ".partial")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in files:
            info = zipfile.ZipInfo(path.relative_to(staging).as_posix(), ZIP_TIME)
            executable = path.stat().st_mode & stat.S_IXUSR
            info.external_attr = (stat.S_IFREG | (0o755 if executable else 0o644)) << 16
            info.create_system = 3  # unix: the modes above apply
            info.compress_type = zipfile.ZIP_DEFLATED
            with path.open("rb") as source, archive.open(info, "w") as sink:
                shutil.copyfileobj(source, sink, 1 << 20)
    partial.replace(out)


def _biggest(items: list[tuple[str, int]], count: int) -> list[tuple[str, int]]:
    return sorted(items, key=lambda item: (-item[1], item[0]))[:count]


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"


# -- command line --------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("kind", choices=["lambda-zip"])
    parser.add_argument("out", help="the zip to write")
    parser.add_argument("--arch", choices=list(ARCHES), default="x86_64")
    parser.add_argument("--python", choices=PYTHONS, default="3.12")
    parser.add_argument(
        "--config_path",
        type=Path,
        help="bake this config.json and the models in its folder into the zip",
    )
    parser.add_argument("--model_path", type=Path, help="bake this model folder into the zip")
    parser.add_argument(
        "--model_name", default="", help="with --model_path (default: its folder's name)"
    )
    parser.add_argument(
        "--extras",
        default="",
        help="comma-separated extras of the project "
        "to install (e.g. aws for boto3); awslambdaric comes with the runtime",
    )
    parser.add_argument(
        "--frontends",
        default="",
        help="comma-separated OpenVINO frontends to "
        f"keep ({', '.join(ALL_FRONTENDS)}; default: those the baked models "
        "need, all but pytorch and jax when none is baked)",
    )
    parser.add_argument(
        "--allow_older_openvino",
        action="store_true",
        help="build with the newest openvino Lambda's glibc loads when the "
        "newest release needs a newer one (arm64)",
    )


def main(args: argparse.Namespace) -> int:
    options = Options(
        Target(args.arch, args.python),
        args.config_path,
        args.model_path,
        args.model_name,
        _split(args.extras),
        _split(args.frontends),
        args.allow_older_openvino,
    )
    try:
        report = build(Path(args.out), options)
    except PackageError as exc:
        print(f"ov-serverless: {exc}", file=sys.stderr)
        return 1
    print("\n".join(report.lines()))
    return 0


def _split(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())
