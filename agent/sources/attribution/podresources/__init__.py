"""Generated gRPC stubs of the kubelet pod-resources v1 API (api.proto; do not edit)."""
