# syntax=docker/dockerfile:1
# wva-adapter image: a builder stage that generates the gRPC stubs and builds the wheel, and a runtime stage
# that holds only the installed virtualenv (no compilers, no grpcio-tools, no pip), running as a numeric
# non-root user so that `runAsNonRoot: true` can be verified by the kubelet.
#   docker build -t wva-adapter:0.1.0 .
ARG PYTHON_IMAGE=python:3.11-slim

# ---- builder ---------------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
# Build-time only: protoc for the KEDA external scaler stubs (installed in the builder's system Python, never
# copied to the runtime stage).
RUN python -m pip install "grpcio-tools>=1.66,<2"
COPY pyproject.toml README.md ./
COPY proto/ proto/
COPY adapter/ adapter/
# The same command as `make proto`; the stubs are generated, never committed.
RUN mkdir -p adapter/servers/_keda_pb \
    && python -m grpc_tools.protoc -Iadapter/servers/_keda_pb=proto \
        --python_out=. --pyi_out=. --grpc_python_out=. proto/externalscaler.proto \
    && touch adapter/servers/_keda_pb/__init__.py
RUN python -m pip wheel --no-deps --wheel-dir /wheels . \
    && python -m venv --without-pip /opt/venv \
    && python -m pip --python /opt/venv/bin/python install --compile /wheels/*.whl \
    && /opt/venv/bin/python -c "import adapter.servers._keda_pb.externalscaler_pb2_grpc"

# ---- runtime ---------------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="wva-adapter" \
      org.opencontainers.image.description="LLM Workload Variant Autoscaler: External Metrics API + KEDA scaler" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
COPY --from=builder /opt/venv /opt/venv
USER 65532:65532
# 6443 External Metrics API (HTTPS), 50051 KEDA external scaler (gRPC), 8080 /metrics, 8081 /healthz /readyz
EXPOSE 6443 50051 8080 8081
ENTRYPOINT ["wva-adapter"]
CMD ["serve"]
