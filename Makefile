# Fulcrum — `make help` lists the targets.
SHELL := /bin/bash
GO ?= go
BIN := bin
TOOLS := $(CURDIR)/bin/tools
STATICCHECK_VERSION := v0.8.2
PREFIX ?= /usr/local
DESTDIR ?=

# go-nvml's cgo bindings call NVML functions that nvml.h marks deprecated: ~150 lines of
# gcc warnings whenever that package is compiled (a cold build cache: CI, a new clone).
# Go has no per-package CGO_CFLAGS, so the go commands here get a CC wrapper that adds
# -Wno-deprecated-declarations for that one package (scripts/cc-quiet-nvml says how);
# FULCRUM_CC is the real compiler. `make CC=...` on the command line bypasses the wrapper.
# A make run from a make (the packaging tests run `make install`) inherits the wrapper as
# CC: keep the real compiler it already has, or the wrapper would exec itself forever.
ifeq ($(findstring cc-quiet-nvml,$(CC)),)
export FULCRUM_CC := $(CC)
endif
export CC := $(CURDIR)/scripts/cc-quiet-nvml

.PHONY: help build test test-go test-python test-pytorch test-pytorch-micro test-pytorch-seeds test-pytorch-restart lint fmt demo clean

help: ## list the targets
	@awk 'BEGIN{FS=":.*## "} /^[a-zA-Z_-]+:.*## /{printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## build fulcrumd and fulcrumctl into bin/
	$(GO) build -ldflags '$(VERSION_LDFLAGS)' -o $(BIN)/ ./cmd/...

test: test-go test-python test-pytorch test-pytorch-restart ## run the whole test suite (what CI runs)

test-go: ## Go tests with the race detector
	$(GO) test -race -count=1 ./...

test-python: ## Python client tests (standard library only), when the client exists
	@if [ -d clients/python ]; then $(MAKE) build && cd clients/python && FULCRUM_BIN=$(CURDIR)/$(BIN) python3 -m unittest discover -v -s tests; fi

# Finds a Python with torch (installs Debian's python3-torch as root; skips loudly elsewhere).
test-pytorch: build ## real PyTorch trainer + server on the CPU, under fulcrumd and without (~80 s)
	python3 scripts/pytorch/e2e.py --bin $(BIN)

test-pytorch-micro: build ## issue 32: a budget below one training minibatch (64×64 images), the trainer in micro-batch turns (managed only; ~1 min)
	python3 scripts/pytorch/e2e.py --bin $(BIN) --micro --modes managed

SEEDS ?= 1 2 3 4 5 6 7 8 9 10
ROOM_MAX_FRAC ?= 0.5
test-pytorch-seeds: build ## the real-PyTorch managed mode for SEEDS (p99, late fraction, training; ~1 min a seed; not in CI)
	sh scripts/pytorch/seeds.sh $(BIN) "$(SEEDS)" $(ROOM_MAX_FRAC)

test-pytorch-restart: build ## fulcrumd restarted under the real PyTorch trainer and server: none dies, every request answered (~20 s)
	python3 scripts/pytorch/restart.py --bin $(BIN)

$(TOOLS)/staticcheck:
	GOBIN=$(TOOLS) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

lint: $(TOOLS)/staticcheck ## gofmt, go mod tidy -diff, go vet and staticcheck
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	@# go.mod and go.sum must be what go mod tidy writes (it prints the difference otherwise).
	$(GO) mod tidy -diff
	$(GO) vet ./...
	$(TOOLS)/staticcheck ./...

fmt: ## gofmt every Go file
	gofmt -w $$(git ls-files '*.go')

demo: build ## the main job on a simulated AGX Orin (see README)
	./scripts/demo.sh

clean: ## remove build outputs
	rm -rf $(BIN)

