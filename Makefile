# nodeset — make targets. Everything installs or builds what it needs itself.
SHELL := /usr/bin/env bash
GO ?= go
BIN := $(CURDIR)/bin
TEST_FLAGS ?= -count=1 -timeout=30m

.PHONY: all build image generate verify test test-stress test-unit test-deps test-reliability kube-binaries demo demo-down local-up local-down bench clean update-chart dist

all: build

## build: compile the controllers into ./bin
build:
	$(GO) build -tags grpcnotrace -o $(BIN)/ ./cmd/...

## image: build both controller images with docker (IMAGE_REPO, VERSION)
IMAGE_REPO ?= ghcr.io/nodeset-dev
VERSION ?= v0.1.0
image:
	docker build --target nodeset-controller -t $(IMAGE_REPO)/nodeset-controller:$(VERSION) .
	docker build --target node-controller -t $(IMAGE_REPO)/node-controller:$(VERSION) .

## generate: regenerate clients, deepcopy, register, CRDs, docs/api-reference.md and the Helm chart's generated files
generate:
	hack/update-codegen.sh
	hack/update-crds.sh
	hack/update-api-docs.sh
	hack/update-proto.sh
	hack/update-chart.sh

## update-chart: the Helm chart's CRDs, admission policy, versions (VERSION) and values table (hack/chart)
update-chart:
	hack/update-chart.sh

## verify: fail when generated code is stale, code is unformatted or go.mod untidy; go vet; staticcheck
## (pinned in hack/verify-staticcheck.sh, built from the Go module proxy); the Helm chart generated, lint-clean
## and rendering the same objects as deploy/overlays (hack/verify-chart.sh, helm pinned in hack/chart/go.mod)
verify:
	hack/verify-codegen.sh
	hack/verify-proto.sh
	hack/verify-gofmt.sh
	$(GO) vet ./...
	hack/verify-staticcheck.sh
	hack/verify-chart.sh

## dist: kubectl-nodeset archives for linux/darwin amd64/arm64 and windows/amd64, their sha256 sums and the
## krew manifest with them (deploy/krew/nodeset.yaml filled in), in _output/dist/ (VERSION)
dist:
	VERSION=$(VERSION) hack/dist.sh

## kube-binaries: build (once, cached) etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl
kube-binaries:
	@hack/kube-binaries.sh >/dev/null

## test-deps: Debian packages the tests use (openssh-server)
test-deps:
	@hack/install-test-deps.sh

## test: every test, the real-control-plane ones included
test: kube-binaries test-deps
	NODESET_KUBE_BIN="$$(hack/kube-binaries.sh)" $(GO) test $(TEST_FLAGS) ./...
	$(GO) test $(TEST_FLAGS) -race $(RACE_PACKAGES)

## RACE_PACKAGES: the packages whose goroutines share state, run again under the race detector by make test
RACE_PACKAGES ?= ./pkg/nodecontrollerapp/ ./pkg/plan/ ./pkg/component/ ./pkg/controller/... ./drivers/dockermachine/

## test-reliability: the long crash sequences (0 -> 50 -> 10 -> 40 -> 0, 24 SIGKILLs, a new seed each run;
## replay one with NODESET_CRASH_SEED=...) for the simulated, docker-machine and eks-asg (moto) drivers, eks-managed's
## scale-ups (10 -> 20 -> 30, 18 SIGKILLs), and the cloud-fault runs through the fault-injecting proxy: about 5 minutes
test-reliability: kube-binaries test-deps
	set -o pipefail; NODESET_RELIABILITY=1 NODESET_KUBE_BIN="$$(hack/kube-binaries.sh)" $(GO) test -count=1 -timeout=60m -v -run 'TestCrashSequence|CloudFaults' ./test/e2e/lifecycle/ ./test/e2e/awsdrivers/ 2>&1 | grep -E '^(=== RUN|--- |PASS|FAIL|ok )|crash_test.go|reliability_test.go|framework/crash.go'

## test-stress: make test three times in a row (NODESET_STRESS_RUNS) beside a CPU hog (stress-ng, installed from Debian,
## one busy worker per core), as on a busy CI host; logs in _output/test-stress/
test-stress:
	hack/test-stress.sh

## test-unit: only the tests that need no control plane, moto or sshd (-short: the harness, test/framework,
## builds and starts nothing and skips each test that asks for a control plane or moto); under two minutes
test-unit:
	$(GO) test $(TEST_FLAGS) -short ./...

## bench: for each size (NODESET_BENCH_SIZES, default 100,1000; add 5000 for the large run) a client-go baseline,
## then a simulated NodeSet 0 -> N Ready -> 0 with both controllers; prints a table, writes _output/bench.json;
## then the eks-asg driver's AWS calls per launched node and per poll against moto (1 and 50 NodeSets),
## _output/bench-aws.json
bench: kube-binaries
	NODESET_KUBE_BIN="$$(hack/kube-binaries.sh)" $(GO) test -count=1 -timeout=120m -run '^$$' -bench . -benchtime=1x ./test/bench/

## demo: control plane + both controllers + examples, scaled 3 -> 5 -> 2; left running
demo:
	hack/demo.sh
## demo-down: stop the demo's controllers and control plane
demo-down:
	hack/demo.sh down

## local-up / local-down: a control plane on this machine for manual use
local-up:
	hack/local-up.sh
local-down:
	hack/local-down.sh

clean:
	rm -rf $(BIN)
