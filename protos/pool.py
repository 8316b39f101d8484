"""The private descriptor pool that every module under ``protos.gen`` registers into.

Why not protobuf's default pool: tritonclient registers package ``inference`` there (as
"grpc_service.proto"), and TensorFlow / tensorflow-serving-api register
"tensorflow/core/framework/tensor.proto" etc. with different contents. Adding ours to the
same pool would fail with "duplicate symbol" / "duplicate file name" as soon as both are
imported in one process. A separate pool keeps the wire format identical (same package
names, message names and field numbers) while letting the modules coexist.
"""

from __future__ import annotations

from google.protobuf import any_pb2, descriptor_pool, wrappers_pb2
from google.protobuf.descriptor import FileDescriptor

POOL = descriptor_pool.DescriptorPool()


def adopt(file: FileDescriptor) -> None:
    """Add a file descriptor from another pool (and its imports) to :data:`POOL`.

    Used for the well-known types our protos import, and useful to make another module's
    services visible to gRPC reflection served from POOL, e.g.
    ``adopt(grpc_health.v1.health_pb2.DESCRIPTOR)``. A file already in POOL is skipped.
    """
    try:
        POOL.FindFileByName(file.name)
        return
    except KeyError:
        pass
    for dep in file.dependencies:
        adopt(dep)
    POOL.AddSerializedFile(file.serialized_pb)


for _wkt in (any_pb2, wrappers_pb2):
    adopt(_wkt.DESCRIPTOR)