# ---- install, uninstall, package (docs/install.md) ----------------------------------------
# DESTDIR- and PREFIX-aware. systemd reads units, sysusers.d and tmpfiles.d only from its
# own directories, so those do not follow PREFIX. The board catalog and workload models
# are embedded in the binaries (configs.FS): nothing else needs installing.
BINDIR ?= $(PREFIX)/bin
DOCDIR ?= $(PREFIX)/share/doc/fulcrum
SYSCONFDIR ?= /etc
SYSTEMDUNITDIR ?= /lib/systemd/system
SYSUSERSDIR ?= /usr/lib/sysusers.d
TMPFILESDIR ?= /usr/lib/tmpfiles.d
MANDIR ?= $(PREFIX)/share/man
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
ZSHCOMPDIR ?= $(PREFIX)/share/zsh/site-functions
FISHCOMPDIR ?= $(PREFIX)/share/fish/vendor_completions.d
DOCS := README.md LICENSE docs/install.md docs/fleet.md docs/board-layer.md docs/profiler.md docs/runtime.md docs/protocol.md docs/operations.md docs/api.md
# Man pages and shell completions, written by the binaries themselves from their command
# trees (`fulcrumctl __gendocs DIR`: internal/gendocs, cobra's doc package). Dated by the
# commit (SOURCE_DATE_EPOCH) so that a rebuild of one commit gives the same pages.
GENDOCS := $(BIN)/gendocs
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || date +%s)
export SOURCE_DATE_EPOCH

.PHONY: gendocs
gendocs: build ## man pages and bash/zsh/fish completions of both binaries into bin/gendocs
	rm -rf $(GENDOCS)
	$(BIN)/fulcrumctl __gendocs $(GENDOCS)
	$(BIN)/fulcrumd __gendocs $(GENDOCS)

.PHONY: install uninstall package

