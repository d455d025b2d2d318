# Top-level entry points. `make demo`, `make e2e` and `make test` do their own set-up.
# Every path in a recipe is quoted: PREFIX, DESTDIR and the checkout's own path may hold spaces.
CARGO ?= cargo
DIST  := dist
REL   := target/release

# $(1) as one single-quoted shell word, whatever it holds (spaces, quotes): for the user's paths.
sq = '$(subst ','\'',$(1))'

.PHONY: all setup dist devicertl-bc install uninstall demo test unit e2e doctest conformance bench fmt lint clean

all: dist

setup:
	./scripts/setup.sh

# Release artifacts: the runtime under both sonames, the driver, the CPU device runtime, man pages.
# libomptarget.so.19.1 and .22.1 are the same code, each with its own SONAME (LLVM's names): a
# program records the one of the file it was linked with, and runs on that LLVM's runtime too.
# The development link (-lomptarget) is the LLVM 19 one: flang-new-19 users link with -L dist/lib
# (docs/devicertl.md); clang/flang 22 have LLVM 22's own development link.
dist:
	$(CARGO) build --release -p omp-libomptarget -p ompcc -p omp-devicertl-host -p offload-server -p omp-plugin-isolate -p omp-plugin-mpi -p omp-replay
	mkdir -p "$(DIST)/lib" "$(DIST)/bin" "$(DIST)/share/man/man1"
	./scripts/link-libomptarget.sh "$(REL)/libomptarget.a" crates/libomptarget/exports.map "$(DIST)/lib/libomptarget.so.19.1" libomptarget.so.19.1
	./scripts/link-libomptarget.sh "$(REL)/libomptarget.a" crates/libomptarget/exports.map "$(DIST)/lib/libomptarget.so.22.1" libomptarget.so.22.1
	ln -sfn libomptarget.so.19.1 "$(DIST)/lib/libomptarget.so"
	cp -f "$(REL)/libomptarget_devicertl.a" "$(DIST)/lib/libomptarget.devicertl.a"
	$(MAKE) devicertl-bc
	cp -f "$(REL)/ompcc" "$(DIST)/bin/ompcc.new" && mv -f "$(DIST)/bin/ompcc.new" "$(DIST)/bin/ompcc"
	cp -f "$(REL)/offload-server" "$(DIST)/bin/offload-server.new" && mv -f "$(DIST)/bin/offload-server.new" "$(DIST)/bin/offload-server"
	cp -f "$(REL)/offload-worker" "$(DIST)/lib/offload-worker.new" && mv -f "$(DIST)/lib/offload-worker.new" "$(DIST)/lib/offload-worker"
	cp -f "$(REL)/offload-mpi-device" "$(DIST)/bin/offload-mpi-device.new" && mv -f "$(DIST)/bin/offload-mpi-device.new" "$(DIST)/bin/offload-mpi-device"
	cp -f "$(REL)/omp-replay" "$(DIST)/bin/omp-replay.new" && mv -f "$(DIST)/bin/omp-replay.new" "$(DIST)/bin/omp-replay"
	./scripts/help2man.sh "$(DIST)/bin/ompcc" "the OpenMP offloading compiler driver that builds fat binaries" "$(DIST)/share/man/man1/ompcc.1"
	./scripts/help2man.sh "$(DIST)/bin/offload-server" "serves this machine's offload devices to remote OpenMP programs" "$(DIST)/share/man/man1/offload-server.1"
	./scripts/help2man.sh "$(DIST)/bin/omp-replay" "runs one kernel launch recorded on an isolated device again, alone" "$(DIST)/share/man/man1/omp-replay.1"

# Installs dist/ like LLVM lays itself out: PREFIX/bin, PREFIX/lib (ompcc finds the runtime in
# ../lib next to itself, wherever it is installed), man pages and docs. DESTDIR is honoured.
# `make uninstall PREFIX=…` removes exactly these files (and the doc directory, if left empty).
PREFIX ?= /usr/local
# One shell word (see sq): `PREFIX="/x/precious dir"` must not touch /x/precious.
ROOT := $(call sq,$(DESTDIR)$(PREFIX))
INSTALL_BIN := ompcc offload-server offload-mpi-device omp-replay
INSTALL_LIB := libomptarget.so.19.1 libomptarget.so.22.1 libomptarget.devicertl.a \
  libomptarget.devicertl.bc libomptarget.devicertl.llvm19.bc offload-worker
