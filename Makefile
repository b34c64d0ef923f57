# Fulcrum — `make help` lists the targets.
SHELL := /bin/bash
GO ?= go
BIN := bin
TOOLS := $(CURDIR)/bin/tools
STATICCHECK_VERSION := v0.8.2
PREFIX ?= /usr/local
DESTDIR ?=

.PHONY: help build test test-go test-python lint fmt demo clean

help: ## list the targets
	@awk 'BEGIN{FS=":.*## "} /^[a-zA-Z_-]+:.*## /{printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## build fulcrumd and fulcrumctl into bin/
	$(GO) build -o $(BIN)/ ./cmd/...

test: test-go test-python ## run the whole test suite (what CI runs)

test-go: ## Go tests with the race detector
	$(GO) test -race -count=1 ./...

test-python: ## Python client tests (standard library only), when the client exists
	@if [ -d clients/python ]; then $(MAKE) build && cd clients/python && FULCRUM_BIN=$(CURDIR)/$(BIN) python3 -m unittest discover -v -s tests; fi

$(TOOLS)/staticcheck:
	GOBIN=$(TOOLS) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

lint: $(TOOLS)/staticcheck ## gofmt, go vet and staticcheck
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(TOOLS)/staticcheck ./...

fmt: ## gofmt every Go file
	gofmt -w $$(git ls-files '*.go')

demo: build ## the main job on a simulated AGX Orin (see README)
	./scripts/demo.sh

clean: ## remove build outputs
	rm -rf $(BIN)
