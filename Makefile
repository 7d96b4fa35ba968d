# herd: the two set-up commands are `make demo` and `make test`.
# Each installs missing Debian packages, builds, and runs. Nothing is fetched
# from Hackage (cabal runs offline; do not run `cabal update`).

CABAL ?= cabal
CABAL_FLAGS ?= --offline

.PHONY: all deps build demo test bench-models plots haddock clean

all: build

deps:
	@./scripts/install-deps.sh

build: deps
	$(CABAL) build $(CABAL_FLAGS) exe:herd spec

demo: build
	$$($(CABAL) list-bin $(CABAL_FLAGS) exe:herd) demo

# The tests build and run from herd's own source tarball (scripts/sdist-tree.sh),
# so that a file the package forgets to ship fails here, not for its users.
SDIST_TREE = dist-newstyle/sdist-tree

test: deps
	@./scripts/sdist-tree.sh $(SDIST_TREE)
	cd $(SDIST_TREE) && $(CABAL) build $(CABAL_FLAGS) exe:herd spec
	cd $(SDIST_TREE) && $$($(CABAL) list-bin $(CABAL_FLAGS) spec)
	@cd $(SDIST_TREE) && for t in ssh netns slurm shm observe; do \
	  HERD_BIN=$$($(CABAL) list-bin $(CABAL_FLAGS) exe:herd) bash tests/integration/$$t.sh || exit 1; \
	done

bench-models: build
	$$($(CABAL) list-bin $(CABAL_FLAGS) exe:herd) bench models --json

# Redraw the README's figures (docs/*.svg); each line is the command the README names.
plots: build
	H=$$($(CABAL) list-bin $(CABAL_FLAGS) exe:herd); \
	$$H bench models --plot docs/models.svg && \
	$$H bench pfilter --simulate --cost 30ms --states 2000 --plot docs/pfilter.svg && \
	$$H bench pfilter --simulate --cost 30ms --states 8192 --workers 512,2048 --sim-hosts 4 --plot docs/pfilter-sim.svg && \
	$$H bench echo --items 10000 --words 1,10,100,300,1000 --plot docs/echo.svg && \
	$$H bench parsort --n 100000 --plot docs/parsort.svg && \
	$$H bench latency --transport tcp,unix,shm --plot docs/latency.svg

haddock: deps
	$(CABAL) haddock $(CABAL_FLAGS) lib:herd lib:herd-internal

clean:
	rm -rf dist-newstyle
