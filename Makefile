# herd: the two set-up commands are `make demo` and `make test`.
# Each installs missing Debian packages, builds, and runs. Nothing is fetched
# from Hackage (cabal runs offline; do not run `cabal update`).

CABAL ?= cabal
CABAL_FLAGS ?= --offline

.PHONY: all deps build demo test bench-models haddock clean

all: build

deps:
	@./scripts/install-deps.sh

build: deps
	$(CABAL) build $(CABAL_FLAGS) exe:herd spec

demo: build
	$$($(CABAL) list-bin $(CABAL_FLAGS) exe:herd) demo

test: build
	$$($(CABAL) list-bin $(CABAL_FLAGS) spec)
	@for t in ssh netns slurm shm; do \
	  HERD_BIN=$$($(CABAL) list-bin $(CABAL_FLAGS) exe:herd) bash tests/integration/$$t.sh || exit 1; \
	done

bench-models: build
	$$($(CABAL) list-bin $(CABAL_FLAGS) exe:herd) bench models --json

haddock: deps
	$(CABAL) haddock $(CABAL_FLAGS) lib:herd lib:herd-internal

clean:
	rm -rf dist-newstyle