INSTALL_MAN := ompcc.1 offload-server.1 omp-replay.1
INSTALL_DOC := README.md $(notdir $(wildcard docs/*.md))
install:
	test -x "$(DIST)/bin/ompcc" || $(MAKE) dist
	install -d $(ROOT)/bin $(ROOT)/lib $(ROOT)/share/man/man1 $(ROOT)/share/doc/omprs
	for f in $(INSTALL_BIN); do install -m 755 "$(DIST)/bin/$$f" $(ROOT)/bin/"$$f" || exit 1; done
	for f in $(INSTALL_LIB); do install -m 644 "$(DIST)/lib/$$f" $(ROOT)/lib/"$$f" || exit 1; done
	chmod 755 $(ROOT)/lib/libomptarget.so.19.1 $(ROOT)/lib/libomptarget.so.22.1 $(ROOT)/lib/offload-worker
	ln -sfn libomptarget.so.19.1 $(ROOT)/lib/libomptarget.so
	for f in $(INSTALL_MAN); do install -m 644 "$(DIST)/share/man/man1/$$f" $(ROOT)/share/man/man1/"$$f" || exit 1; done
	install -m 644 README.md $(ROOT)/share/doc/omprs/README.md
	for f in $(notdir $(wildcard docs/*.md)); do install -m 644 "docs/$$f" $(ROOT)/share/doc/omprs/"$$f" || exit 1; done

uninstall:
	for f in $(INSTALL_BIN); do rm -f $(ROOT)/bin/"$$f"; done
	for f in $(INSTALL_LIB) libomptarget.so; do rm -f $(ROOT)/lib/"$$f"; done
	for f in $(INSTALL_MAN); do rm -f $(ROOT)/share/man/man1/"$$f"; done
	for f in $(INSTALL_DOC); do rm -f $(ROOT)/share/doc/omprs/"$$f"; done
	-rmdir $(ROOT)/share/doc/omprs 2>/dev/null

# The CPU device runtime again, as LLVM bitcode (rustc's LLVM, 22): one module of the crate alone
# (no std: it only refers to libc and libomp), in two ABIs: with LLVM 22's loop signatures
# (libomptarget.devicertl.bc) and with LLVM 19's (libomptarget.devicertl.llvm19.bc). ompcc links
# it into flang's device code with LTO (docs/devicertl.md). Own target directories: these rlibs
# must not replace the workspace's. No debug info: flang's device code calls __kmpc_target_init
# without a source location, which LLVM rejects in a function with debug info (-g) once the callee
# is an inlinable definition with debug info.
BC_FLAGS := -C codegen-units=1 -C panic=abort -C debuginfo=0
devicertl-bc:
	mkdir -p "$(DIST)/lib"
	$(CARGO) rustc --release -p omp-devicertl-host --lib --crate-type=rlib --target-dir target/devicertl-bc -- \
	  $(BC_FLAGS) --cfg omp_devicertl_llvm22 "--emit=llvm-bc=$(CURDIR)/target/devicertl-bc/libomptarget.devicertl.bc"
	$(CARGO) rustc --release -p omp-devicertl-host --lib --crate-type=rlib --target-dir target/devicertl-bc19 -- \
	  $(BC_FLAGS) "--emit=llvm-bc=$(CURDIR)/target/devicertl-bc19/libomptarget.devicertl.llvm19.bc"
	cp -f target/devicertl-bc/libomptarget.devicertl.bc target/devicertl-bc19/libomptarget.devicertl.llvm19.bc "$(DIST)/lib/"

demo: setup dist
	./scripts/demo.sh

# Unit tests: every crate but the end-to-end one. Needs neither clang nor dist/.
unit:
	$(CARGO) test --workspace --release --exclude omp-e2e

# End-to-end tests: C, C++ and Fortran programs compiled with clang/flang 19 and 22 and run on
# dist/ (crates/e2e).
e2e: setup dist
	$(CARGO) test --release -p omp-e2e

# The examples of README.md and docs/*.md, run as written and compared with the pages (one test
# of crates/e2e, so `make e2e` and `make test` run it too; markup: crates/e2e/src/doctest.rs).
# `make doctest PAGE=docs/check.md` runs one page.
doctest: setup dist
	OMP_DOCTEST_PAGE=$(call sq,$(PAGE)) $(CARGO) test --release -p omp-e2e --test docs

# Everything: unit tests, end-to-end programs, and LLVM's own offload test suite against our
# runtime: on the host device, then its binaries again on an MPI device rank (--mpi reuses the
# plain run's), then isolated under the checker. Set-up and dist/ come first, as before.
test: setup dist unit e2e
	./scripts/conformance.sh
	./scripts/conformance.sh --mpi
	./scripts/conformance.sh --isolate

conformance: setup dist
	./scripts/conformance.sh

bench: setup dist
	./scripts/bench.sh
	./scripts/bench-launch-cg.sh
	./scripts/bench-bigmaps.sh
	./scripts/bench-isolate.sh
	./scripts/bench-check.sh
	./scripts/bench-remote.sh
	./scripts/bench-mpi.sh
	./scripts/bench-fortran.sh
	./scripts/bench-driver.sh
	./scripts/bench-declare-target.sh
	./scripts/bench-replay.sh
	./scripts/bench-spread.sh

fmt:
	$(CARGO) fmt --all

lint:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

clean:
	$(CARGO) clean
	rm -rf "$(DIST)"

# The GPU check's dry run (docs/gpu-check.md): builds the bundle for sm_90 and runs what it can
# without a GPU; prints the device tool call for the real run.
.PHONY: gpu-check-dry
gpu-check-dry: setup dist
	./scripts/gpu-check.sh dry-run
