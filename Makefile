# slurm-arnold: the two set-up commands are `make demo` and `make test`; both are idempotent.
SHELL := /bin/bash
.DEFAULT_GOAL := help
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
APT_PACKAGES := munge slurmctld slurmd slurmdbd slurm-client libslurm-dev mariadb-server \
	mariadb-client python3 python3-venv python3-dev gcc make libgomp1 clang libclang-rt-dev \
	chromium
export PIP_DISABLE_PIP_VERSION_CHECK := 1
# Which Slurm the local cluster runs: 22.05 (Debian 12's, the host's packages) or 26.05
# (Debian unstable's, installed into a debootstrap root; see site_config/devcluster).
SLURM ?= 22.05
ifeq ($(SLURM),22.05)
ENV_FILE := devcluster.env
else ifeq ($(SLURM),25.11)
# Slurm 25.11 built from SchedMD's source (../shared/vendor) with what its configure needs.
ENV_FILE := devcluster-$(SLURM).env
APT_PACKAGES += libmunge-dev libmariadb-dev libmariadb-dev-compat libjson-c-dev \
	libhttp-parser-dev libyaml-dev libjwt-dev
else
ENV_FILE := devcluster-$(SLURM).env
APT_PACKAGES += debootstrap patchelf
endif
DEVCLUSTER := python3 site_config/devcluster/devcluster.py --slurm $(SLURM)

.PHONY: help system spank venv cluster cluster-down cluster-status test lint fuzz demo clean pyslurm

help:
	@echo "make demo          set up, start the local cluster, show the topology and a placement"
	@echo "make test          set up, start the local cluster, run ruff, mypy and the tests"
	@echo "make cluster       start the local Slurm cluster (idempotent); then: source devcluster.env"
	@echo "make cluster-down  stop it"
	@echo "SLURM=26.05        with any of these: the lane of Slurm 26.05 (source devcluster-26.05.env)"
	@echo "SLURM=25.11        the lane of Slurm 25.11, built from source (source devcluster-25.11.env)"

# Debian packages: installed only when one is missing (apt-get needs root).
system:
	@missing=$$(for p in $(APT_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null \
		| grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages:" $$missing >&2; \
		if [ "$$(id -u)" != 0 ]; then echo "error: need root to apt-get install $$missing" >&2; exit 1; fi; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			--no-install-recommends $$missing >/dev/null || exit 1; \
	fi; \
	if dpkg-query -W -f='$${Status}' slurm-wlm-emulator 2>/dev/null | grep -q 'install ok'; then \
		echo "error: slurm-wlm-emulator breaks multiple slurmd; apt-get purge slurm-wlm-emulator" >&2; exit 1; fi

# Python packages into .venv, reinstalled only when pyproject.toml changes.
venv: $(STAMP)
$(STAMP): pyproject.toml | system
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@touch $(STAMP)

spank: system
ifeq ($(SLURM),22.05)
	$(MAKE) -C spank
else
	root=$$($(DEVCLUSTER) root) && $(MAKE) -C spank SLURM_ROOT=$$root SLURM_VERSION=$(SLURM)
endif

cluster: system spank
	$(DEVCLUSTER) up

# On the 25.11 lane, pyslurm (built against it and cached once by `make cluster`) in .venv too,
# so the tests reach Slurm through it as the site install does.
pyslurm: venv cluster
ifeq ($(SLURM),25.11)
	$(PY) -m pip install -q --no-deps "$$($(DEVCLUSTER) wheel)"
endif

cluster-down:
	$(DEVCLUSTER) down

cluster-status:
	$(DEVCLUSTER) status

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# The rank-order parser under libFuzzer (ASan + UBSan) for a bounded time; a crash fails.
FUZZ_SECONDS ?= 60
fuzz: system
	$(MAKE) -C spank fuzz FUZZ_SECONDS=$(FUZZ_SECONDS)

# LIVE_ONLY=1: only the tests that need the cluster (CI runs lint, the fuzzer and the other
# tests once, on the first lane, and the live tests on every lane).
LIVE_ONLY ?=
test: venv cluster pyslurm $(if $(LIVE_ONLY),,lint fuzz)
	source ./$(ENV_FILE) && $(VENV)/bin/pytest -q $(if $(LIVE_ONLY),-m live,)

demo: venv cluster pyslurm
	source ./$(ENV_FILE) && bash site_config/devcluster/demo.sh

clean: cluster-down
	@# .devcluster may be a symlink to /var/tmp (a checkout others cannot reach): remove both.
	rm -rf "$$(readlink -f .devcluster)" .devcluster devcluster.env
	for lane in 26.05 25.11; do $(MAKE) cluster-down SLURM=$$lane; \
		rm -rf "$$(readlink -f .devcluster-$$lane)" .devcluster-$$lane devcluster-$$lane.env; done
