"""`ov-serverless export-blobs OUT`: load every model as a server with the same settings would
and write each version's compiled blob to OUT (for OVS_COMPILED_CACHE) or, with --per_version,
beside each version (local or in the bucket)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from core.config import Settings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("out")
    parser.add_argument(
        "--per_version",
        action="store_true",
        help="write OUT/<model>/<version>/.ov-compiled/<key>.blob, to copy "
        "beside each version, instead of OUT/<key>.blob "
        "(OVS_COMPILED_CACHE)",
    )


def main(settings: Settings, args: argparse.Namespace) -> int:
    """Print each blob written (and, per version, where it goes); exit 1 when a version did
    not load, so a build step that bakes blobs fails instead of shipping without one."""
    from core.runtime.blobs import export_manager
    from core.serving.registry import ModelManager

    manager = ModelManager.start(settings)
    out = Path(args.out)
    try:
        blobs = export_manager(manager, out, per_version=args.per_version)
    except OSError as exc:
        print(
            f"ov-serverless: cannot write the blobs to {out}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return 1
    for blob in blobs:
        if args.per_version:
            model, *rest = blob.relative_to(out).parts
            base = manager.models[model].config.base_path.rstrip("/")
            print(f"{blob} -> {base}/{'/'.join(rest)}")
        else:
            print(blob)
    return _report_unexported(manager)


def _report_unexported(manager: Any) -> int:
    code = 0
    for served in manager.models.values():
        if served.error or not served.versions:
            why = served.error or "no version to load"
            print(f"ov-serverless: model {served.name}: {why}", file=sys.stderr)
            code = 1
        for number, version in sorted(served.versions.items()):
            if not version.available:
                print(
                    f"ov-serverless: model {served.name} version {number} did not load: "
                    f"{version.status.error_message}",
                    file=sys.stderr,
                )
                code = 1
            elif not served.config.allow_cache:
                print(
                    f"ov-serverless: model {served.name} version {number}: no blob "
                    "(allow_cache is false)",
                    file=sys.stderr,
                )
    return code
