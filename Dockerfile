# syntax=docker/dockerfile:1
# The eni-ipam image, controller and node agent: `docker build -t eni-ipam:0.7.0 .` (docs/deploy.md).
#
# Reproducible: the base is pinned by digest (BASE_IMAGE substitutes it, e.g. a mirror or the Debian
# base scripts/build_image.py makes where no registry is reachable), and every dependency is installed
# from requirements/*.txt with --require-hashes (`make lock` refreshes them; decision 0015).
ARG BASE_IMAGE=python:3.12-slim-bookworm@sha256:782412e85d0f0984994c290652577d4018aff08145c85b262bb63dc0c7522254

# -- builder: the project and its dependencies in a virtual environment without pip ---------------
FROM ${BASE_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_INPUT=1
WORKDIR /src
# Two environments: /opt/build holds pip and the build backend (hash-pinned), /opt/venv (what ships)
# gets only the locked dependencies and the project, installed into it from outside: it never
# contains pip, setuptools or wheel.
COPY requirements/ ./requirements/
RUN python3 -m venv /opt/build \
    && /opt/build/bin/pip install --require-hashes --no-deps -r requirements/build.txt \
    && python3 -m venv --without-pip /opt/venv \
    && /opt/build/bin/pip --python /opt/venv/bin/python3 install --require-hashes --no-deps \
       -r requirements/image.txt
COPY pyproject.toml README.md ./
COPY eni_ipam ./eni_ipam
COPY providers ./providers
COPY scripts/build_cni_plugin.py ./scripts/
RUN /opt/build/bin/pip wheel --no-deps --no-build-isolation --wheel-dir /tmp/wheel . \
    && /opt/build/bin/pip --python /opt/venv/bin/python3 install --no-deps /tmp/wheel/*.whl \
    && /opt/venv/bin/eni-ipam --version \
    && mkdir -p /opt/eni-ipam \
    && /opt/venv/bin/python3 scripts/build_cni_plugin.py --output /opt/eni-ipam/eni-ipam-cni

# -- runtime: the interpreter and the virtual environment, nothing to build or install with -----
FROM ${BASE_IMAGE}
ARG VERSION=0.7.0
LABEL org.opencontainers.image.title="eni-ipam" \
      org.opencontainers.image.description="Cluster-level reconciler that keeps per-node pools of cloud secondary IPs and prefixes between watermarks" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH="/opt/venv/bin:${PATH}"
# No installer in the final image: the base's own pip, setuptools and wheel go (the venv never had
# them), and so does ensurepip, which carries a pip wheel of its own (`python -m venv` would install
# it): nothing in a running container can fetch and install code. Both bases: python's image keeps
# its stdlib in /usr/local/lib/python3.X, Debian's python3 in /usr/lib/python3.X.
# The node datapath's SNAT table is written by nftables' own tool, nft (docs/decisions/0036): Debian's
# package at the version bookworm ships, pinned so that a rebuild installs it or fails, never another;
# apt's lists are removed with the install. Nothing else comes from apt.
ARG NFTABLES_VERSION=1.0.6-2+deb12u2
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "nftables=${NFTABLES_VERSION}" \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb \
    && nft --version
RUN groupadd --system --gid 65532 eni-ipam \
    && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin eni-ipam \
    && rm -rf /usr/local/bin/pip* /usr/local/lib/python3*/site-packages/pip \
       /usr/local/lib/python3*/site-packages/pip-* /usr/local/lib/python3*/site-packages/setuptools* \
       /usr/local/lib/python3*/site-packages/wheel* /usr/lib/python3/dist-packages/pip \
       /usr/lib/python3/dist-packages/setuptools /usr/share/python-wheels \
       /usr/local/lib/python3*/ensurepip /usr/lib/python3*/ensurepip
COPY --from=builder /opt/venv /opt/venv
# The CNI plugin, for the node agent's init container to copy to the host (deploy/helm: agent.installCNI):
# one file, standard library only, run by the host's python3 (>= 3.11) as `python3 -I -S`
# (scripts/build_cni_plugin.py; docs/node.md, "The CNI plugin").
COPY --from=builder /opt/eni-ipam/eni-ipam-cni /opt/eni-ipam/eni-ipam-cni
USER 65532:65532
EXPOSE 9090
ENTRYPOINT ["eni-ipam"]
CMD ["run", "--config", "/etc/eni-ipam/config.yaml"]
