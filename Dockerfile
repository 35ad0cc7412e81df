# syntax=docker/dockerfile:1
# The eni-ipam image, controller and node agent: `docker build -t eni-ipam:0.1.0 .` (docs/deploy.md).
ARG PYTHON_IMAGE=python:3.12-slim

# -- builder: the project and its dependencies in a virtual environment ---------------------------
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /opt/venv
# Dependencies first, so source changes do not invalidate this layer. The stub package is removed with
# its build directory: left behind, build/lib's empty __init__.py (newer than the sources copied next)
# would be what the real install packs.
COPY pyproject.toml README.md ./
RUN mkdir -p eni_ipam providers \
    && touch eni_ipam/__init__.py providers/__init__.py \
    && /opt/venv/bin/pip install ".[azure]" \
    && /opt/venv/bin/pip uninstall --yes eni-ipam \
    && rm -rf build eni_ipam providers *.egg-info
COPY eni_ipam ./eni_ipam
COPY providers ./providers
COPY scripts/build_cni_plugin.py ./scripts/
RUN /opt/venv/bin/pip install --no-deps . \
    && /opt/venv/bin/eni-ipam --version \
    && mkdir -p /opt/eni-ipam \
    && python scripts/build_cni_plugin.py --output /opt/eni-ipam/eni-ipam-cni

# -- runtime: the interpreter and the virtual environment, nothing to build with -----------------
FROM ${PYTHON_IMAGE}
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="eni-ipam" \
      org.opencontainers.image.description="Cluster-level reconciler that keeps per-node pools of cloud secondary IPs and prefixes between watermarks" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH="/opt/venv/bin:${PATH}"
RUN groupadd --system --gid 65532 eni-ipam \
    && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin eni-ipam
COPY --from=builder /opt/venv /opt/venv
# The CNI plugin, for the node agent's init container to copy to the host (deploy/helm: agent.installCNI):
# one file, standard library only, run by the host's python3 (>= 3.11) as `python3 -I -S`
# (scripts/build_cni_plugin.py; docs/node.md, "The CNI plugin").
COPY --from=builder /opt/eni-ipam/eni-ipam-cni /opt/eni-ipam/eni-ipam-cni
USER 65532:65532
EXPOSE 9090
ENTRYPOINT ["eni-ipam"]
CMD ["run", "--config", "/etc/eni-ipam/config.yaml"]
