# ZeroNIC for Linux: top-level entry points.
#
#   make demo     boot the emulated host(s) and show ZeroNIC working
#   make check    run the whole test suite (ends with "N passed, N failed");
#                 T="net_tcp.sh nic_faults.sh" runs only those tests
#   make check-quick  the edit-test loop's smoke test (a few minutes; not the gate)
#   make check-soak   the zero-copy wire cases at 1 GiB each way
#   make setup    install packages and tools, build kernel, module, userspace
#   make bench    the benchmark suite on a release kernel (out/bench/report.md)
#
# Both `demo` and `check` run `setup` first, so each works alone on a fresh
# Debian 12 machine. Build products of the kernel live in $(ZN_CACHE), keyed
# by kernel version + patches/ + qemu/kernel.config; see scripts/build-kernel.
# KSRC=/path/to/linux-7.3 uses your own configured and built tree instead.

SHELL := /bin/bash
export ZN_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/zeronic
export KSRC
export PATH := $(HOME)/.cargo/bin:$(ZN_CACHE)/venv/bin:$(PATH)

# The workspace's crates compile through sccache where it is installed (make
# setup installs it): a fresh clone on a machine that built before (CI's
# case) takes its dependencies' rlibs from $(ZN_CACHE)/sccache. Measured in
# fresh clones (docs/testing.md): the release build 112 s without it, 62 s
# with a warm cache, 8 s more with an empty one. ZN_SCCACHE=0 turns it off.
# The kernel and the module never use it.
ifneq ($(ZN_SCCACHE),0)
ifneq ($(shell command -v sccache),)
export RUSTC_WRAPPER := sccache
export SCCACHE_DIR := $(ZN_CACHE)/sccache
export SCCACHE_CACHE_SIZE ?= 4G
endif
endif

KDIR = $(shell scripts/kdir)
# The release (benchmark) kernel and the module built for it; only `make
# bench` builds them. kbuild wants an external module's source tree clean
# for a separate output directory (MO=), and the debug module is built in
# place, so the module's sources (the same files) are mirrored into
# out/release/src and built there: out/release/src/zeronic/zeronic.ko.
KDIR_RELEASE = $(shell ZN_KERNEL_VARIANT=release scripts/kdir)
MODULE_RELEASE_SRC = $(CURDIR)/out/release/src

.PHONY: all setup setup-graph packages pkg-build pkg-rust pkg-python pkg-runtime \
	kernel-source kernel module userspace selftests-build \
	check check-quick check-soak demo bench bench-packages bench-model bench-net kernel-release module-release \
	clean help

all: setup

help:
	@sed -n '3,12p' Makefile

# `make setup` is a graph run with one job per CPU: the build packages first,
# then bindgen-cli, the venv, the runtime packages (QEMU, the applications)
# and the kernel source's fetch and patching beside each other, then the
# kernel build with the workspace's cargo build beside it (at nice 19: it
# fills the CPU the kernel build's serial phases leave), then the module and
# the selftests. Every step is idempotent and quick when already done.
SETUP_JOBS ?= $(shell nproc)

setup:
	@$(MAKE) --no-print-directory -j$(SETUP_JOBS) setup-graph

setup-graph: packages kernel module userspace selftests-build

packages: pkg-build pkg-rust pkg-python pkg-runtime

# Only one step at a time may call apt: runtime (and bench) follow build.
pkg-build:
	@scripts/setup-packages build

pkg-rust: pkg-build
	@scripts/setup-packages rust

pkg-python: pkg-build
	@scripts/setup-packages python

pkg-runtime: pkg-build
	@scripts/setup-packages runtime

kernel-source: pkg-build
	@scripts/build-kernel --source

kernel: kernel-source pkg-rust pkg-python
	@scripts/build-kernel

# The out-of-tree module, built against the cached (patched) kernel.
module: kernel
	$(MAKE) -C "$(KDIR)" M="$(CURDIR)" modules

userspace: pkg-build
	nice -n 19 cargo build --workspace --release --all-targets

# The benchmark kernel: the same source and patches without the debug
# options (qemu/kernel-release.config), cached under its own key.
kernel-release: kernel-source pkg-rust pkg-python
	@nice -n 19 scripts/build-kernel --release

module-release: kernel-release
	@mkdir -p "$(MODULE_RELEASE_SRC)"
	rsync -a --delete --prune-empty-dirs --include=/Kbuild --include=/zeronic/ \
		--include=/zeronic/Kbuild --include='/zeronic/*.rs' \
		--include='/zeronic/*/' --include='/zeronic/*/*.rs' --include=/hw/ \
		--include=/hw/src/ --include='/hw/src/*.rs' --exclude='*' \
		"$(CURDIR)/" "$(MODULE_RELEASE_SRC)/"
	$(MAKE) -C "$(KDIR_RELEASE)" M="$(MODULE_RELEASE_SRC)" modules

# kselftest-style C programs, built against the kernel tree's selftest harness
# (zn_example links target/release/libzeronic.so).
selftests-build: kernel userspace
	$(MAKE) -C selftests KDIR="$(KDIR)"

check: setup
	@T="$(T)" scripts/check

# The smoke tier: no `make setup` (run it, or make check, once first), only
# incremental builds of what changed, then scripts/check with the quick
# suite and static checks (cargo fmt --check, rustfmt, cargo test).
check-quick:
	@scripts/kdir >/dev/null || { echo "zeronic: no kernel built yet: run make setup once" >&2; exit 1; }
	$(MAKE) -C "$(KDIR)" M="$(CURDIR)" modules
	cargo build --workspace --release --all-targets
	$(MAKE) -C selftests KDIR="$(KDIR)"
	@ZN_SUITE=selftests/suite-quick.conf ZN_CHECK_QUICK=1 scripts/check

check-soak: setup
	@ZN_SUITE=selftests/suite-soak.conf ZN_CHECK_STATIC=0 scripts/check

demo: setup
	@scripts/demo

# The whole benchmark suite (docs/performance.md): setup, the release kernel
# and module, one two-port guest; prints the tables and key=value lines.
bench: setup module-release bench-packages
	@scripts/bench

# What only the benchmarks use (RDMA baselines, the plots' font).
bench-packages: pkg-runtime
	@scripts/setup-packages bench

bench-model: pkg-build
	cargo run --release -p zeronic-nic --bin bench-model

# iperf3 over the ZeroNIC's two ports vs a veth pair, in one two-port guest.
bench-net: setup
	@scripts/bench-net

clean:
	-[ -f "$(ZN_CACHE)/kernel/current" ] && $(MAKE) -C "$(KDIR)" M="$(CURDIR)" clean
	-$(MAKE) -C selftests clean
	cargo clean
