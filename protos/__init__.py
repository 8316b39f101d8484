"""Vendored .proto sources and the Python modules generated from them.

Generated modules live under ``protos.gen`` (see protos/README.md); their descriptors are
registered in the private pool :data:`protos.pool.POOL`, not protobuf's default pool.
"""
