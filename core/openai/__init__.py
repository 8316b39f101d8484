"""The text models behind the OpenAI-compatible routes, as OVMS serves them: embeddings and
rerank model versions (tokenizer + transformer), their options and folder layout. The routes'
bodies are core/codecs/openai.py; the calls, core/dataplane.py."""
