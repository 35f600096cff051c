#!/usr/bin/env bash
# Regenerate the kubelet pod-resources v1 stubs (collectors/workloads/podresources/api_pb2*.py) from api.proto
# with grpcio-tools; the generated files are committed (no protoc at install time).
set -euo pipefail
cd "$(dirname "$0")/.."
out=collectors/workloads/podresources
.venv/bin/python -m grpc_tools.protoc -I"$out" --python_out="$out" --pyi_out="$out" --grpc_python_out="$out" "$out/api.proto"
# the generated grpc module imports `api_pb2` as a top-level module: make it the package's
sed -i 's/^import api_pb2 as api__pb2$/from collectors.workloads.podresources import api_pb2 as api__pb2/' "$out/api_pb2_grpc.py"
