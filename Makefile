# Two commands do all the set-up on a fresh machine:
#   make run   - create .venv, install, run the default sweep of experiments.yaml and write its report
#   make test  - create .venv if needed, install, lint (ruff, mypy), build the docs site strictly and run the whole
#                test suite
# torch/torchvision are installed in the same pip call as everything else, from constraints.txt, so pip
# never swaps in another torch release; the pins carry no local label (+cpu), so an installed CPU build
# satisfies them and a machine whose pip reaches PyPI alone gets PyPI's build of the same release.
# On a GPU machine, `make gpu-check` installs a CUDA torch whatever pip's configuration offers (gpu-install, below)
# and checks the node.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SWEEP ?= cpu
STAMP := $(VENV)/.installed

.PHONY: run test quick team soak lint docs gallery install clean mutants gpu-check gpu-install

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt \
		torch==2.13.0 torchvision==0.28.0 -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/ablate launch experiments.yaml $(SWEEP)
	$(BIN)/ablate report $(SWEEP)

# The suite in two pytest processes at once, as measured in a fresh clone: the quick tests (no Ray, process,
# server or browser; a quick run refuses a process), then the other tests of BESIDE (docs pages, MLflow servers,
# browsers, searches: processes and ports of their own), beside every other test, which mostly wait on the processes
# they start. The second's output follows; both must pass. The clusters (CLUSTERS: a Slurm and two Ray nodes, each
# on a Ray of its own, 6 to 7 minutes at c5bb842) run in `make team`, with the other set-ups of several nodes: with
# them `make test` took 1,023 s in CI at c5bb842, over the 15 minutes it is kept under on 2 cores. CI at 1b922ef:
# 892 s for the first process, 660 s beside it; tests/planning (about 100 s) then moved beside. At 989ed46: 906 s,
# 790 s beside (every test 15 to 25% slower than at 3a8bccc, the same tests); tests/transfer (about 50 s) moved too.
# At 7b8c715: 878 s for the first process, about 740 s beside; tests/cli (61 s alone) moved.
BESIDE = tests/project tests/tracking tests/provenance tests/planning tests/transfer tests/cli
CLUSTERS = tests/execution/test_slurm.py tests/execution/test_cluster.py
test: lint docs $(STAMP)
	@mkdir -p build; start=$$(date +%s); \
	{ $(BIN)/python -m pytest -q -m quick -p no:cacheprovider; q=$$?; \
	  $(BIN)/python -m pytest -q -m 'not quick and not team' -p no:cacheprovider $(BESIDE); exit $$(( q || $$? )); } \
		> build/beside.log 2>&1 & beside=$$!; \
	$(BIN)/python -m pytest -q -m 'not quick and not team' $(addprefix --ignore=,$(BESIDE) $(CLUSTERS)); rest=$$?; \
	wait $$beside; other=$$?; echo "--- run beside: the quick tests, then the rest of $(BESIDE):"; \
	cat build/beside.log; \
	echo "make test: pytest $$(( $$(date +%s) - start )) s (beside exit $$other, the rest exit $$rest)"; \
	exit $$(( rest || other ))

