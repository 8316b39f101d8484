"""Tensors as the server sees them, before any model: dtypes (numpy <-> OpenVINO <-> TF <->
KServe), shapes, limits checked before allocation, and spec (TensorSpec and the checks every
request passes; it decodes nothing)."""
