"""OpenAI-compatible text endpoints as OVMS serves them: embeddings, rerank, the model list and
tokenize (`/v3/...` and their `/v1/...` aliases)."""