# The documentation site (mkdocs.yml, docs/) into build/site (open build/site/index.html; search needs a server:
# python -m http.server -d build/site), strictly: a broken link or anchor, a page left out of
# the nav or an API reference to something that no longer exists fails it. Part of `make test`, so CI builds it.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# The gallery's reports (docs/gallery/<sweep>/), regenerated from a real run of the shipped CPU sweeps GALLERY into
# a fresh store under build/gallery (never db/), each with the run's date, commit and minutes in its run.json
# (docs/gallery/<sweep>/run.json); minutes per sweep (docs/sweeps.md), so not part of `make test`: commit what it
# writes. `make gallery GALLERY=cpu-tuned` regenerates one sweep's and leaves the others' as they are.
GALLERY ?= syn-musk1 cpu cpu-tuned syn-mil-quick
GALLERY_RUN := build/gallery
gallery: $(STAMP)
	rm -rf $(GALLERY_RUN) && mkdir -p $(GALLERY_RUN) docs/gallery
	start=$$(date -u +%s) && { $(BIN)/ablate launch experiments.yaml $(GALLERY) --plain --yes --no-mlflow \
		--db sqlite:///$(GALLERY_RUN)/ablate.sqlite --storage $(GALLERY_RUN)/checkpoints || test $$? -eq 1; } \
		&& echo $$(( $$(date -u +%s) - start )) > $(GALLERY_RUN)/seconds
	$(BIN)/ablate report $(GALLERY) --db sqlite:///$(GALLERY_RUN)/ablate.sqlite --out $(GALLERY_RUN)/reports
	for sweep in $(GALLERY); do rm -rf docs/gallery/$$sweep && cp -r $(GALLERY_RUN)/reports/$$sweep docs/gallery/ && \
		printf '{"date": "%s", "commit": "%s%s", "sweeps": "%s", "seconds": %s}\n' "$$(date -u '+%Y-%m-%d %H:%M UTC')" \
		"$$(git rev-parse --short HEAD)" "$$(git diff --quiet HEAD -- ablate experiments.yaml || echo ' (with local changes)')" \
		"$(GALLERY)" "$$(cat $(GALLERY_RUN)/seconds)" > docs/gallery/$$sweep/run.json; done

# The one command that installs a CUDA torch and the project on a GPU machine (docs/installation.md: With a CUDA
# torch); `make install` above keeps whatever torch pip finds first, which on this machine is the CPU build.
# torch and torchvision, as constraints.txt pins them, come from TORCH_INDEX alone (default PyPI, whose Linux torch
# wheel is the CUDA build; e.g. https://download.pytorch.org/whl/cu126 for an older driver) through a pip that reads
# no pip configuration and no PIP_* variable: an index, extra index or folder of CPU wheels set there would win, a
# local label such as +cpu sorting above the plain release. The venv's torch is removed first, since a CPU build of
# the pinned release satisfies the pin. Then the project with the gpu extra (nvidia-ml-py: NVML for gpu-check's
# busy figure). WHEELS=DIR installs both from that folder of wheels alone, for a machine without network. It ends
# by printing the torch it installed and what it sees.
TORCH_INDEX ?= https://pypi.org/simple
WHEELS ?=
GPU_STAMP := $(VENV)/.installed-gpu
OFFLINE = $(if $(WHEELS),--no-index --find-links $(WHEELS))

gpu-install:
	rm -f $(GPU_STAMP)
	$(MAKE) $(GPU_STAMP)

$(GPU_STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip uninstall --quiet --yes torch torchvision
	PIP_CONFIG_FILE=/dev/null $(BIN)/python -m pip install --isolated --quiet --disable-pip-version-check -c constraints.txt $(if $(WHEELS),$(OFFLINE),--index-url $(TORCH_INDEX)) torch==2.13.0 torchvision==0.28.0
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt $(OFFLINE) -e '.[gpu]'
	$(BIN)/python -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "GPUs seen", torch.cuda.device_count())'
	touch $(GPU_STAMP)

# A short sweep on this machine's GPUs through the launch path, and its figures (docs/concepts/gpu.md: Checking a
# GPU node), after `make gpu-install` if it has not run. It exits 2, saying why, where the driver lists a GPU that
# torch cannot use; on a machine without one `$(BIN)/ablate gpu-check` alone gives the dry run.
gpu-check: $(GPU_STAMP)
	$(BIN)/ablate gpu-check

# The set-ups of several nodes: the team's end to end (tests/execution/test_team.py, marker `team`: PostgreSQL, an
# MLflow server, a bucket, three Ray nodes, three launchers, and the faults it injects; minutes of its own), the
# clusters (CLUSTERS: a Slurm on this host, its jobs, requeues and time limits; a Ray of two nodes on loopback) and a
# Slurm of three nodes, each a network namespace of its own on this machine (test_slurm.py's `team` tests: root;
# the three-node and the lost-worker tests about 3 minutes at a load of 20 on 2 cores, the PostgreSQL and lost-head
# test 4 to 7 more). Not part of `make test`; CI runs it.
team: $(STAMP)
	$(BIN)/python -m pytest -q -m 'not quick' tests/execution/test_team.py $(CLUSTERS)

# The chaos soak (bench/soak.py): the team set-up under random faults drawn from SEED for SECONDS (nodes, launchers,
# PostgreSQL, the MLflow server, the bucket, clock skews, trials killed mid-checkpoint), then every invariant checked;
# a violation prints the seed and the faults as they ran, exit 1. Not part of `make test`; CI runs a short one.
SECONDS ?= 240
SEED ?= 1
soak: $(STAMP)
	mkdir -p build && $(BIN)/python bench/soak.py $(SECONDS) --seed $(SEED) --out build/soak-$(SEED).json --logs build/soak-$(SEED)

# The loop while you work: every test that starts no Ray, process, server or browser (marks set at collection by
# tests/markers.py; starting a process raises here), and how long it took. `make test` and CI still run everything.
quick: $(STAMP)
	start=$$(date +%s) && $(BIN)/python -m pytest -q -m quick -p no:cacheprovider; rc=$$?; \
		echo "make quick: $$(( $$(date +%s) - start )) s"; exit $$rc

# Lint, format and types (strict on ablate/); part of `make test`, so CI runs them.
lint: $(STAMP)
	$(BIN)/ruff check ablate tests bench examples docs/_hooks
	$(BIN)/ruff format --check ablate tests bench examples docs/_hooks
	$(BIN)/mypy

# Mutation testing of the core modules, score per module (bench/mutants.py); not part of `make test`.
# GROUPS narrows it, e.g. make mutants GROUPS='planner stats'; surviving mutants and their diffs land in mutants-survivors/.
GROUPS ?=
mutants: $(STAMP)
	$(BIN)/python bench/mutants.py $(GROUPS)

clean:
	rm -rf $(VENV) db reports mutants-survivors
