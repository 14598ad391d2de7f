"""The stubs shipped in src/cairn/v1/ are those of proto/cairn/v1/*.proto today: the
descriptors they carry equal what protoc (grpcio-tools) makes of the .proto files, and with the
generator version they name, their text is what scripts/generate_stubs.py writes.

After a change to a .proto: python3 clients/python/scripts/generate_stubs.py, and commit.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.dirname(HERE)
ROOT = os.path.dirname(os.path.dirname(PACKAGE))
SHIPPED = os.path.join(PACKAGE, "src", "cairn", "v1")
NAMES = ("kv", "watch")

protoc = pytest.importorskip("grpc_tools.protoc", reason="grpcio-tools compiles the .proto files")


def test_descriptors_equal_the_proto_files(tmp_path):
    from google.protobuf import descriptor_pb2

    from cairn.v1 import kv_pb2, watch_pb2

    out = tmp_path / "set.pb"
    include = os.path.join(os.path.dirname(protoc.__file__), "_proto")
    rc = protoc.main(["protoc", f"-I{os.path.join(ROOT, 'proto')}", f"-I{include}",
                      f"--descriptor_set_out={out}",
                      *[f"cairn/v1/{n}.proto" for n in NAMES]])
    assert rc == 0
    fresh = {f.name: f for f in descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file}
    for f in fresh.values():  # protoc adds json names to a descriptor set, not to the stubs
        for message in _messages(f.message_type):
            for field in message.field:
                field.ClearField("json_name")
    for module in (kv_pb2, watch_pb2):
        shipped = descriptor_pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb)
        assert shipped == fresh[shipped.name], (
            f"{shipped.name} changed since the stubs were generated: run "
            "clients/python/scripts/generate_stubs.py")
    # Every service method is in the grpc stubs.
    for name in NAMES:
        with open(os.path.join(SHIPPED, f"{name}_pb2_grpc.py")) as f:
            text = f.read()
        for service in fresh[f"cairn/v1/{name}.proto"].service:
            for method in service.method:
                assert f"'/cairn.v1.{service.name}/{method.name}'" in text, method.name


def _messages(messages):
    for m in messages:
        yield m
        yield from _messages(m.nested_type)


def test_text_equals_a_fresh_generation(tmp_path):
    import grpc_tools

    with open(os.path.join(SHIPPED, "kv_pb2_grpc.py")) as f:
        made_with = re.search(r"GRPC_GENERATED_VERSION = '([^']+)'", f.read()).group(1)
    version = getattr(grpc_tools, "__version__", None)
    if version is None:
        from importlib.metadata import version as dist_version
        version = dist_version("grpcio-tools")
    if version != made_with:
        pytest.skip(f"the stubs were made by grpcio-tools {made_with}, this is {version}: "
                    "the descriptor test above is the check")
    # Run the script on a copy of the package, so that the shipped files stay as they are.
    import shutil
    copy = tmp_path / "clients" / "python"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("*.egg-info", "__pycache__", "build"))
    os.symlink(os.path.join(ROOT, "proto"), tmp_path / "proto")
    subprocess.run([sys.executable, str(copy / "scripts" / "generate_stubs.py")], check=True,
                   capture_output=True)
    for name in os.listdir(SHIPPED):
        if name == "__pycache__":
            continue
        with open(os.path.join(SHIPPED, name)) as a, open(copy / "src" / "cairn" / "v1" / name) as b:
            assert a.read() == b.read(), f"{name} differs from a fresh generation"
