#!/usr/bin/env python3
"""Regenerates the gRPC stubs shipped in src/cairn/v1/ from the repository's proto/ folder.

    python3 -m pip install grpcio-tools     # the version in GENERATOR below, or newer
    python3 clients/python/scripts/generate_stubs.py

The stubs are committed (so `pip install ./clients/python` needs no code generation);
tests/test_stubs.py checks that the descriptors they carry equal what protoc makes of
proto/cairn/v1/*.proto today, so a .proto change without a regeneration fails the tests.
The generated code names the protobuf and grpcio versions it needs: pyproject.toml's
dependencies must say at least those (the script prints them).
"""

import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.dirname(HERE)
ROOT = os.path.dirname(os.path.dirname(PACKAGE))
PROTO = os.path.join(ROOT, "proto")
OUT = os.path.join(PACKAGE, "src")
FILES = [os.path.join("cairn", "v1", name) for name in ("kv.proto", "watch.proto")]


def main() -> int:
    from grpc_tools import protoc

    include = os.path.join(os.path.dirname(protoc.__file__), "_proto")
    rc = protoc.main(
        ["protoc", f"-I{PROTO}", f"-I{include}", f"--python_out={OUT}", f"--pyi_out={OUT}",
         f"--grpc_python_out={OUT}", *FILES]
    )
    if rc != 0:
        print("protoc failed", file=sys.stderr)
        return rc
    v1 = os.path.join(OUT, "cairn", "v1")
    with open(os.path.join(v1, "__init__.py"), "w") as f:
        f.write('"""Stubs generated from proto/cairn/v1/*.proto by scripts/generate_stubs.py."""\n')
    with open(os.path.join(v1, "kv_pb2.py")) as f:
        pb = re.search(r"Protobuf Python Version: (\S+)", f.read())
    with open(os.path.join(v1, "kv_pb2_grpc.py")) as f:
        grpc_version = re.search(r"GRPC_GENERATED_VERSION = '([^']+)'", f.read())
    print(f"generated into {v1}: needs protobuf>={pb and pb.group(1)}, "
          f"grpcio>={grpc_version and grpc_version.group(1)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
