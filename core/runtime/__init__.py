"""OpenVINO and nothing about requests: how the host serves (host), compiled blobs (blobs),
reshaping (reshape, auto_shape), mapping_config.json aliases (aliases), dynamic batching
(batching), adaptive execution: one gathered compile or LATENCY/THROUGHPUT variants (adaptive),
background work waited for at exit (background), device names (devices)."""
