# Flow: make help lists the targets.
GO ?= go
PKGS ?= ./...

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_\/-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: dev
dev: ## Run Flow on this machine: embedded NATS, worker, scheduler, example workflows
	$(GO) run ./cmd/flow dev

.PHONY: build
build: ## Build bin/flow and bin/flowd
	$(GO) build -o bin/flow ./cmd/flow
	$(GO) build -o bin/flowd ./cmd/flowd

.PHONY: images
images: ## Build static binaries into bin/linux/ and the images flowrun/flow and flowrun/nats (IMAGE_TAG=dev)
	GO=$(GO) IMAGE_TAG=$(or $(IMAGE_TAG),dev) scripts/images.sh

.PHONY: test
test: test-deps ## Run every test with the race detector (what CI runs)
	FLOW_REQUIRE_BROWSER=1 FLOW_TORTURE_SEED=$(TORTURE_SEED) $(GO) test -race -count=1 $$($(GO) list $(PKGS) | grep -v -x -F $(SERIAL_LIST))
	for p in $$($(GO) list $(PKGS) | grep -x -F $(SERIAL_LIST)); do $(GO) test -race -count=1 $$p || exit 1; done

# The suites that kill processes and clusters (crashtest), build and run images (composetest) and
# start whole stacks per test (services/worker)
# run after the others, one at a time: on 2 cores the other packages' load stretches their
# children's timings past the tests' deadlines.
SERIAL_PKGS = ./internal/crashtest ./internal/composetest ./services/worker
SERIAL_LIST = $(foreach p,$(SERIAL_PKGS),-e github.com/flowrun/flow/$(patsubst ./%,%,$(p)))

# The seed of the torture test's short budget in make test: CI replays its sequences (after the
# findings' scenarios) as a regression check; make torture explores new seeds. TORTURE_SEED=
# (empty) draws one.
TORTURE_SEED ?= 1796176026098696426

# make torture's variables as the torture test's flags (internal/torture/doc.go).
TORTURE_ARGS = -torture.duration=$(or $(DURATION),30m) -torture.replicas=$(or $(REPLICAS),1) -torture.partitions=$(or $(PARTITIONS),1) \
	-torture.processes=$(if $(filter 0,$(PROCESSES)),false,true) $(if $(SEED),-torture.seed=$(SEED)) \
	-torture.shrinkn=$(or $(SHRINKN),6) $(if $(SEQ),-torture.seq=$(SEQ)) $(if $(KEEP),-torture.keep=$(KEEP)) $(if $(EXCLUDE),-torture.exclude=$(EXCLUDE)) $(TORTURE_FLAGS)

.PHONY: torture
torture: ## Run the randomized interaction test: DURATION=30m, SEED, REPLICAS=1 or 3, PARTITIONS=1, PROCESSES=0 (in process, no SIGKILL), EXCLUDE=kind,...
	$(GO) test -race -count=1 -timeout 0 -v -run 'TestTorture$$' ./internal/torture -args $(TORTURE_ARGS)

.PHONY: test-deps
test-deps: ## Install what the tests need beyond Go (Debian's chromium, for the web UI's browser test)
	scripts/test-deps.sh

.PHONY: test/short
test/short: ## Run the tests without the race detector
	$(GO) test -count=1 $(PKGS)

.PHONY: lint
lint: ## gofmt, go vet and staticcheck
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) tool staticcheck $(PKGS)

.PHONY: bench
bench: ## Run flowbench: W1..W9 and the JetStream ceiling vs a nats-server process, both sync settings (QUICK=1: under a minute; docs/performance.md)
	$(GO) build -o bin/nats-server github.com/nats-io/nats-server/v2
	$(GO) build -o bin/flowbench ./cmd/flowbench
	bin/flowbench -nats-server bin/nats-server $(BENCH_ARGS)

# make bench's variables as flowbench flags.
BENCH_ARGS = $(strip $(if $(QUICK),-quick -sync $(or $(SYNC),default),$(if $(SYNC),-sync $(SYNC))) \
	$(if $(WORKLOADS),-workloads $(WORKLOADS)) $(if $(ANCHORS),-anchors $(ANCHORS)) $(if $(CHART),-chart $(CHART)) $(FLAGS))

.PHONY: bench/anchors
bench/anchors: ## Run the anchors, DBOS Go on PostgreSQL and SQLite, into bench-results/anchors.json (installs and starts PostgreSQL; then make bench ANCHORS=bench-results/anchors.json)
	mkdir -p bench-results
	scripts/anchors-deps.sh bench -backend both $(if $(QUICK),-quick) $(if $(WORKLOADS),-workloads $(WORKLOADS)) -out ../../bench-results/anchors.json

.PHONY: bench/micro
bench/micro: ## Run the go test micro benchmarks (core, and the in-process end-to-end ones of services/worker)
	$(GO) test -run='^$$' -bench=. -benchmem -count=5 ./internal/core
	$(GO) test -run='^$$' -bench=TenStepLatency -benchtime=500x -count=3 ./services/worker
	$(GO) test -run='^$$' -bench=TenStepThroughput -benchtime=1x -count=3 ./services/worker
	$(GO) test -run='^$$' -bench=SignalRoundTrip -benchtime=300x -count=3 ./services/worker

.PHONY: bench-compare
bench-compare: ## Alternate the end-to-end benchmarks of BEFORE=<rev> and this tree, ROUNDS=8 rounds
	scripts/bench-compare.sh $(BEFORE) "" $(or $(ROUNDS),8)

.PHONY: fuzz
fuzz: ## Fuzz envelope and commit decoding for 30s each
	$(GO) test -run='^$$' -fuzz='^FuzzEnvelope$$' -fuzztime=30s ./pkg/event
	$(GO) test -run='^$$' -fuzz='^FuzzDecodeEnvelopes$$' -fuzztime=30s ./pkg/event

.PHONY: golden
golden: ## Rewrite golden test outputs after an intended change (review the diff)
	$(GO) test ./internal/core -run TestGolden -rewrite
	$(GO) test ./internal/natsperm -run 'TestAuthConf$$|TestOperationsDoc' -rewrite

.PHONY: k8s-secrets
k8s-secrets: ## Write a Kubernetes overlay's secret files (NATS passwords, their bcrypt hashes, route credentials and TLS, an ingress token): OVERLAY=dir NAMESPACE=ns DAYS=365 FORCE=1 replaces; no OVERLAY: the dev overlay
	$(GO) run ./deploy/kubernetes/gensecrets -dir $(K8S_OVERLAY) $(if $(K8S_NAMESPACE),-namespace $(K8S_NAMESPACE)) $(if $(K8S_DAYS),-days $(K8S_DAYS)) $(if $(NO_TLS),-no-tls) $(if $(FORCE),-force)

# make k8s-secrets's settings: without OVERLAY, those the dev overlay's committed files were written with.
K8S_OVERLAY = $(or $(OVERLAY),deploy/kubernetes/overlays/dev)
K8S_NAMESPACE = $(if $(OVERLAY),$(NAMESPACE),$(or $(NAMESPACE),flow-dev))
K8S_DAYS = $(if $(OVERLAY),$(DAYS),$(or $(DAYS),3650))

.PHONY: screenshot
screenshot: ## Refresh the web UI screenshot the README shows (docs/images/ui-run.png; needs chromium)
	FLOW_UI_SCREENSHOT=1 $(GO) test -count=1 -run TestUIBrowser ./services/history/webui