install: build gendocs ## install binaries, man pages, completions, systemd unit, sysusers/tmpfiles, config (DESTDIR, PREFIX)
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(SYSTEMDUNITDIR) $(DESTDIR)$(SYSUSERSDIR) $(DESTDIR)$(TMPFILESDIR) $(DESTDIR)$(SYSCONFDIR)/fulcrum $(DESTDIR)$(DOCDIR) \
		$(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(BASHCOMPDIR) $(DESTDIR)$(ZSHCOMPDIR) $(DESTDIR)$(FISHCOMPDIR)
	install -m 0755 $(BIN)/fulcrumd $(BIN)/fulcrumctl $(DESTDIR)$(BINDIR)/
	install -m 0644 $(GENDOCS)/man/man1/*.1.gz $(DESTDIR)$(MANDIR)/man1/
	install -m 0644 $(GENDOCS)/completions/bash/* $(DESTDIR)$(BASHCOMPDIR)/
	install -m 0644 $(GENDOCS)/completions/zsh/* $(DESTDIR)$(ZSHCOMPDIR)/
	install -m 0644 $(GENDOCS)/completions/fish/* $(DESTDIR)$(FISHCOMPDIR)/
	sed -e 's|/usr/bin/|$(BINDIR)/|g' -e 's|/usr/share/doc/fulcrum|$(DOCDIR)|g' systemd/fulcrumd.service > $(DESTDIR)$(SYSTEMDUNITDIR)/fulcrumd.service
	chmod 0644 $(DESTDIR)$(SYSTEMDUNITDIR)/fulcrumd.service
	install -m 0644 systemd/fulcrum.sysusers $(DESTDIR)$(SYSUSERSDIR)/fulcrum.conf
	install -m 0644 systemd/fulcrum.tmpfiles $(DESTDIR)$(TMPFILESDIR)/fulcrum.conf
	@# Never overwrite the operator's configuration; the default stays in DOCDIR.
	@if [ -e $(DESTDIR)$(SYSCONFDIR)/fulcrum/fulcrum.yaml ]; then \
		echo "kept the existing $(DESTDIR)$(SYSCONFDIR)/fulcrum/fulcrum.yaml (the default is $(DESTDIR)$(DOCDIR)/fulcrum.yaml.example)"; \
	else install -m 0644 configs/fulcrum.yaml $(DESTDIR)$(SYSCONFDIR)/fulcrum/fulcrum.yaml; fi
	install -m 0644 configs/fulcrum.yaml $(DESTDIR)$(DOCDIR)/fulcrum.yaml.example
	install -m 0644 $(wildcard $(DOCS)) $(DESTDIR)$(DOCDIR)/
	install -m 0644 systemd/fulcrumd-metrics.conf $(DESTDIR)$(DOCDIR)/
	@# On the live system (no DESTDIR) with systemd running: create the group and the
	@# state directory, and make systemd read the new unit. Enabling is left to you.
	@if [ -z "$(DESTDIR)" ] && [ -d /run/systemd/system ]; then \
		systemd-sysusers fulcrum.conf && systemd-tmpfiles --create fulcrum.conf && systemctl daemon-reload && \
		echo "installed; set budgets in $(SYSCONFDIR)/fulcrum/fulcrum.yaml, then: systemctl enable --now fulcrumd"; fi

uninstall: ## remove what install put there (keeps the config and /var/lib/fulcrum)
	rm -f $(DESTDIR)$(BINDIR)/fulcrumd $(DESTDIR)$(BINDIR)/fulcrumctl \
		$(DESTDIR)$(MANDIR)/man1/fulcrumd.1.gz $(DESTDIR)$(MANDIR)/man1/fulcrumctl.1.gz $(DESTDIR)$(MANDIR)/man1/fulcrumctl-*.1.gz \
		$(DESTDIR)$(BASHCOMPDIR)/fulcrumd $(DESTDIR)$(BASHCOMPDIR)/fulcrumctl \
		$(DESTDIR)$(ZSHCOMPDIR)/_fulcrumd $(DESTDIR)$(ZSHCOMPDIR)/_fulcrumctl \
		$(DESTDIR)$(FISHCOMPDIR)/fulcrumd.fish $(DESTDIR)$(FISHCOMPDIR)/fulcrumctl.fish \
		$(DESTDIR)$(SYSTEMDUNITDIR)/fulcrumd.service \
		$(DESTDIR)$(SYSUSERSDIR)/fulcrum.conf $(DESTDIR)$(TMPFILESDIR)/fulcrum.conf
	rm -rf $(DESTDIR)$(DOCDIR)
	@if [ -z "$(DESTDIR)" ] && [ -d /run/systemd/system ]; then systemctl daemon-reload; fi
	@echo "kept $(DESTDIR)$(SYSCONFDIR)/fulcrum and /var/lib/fulcrum (profiles); remove them by hand if unwanted"

# nfpm v2.46+ needs go.digitalxero.dev modules that proxy.golang.org does not serve;
# v2.45.2 is the newest release that installs from the Go proxy alone.
NFPM_VERSION := v2.45.2
PACKAGE_ARCHS ?= amd64 arm64
# 0: static binaries, cross-built anywhere. Code that needs cgo (NVML, CUDA) sets 1 and
# builds natively on a Jetson, or cross with CC=aarch64-linux-gnu-gcc (docs/install.md).
PACKAGE_CGO ?= 0
DISTDIR ?= $(BIN)/dist
PKGBUILD := $(BIN)/pkg
# Debian versions must start with a digit: a v1.2.3 tag gives 1.2.3, no tag 0.0.0~git<sha>.
# Stamped into both binaries (fulcrumctl --version, fulcrumd --version, fulcrumctl status).
VERSION_LDFLAGS = -X github.com/fulcrum-edge/fulcrum/internal/buildinfo.version=$(VERSION)
VERSION ?= $(shell v=$$(git describe --tags --match 'v[0-9]*' 2>/dev/null); if [ -n "$$v" ]; then echo "$$v" | sed 's/^v//'; else echo "0.0.0~git$$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"; fi)

$(TOOLS)/nfpm:
	GOBIN=$(TOOLS) $(GO) install github.com/goreleaser/nfpm/v2/cmd/nfpm@$(NFPM_VERSION)

# Man pages and completions come from the host's build (`make gendocs`): they describe the
# same command tree on every architecture, and a cross-built binary cannot run here.
package: $(TOOLS)/nfpm gendocs ## .deb packages for PACKAGE_ARCHS (amd64 arm64) into DISTDIR (bin/dist)
	@mkdir -p $(DISTDIR) $(PKGBUILD)
	packaging/changelog.sh '$(VERSION)' "$$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" | gzip -9n > $(PKGBUILD)/changelog.gz
	@set -e; for arch in $(PACKAGE_ARCHS); do \
		echo "building linux/$$arch"; \
		CGO_ENABLED=$(PACKAGE_CGO) GOOS=linux GOARCH=$$arch $(GO) build -trimpath -ldflags '-s -w $(VERSION_LDFLAGS)' -o $(PKGBUILD)/$$arch/ ./cmd/fulcrumd ./cmd/fulcrumctl; \
		ARCH=$$arch VERSION='$(VERSION)' PKGBUILD='$(PKGBUILD)' GENDOCS='$(GENDOCS)' $(TOOLS)/nfpm package --config packaging/nfpm.yaml --packager deb --target $(DISTDIR)/; \
	done
	@ls -l $(DISTDIR)/*.deb

# `make package` and lintian on the amd64 .deb, failing on any lintian error (CI runs it;
# installs lintian with apt-get when run as root without it).
.PHONY: package-check
package-check: ## make package for amd64, then lintian (errors fail; warnings are printed)
	@if ! command -v lintian >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends lintian >/dev/null; \
		else echo "package-check needs lintian: apt-get install lintian (as root)"; exit 1; fi; \
	fi
	rm -rf $(BIN)/dist-check
	$(MAKE) package PACKAGE_ARCHS=amd64 DISTDIR=$(BIN)/dist-check
	lintian --fail-on error --tag-display-limit 0 $(BIN)/dist-check/*_amd64.deb

# ---- reliability (docs/reliability.md) ----------------------------------------------------
# Execution-count budgets, not durations: Go 1.26's fuzz coordinator can report a spurious
# "context deadline exceeded" FAIL when a -fuzztime duration expires on a loaded machine
# (golang/go#75804, fixed in Go 1.27). A count has no deadline to race. Each count is about
# 10 s of fuzzing on a 2-core CI machine; FUZZTIME=<n>x or <d> overrides all of them.
FUZZTIME ?=
FUZZ_TARGETS := FuzzDecode:./fulcrum/proto:500000x FuzzPutBudgets:./fulcrum/api/server:30000x \
	FuzzPutMode:./fulcrum/api/server:60000x FuzzOptimize:./fulcrum/api/server:60000x \
	FuzzParse:./powermode/nvpmodel:300000x FuzzRead:./truth:300000x \
	FuzzConfig:./cmd/fulcrumd:30000x
SOAK_MINUTES ?= 10

.PHONY: fuzz-short soak

fuzz-short: ## run each fuzz target for ~10 s of executions (a fixed count) beyond its committed seeds
	@set -e; for t in $(FUZZ_TARGETS); do \
		name=$${t%%:*}; rest=$${t#*:}; pkg=$${rest%%:*}; budget=$${rest#*:}; \
		if [ -n "$(FUZZTIME)" ]; then budget="$(FUZZTIME)"; fi; \
		echo "== $$name ($$pkg, $$budget)"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $$budget $$pkg; \
	done

soak: build ## 10 inference (2,000 req/s) + 2 training workers on a simulated board for SOAK_MINUTES
	$(GO) run ./scripts/soak -minutes $(SOAK_MINUTES) -bin $(BIN)
