.DEFAULT_GOAL := help
CARGO ?= cargo

.PHONY: help setup setup-base module build run test bench fmt lint clean chaos fuzz leakcheck cluster cluster-stop dist test-dist setup-dist

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-8s %s\n", $$1, $$2}'

setup: ## Install what is missing: redis-server, redis-tools, libclang; the server matrix into .servers/ (Redis 8.6 built from Debian's source, once)
	@scripts/setup

setup-base:
	@scripts/setup --base

build: setup-base ## Build the module (release) and lockctl
	$(CARGO) build --release --workspace

module: setup-base ## Build the module alone (release): target/release/librelock.so
	$(CARGO) build --release -p relock

run: module ## Start redis-server with the module on 127.0.0.1:6379 (data in ./data)
	@scripts/run

cluster: module ## Start a local 3-master/3-replica cluster with the module on 127.0.0.1:7000-7005 (data in ./data/cluster)
	@scripts/cluster

cluster-stop: ## Stop the cluster that make cluster started
	@scripts/cluster stop

# make test builds from scratch once (CI's clean clone): without incremental compilation, which
# only pays off on the next edit. Every cargo it runs has the same setting, so none of them
# rebuilds (cargo treats a change of CARGO_INCREMENTAL as a change of profile).
test: export CARGO_INCREMENTAL := 0
test: setup ## Build everything; then, side by side: every test on Redis 7.0, the client packages, the module's suites on Redis 8.2 and 8.6, Valkey 8.1 and 9.1 (the shipped build), and test-dist
	$(CARGO) build --workspace --all-targets
	@scripts/dist --build-only
	@MAKE="$(MAKE)" scripts/test-all

bench: setup-base ## Run the benchmark; writes target/bench/results.md and a chart
	$(CARGO) build --release --workspace
	@if [ -d bench ]; then $(CARGO) run --release -p relock-bench -- --out target/bench; else echo "no benchmark yet"; fi

fmt: ## Format the code
	$(CARGO) fmt --all

lint: ## Clippy with warnings as errors, and a format check
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

clean: ## Remove build output (target/, dist/), ./data and the project-local servers (.servers/)
	$(CARGO) clean
	rm -rf data .servers dist

.PHONY: chaos fuzz leakcheck

chaos: setup-base ## Chaos suite, full run (~19 min): process faults (~7 min) and network faults between test hosts (~12 min, as root); writes target/chaos/results.md
	$(CARGO) build -p relock
	$(CARGO) run --release -p relock-chaos -- --out target/chaos

fuzz: ## cargo-fuzz, 60 s per target (argument parsing, state machine); needs cargo-fuzz
	@command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz
	cd fuzz && for t in args state_machine; do RUSTC_BOOTSTRAP=1 $(CARGO) fuzz run $$t -- -max_total_time=$${FUZZ_SECONDS:-60} || exit 1; done

leakcheck: setup-base ## Integration tests with redis-server under valgrind; no leak may be the module's
	@scripts/leakcheck

.PHONY: test-clients bench-clients

test-clients: ## The Python, Node and Go client packages: install their pinned deps, type checks, suites
	$(CARGO) build -p relock
	@scripts/setup-clients
	@scripts/test-clients

bench-clients: ## The client packages against the locks their users run today; writes target/bench/clients.md
	$(CARGO) build --release -p relock
	@scripts/setup-clients
	@bench/clients/run

dist: setup-base setup-dist ## Release artifacts into dist/: tarball, .deb, wheel and sdist, npm tarball, crates, Go module zip, Java jars, SHA256SUMS
	@scripts/dist

test-dist: dist ## Install the artifacts as a user would (.deb, tarball, wheel, npm tarball, Go zip, Java jars) and run the tour on each
	@scripts/test-dist

setup-dist:
	@scripts/setup-dist
