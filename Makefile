# Top-level entry points. `make demo` and `make test` do their own set-up.
CARGO ?= cargo
DIST  := dist
REL   := target/release

.PHONY: all setup dist devicertl-bc demo test unit e2e conformance bench fmt lint clean

all: dist

setup:
	./scripts/setup.sh

# Release artifacts: the runtime under both sonames, the driver, the CPU device runtime.
dist:
	$(CARGO) build --release -p omp-libomptarget -p ompcc -p omp-devicertl-host -p offload-server -p omp-plugin-isolate
	mkdir -p $(DIST)/lib $(DIST)/bin
	./scripts/link-libomptarget.sh $(REL)/libomptarget.a crates/libomptarget/exports.map $(DIST)/lib/libomptarget.so
	ln -sfn libomptarget.so $(DIST)/lib/libomptarget.so.19.1
	ln -sfn libomptarget.so $(DIST)/lib/libomptarget.so.22.1
	cp -f $(REL)/libomptarget_devicertl.a $(DIST)/lib/libomptarget.devicertl.a
	$(MAKE) devicertl-bc
	cp -f $(REL)/ompcc $(DIST)/bin/ompcc.new && mv -f $(DIST)/bin/ompcc.new $(DIST)/bin/ompcc
	cp -f $(REL)/offload-server $(DIST)/bin/offload-server.new && mv -f $(DIST)/bin/offload-server.new $(DIST)/bin/offload-server
	cp -f $(REL)/offload-worker $(DIST)/lib/offload-worker.new && mv -f $(DIST)/lib/offload-worker.new $(DIST)/lib/offload-worker

# The CPU device runtime again, as LLVM bitcode (rustc's LLVM, 22): one module of the crate alone
# (no std: it only refers to libc and libomp), in two ABIs: with LLVM 22's loop signatures
# (libomptarget.devicertl.bc) and with LLVM 19's (libomptarget.devicertl.llvm19.bc). ompcc links
# it into flang's device code with LTO (docs/devicertl.md). Own target directories: these rlibs
# must not replace the workspace's. No debug info: flang's device code calls __kmpc_target_init
# without a source location, which LLVM rejects in a function with debug info (-g) once the callee
# is an inlinable definition with debug info.
BC_FLAGS := -C codegen-units=1 -C panic=abort -C debuginfo=0
devicertl-bc:
	mkdir -p $(DIST)/lib
	$(CARGO) rustc --release -p omp-devicertl-host --lib --crate-type=rlib --target-dir target/devicertl-bc -- \
	  $(BC_FLAGS) --cfg omp_devicertl_llvm22 --emit=llvm-bc=$(abspath target/devicertl-bc)/libomptarget.devicertl.bc
	$(CARGO) rustc --release -p omp-devicertl-host --lib --crate-type=rlib --target-dir target/devicertl-bc19 -- \
	  $(BC_FLAGS) --emit=llvm-bc=$(abspath target/devicertl-bc19)/libomptarget.devicertl.llvm19.bc
	cp -f target/devicertl-bc/libomptarget.devicertl.bc target/devicertl-bc19/libomptarget.devicertl.llvm19.bc $(DIST)/lib/

demo: setup dist
	./scripts/demo.sh

# Everything: unit tests, end-to-end programs compiled with clang/flang 19 and 22, and
# LLVM's own offload test suite against our runtime.
test: setup dist
	$(CARGO) test --workspace --release
	./scripts/conformance.sh
	./scripts/conformance.sh --isolate

conformance: setup dist
	./scripts/conformance.sh

bench: setup dist
	./scripts/bench.sh

fmt:
	$(CARGO) fmt --all

lint:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

clean:
	$(CARGO) clean
	rm -rf $(DIST)
