"""tests/ mirrors the packages: a test file sits in the folder of the package or module it tests
(tests/core/codecs/ for core/codecs/, tests/handlers/grpc_server/ for handlers/grpc_server.py),
in a cross-cutting suite, or at the top of tests/ (the whole project: infra, layers, protos).

No two test files share a basename: pytest's default import mode imports a test file of a folder
without __init__.py under its basename, so two files of one name would collide. Helper modules
(helpers.py, conftest.py imports) are imported by their full path (tests.core.helpers) and need
no unique name.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"

# Top-level folders of tests/ that mirror no package, each with the reason.
CROSS_CUTTING: dict[str, str] = {
    "conformance": "the Open Inference Protocol's REST spec against the whole server",
    "reliability": "bad input, faults, load and observability across every layer",
    "reload": "hot reload from the repository through the registry to the fronts",
    "examples": "examples/ end to end, through the real server",
}


def collected_files(tests: Path = TESTS) -> list[Path]:
    """The files pytest collects (its default python_files: test_*.py and *_test.py)."""
    found = set(tests.rglob("test_*.py")) | set(tests.rglob("*_test.py"))
    return sorted(path for path in found if "__pycache__" not in path.parts)


def shared_basenames(paths: Iterable[Path]) -> dict[str, list[Path]]:
    """Basename -> the files that carry it, for names more than one file carries."""
    by_name: dict[str, list[Path]] = {}
    for path in paths:
        by_name.setdefault(path.name, []).append(path)
    return {name: files for name, files in by_name.items() if len(files) > 1}


def unmirrored(paths: Iterable[Path], tests: Path = TESTS, root: Path = ROOT) -> list[Path]:
    """The test files whose folder is neither tests/ itself, a cross-cutting suite, nor the
    mirror of a package (a folder with __init__.py) or of a module (a .py file)."""
    return [path for path in paths if not _placed(path.parent.relative_to(tests).parts, root)]


def _placed(folder: tuple[str, ...], root: Path) -> bool:
    if not folder or folder[0] in CROSS_CUTTING:
        return True
    source = root.joinpath(*folder)
    return (source / "__init__.py").is_file() or source.with_suffix(".py").is_file()


def test_no_two_test_files_share_a_basename() -> None:
    assert shared_basenames(collected_files()) == {}


def test_every_test_file_sits_in_a_mirror_of_a_package_or_a_cross_cutting_suite() -> None:
    assert unmirrored(collected_files()) == []


def test_the_cross_cutting_suites_exist() -> None:
    assert [name for name in CROSS_CUTTING if not (TESTS / name).is_dir()] == []


def _touch(*paths: Path) -> None:
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()


def test_a_shared_basename_is_reported(tmp_path: Path) -> None:
    tests = tmp_path / "tests"
    one, two = tests / "core" / "test_x.py", tests / "handlers" / "test_x.py"
    _touch(one, two, tests / "core" / "test_y.py", tests / "core" / "conftest.py")
    assert shared_basenames(collected_files(tests)) == {"test_x.py": [one, two]}


def test_a_folder_that_mirrors_nothing_is_reported(tmp_path: Path) -> None:
    tests = tmp_path / "tests"
    _touch(
        tmp_path / "core" / "codecs" / "__init__.py",
        tmp_path / "handlers" / "grpc_server.py",
    )
    placed = [
        tests / "test_top.py",
        tests / "core" / "codecs" / "test_package.py",
        tests / "handlers" / "grpc_server" / "test_module.py",
        tests / "reliability" / "test_cross_cutting.py",
    ]
    stray = [
        tests / "core" / "test_no_package.py",  # core/ has no __init__.py here
        tests / "grpc" / "test_no_mirror.py",
        tests / "handlers" / "cli" / "test_no_module.py",
    ]
    _touch(*placed, *stray)
    assert unmirrored(collected_files(tests), tests, tmp_path) == sorted(stray)
