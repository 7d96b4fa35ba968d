# herd: the two set-up commands are `make demo` and `make test`.
# Each installs missing Debian packages, builds, and runs. Nothing is fetched
# from Hackage (cabal runs offline; do not run `cabal update`).

CABAL ?= cabal
CABAL_FLAGS ?= --offline

.PHONY: all deps build demo test check bench-models bench-report haddock clean

all: build

deps:
	@./scripts/install-deps.sh

# One build of everything, the test suite included: a build of `all` alone
# would configure herd without its tests and compile its libraries again.
build: deps
	$(CABAL) build $(CABAL_FLAGS) exe:herd spec all

demo: build
	$$($(CABAL) list-bin $(CABAL_FLAGS) exe:herd) demo

# The tests build and run from herd's own source tarball (scripts/sdist-tree.sh),
# so that a file the package forgets to ship fails here, not for its users.
SDIST_TREE = dist-newstyle/sdist-tree

test: deps
	@./scripts/sdist-tree.sh $(SDIST_TREE)
	cd $(SDIST_TREE) && $(CABAL) build $(CABAL_FLAGS) exe:herd spec all
	cd $(SDIST_TREE) && $$($(CABAL) list-bin $(CABAL_FLAGS) spec)
	cd $(SDIST_TREE) && bash tests/integration/examples.sh
	@cd $(SDIST_TREE) && for t in cli ssh netns steal hosts slurm slurm-adapt shm observe; do \
	  HERD_BIN=$$($(CABAL) list-bin $(CABAL_FLAGS) exe:herd) bash tests/integration/$$t.sh || exit 1; \
	done

# The fast inner loop: the unit, property and in-process tests and the
# command line's checks, in this tree, without root (unless a library is
# missing), sshd, SLURM or a browser.
check:
	@./scripts/install-deps.sh --libraries
	$(CABAL) build $(CABAL_FLAGS) exe:herd spec
	$$($(CABAL) list-bin $(CABAL_FLAGS) spec) --skip "in a real browser"
	HERD_BIN=$$($(CABAL) list-bin $(CABAL_FLAGS) exe:herd) bash tests/integration/cli.sh

bench-models: build
	$$($(CABAL) list-bin $(CABAL_FLAGS) exe:herd) bench models --json

# The benchmark page, docs/benchmarks.md, and its figures (docs/*.svg):
# every benchmark run on this machine and its tables rewritten, never edited.
bench-report: build
	$$($(CABAL) list-bin $(CABAL_FLAGS) exe:herd) bench report --out docs/benchmarks.md

haddock: deps
	$(CABAL) haddock $(CABAL_FLAGS) lib:herd lib:herd-core lib:herd-link lib:herd-node lib:herd-master lib:herd-testkit

clean:
	rm -rf dist-newstyle
