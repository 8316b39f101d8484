"""OpenVINO and nothing about requests: compiled-blob cache and host defaults (compiled_cache),
reshaping (reshape, auto_shape), mapping_config.json aliases (mapping), dynamic batching
(batching), adaptive LATENCY/THROUGHPUT variants (adaptive), device names (devices)."""
