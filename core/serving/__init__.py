"""Servables and their registry: model versions (model), stateful models (stateful), DAG
pipelines (pipeline) and their custom nodes (custom_nodes), and the ModelManager that loads,
reloads and looks them up (registry)."""
