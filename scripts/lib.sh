# Shared settings and helpers for the setup, build and test scripts.
# Sourced, never run. Everything the project builds outside the checkout lives
# under $ZN_CACHE so that a fresh clone reuses a warm kernel build.

set -euo pipefail

ZN_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ZN_CACHE=${ZN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/zeronic}
ZN_KVER_SERIES=${ZN_KVER_SERIES:-7.3}          # Debian's linux-source-<series>
ZN_VENV=$ZN_CACHE/venv
ZN_JOBS=${ZN_JOBS:-$(( $(nproc) + 1 ))}
export PATH="$HOME/.cargo/bin:$ZN_VENV/bin:$PATH"

die()  { printf 'zeronic: error: %s\n' "$*" >&2; exit 1; }
info() { printf 'zeronic: %s\n' "$*" >&2; }

# Runs "$@" and, if it fails, dies with a message naming the step.
step() {
	local what=$1; shift
	"$@" || die "$what failed (command: $*)"
}

# libclang >= 17 comes from the PyPI wheel; the kernel's bindgen finds it here.
zn_libclang_path() {
	local p
	p=$(ls -d "$ZN_VENV"/lib/python3*/site-packages/clang/native 2>/dev/null | head -n1) || true
	[ -n "$p" ] || die "libclang not found in $ZN_VENV; run 'make setup'"
	printf '%s\n' "$p"
}

# The cache key of a kernel build: upstream source version + patch series +
# config fragment. Any change to one of them yields a new build directory.
zn_kernel_key() {
	local srcver=$1
	{
		printf '%s\n' "$srcver"
		cat "$ZN_ROOT"/patches/*.patch 2>/dev/null || true
		cat "$ZN_ROOT"/qemu/kernel.config
	} | sha256sum | cut -c1-16
}

# The release (benchmark) kernel: the same source and patches, configured
# with qemu/kernel-release.config merged after kernel.config. Its key is the
# debug key's inputs plus that fragment; its trees live in a directory of
# their own, so they never count against (or evict) the debug builds.
# ZN_KERNEL_VARIANT=release makes zn_kdir (and so scripts/kdir, qemu/run)
# use it; anything else, or unset, means the debug kernel make check uses.
zn_kernel_key_release() {
	local srcver=$1
	{
		zn_kernel_key "$srcver"
		cat "$ZN_ROOT"/qemu/kernel-release.config
	} | sha256sum | cut -c1-16
}

# The cache directory of the selected variant's builds.
zn_kernel_cache() {
	if [ "${ZN_KERNEL_VARIANT:-debug}" = release ]; then
		printf '%s\n' "$ZN_CACHE/kernel-release"
	else
		printf '%s\n' "$ZN_CACHE/kernel"
	fi
}

# Where the kernel tree used for module builds lives. KSRC (a user's own 7.3
# tree, already configured and built) wins over the cache (for the release
# variant, KSRC_RELEASE wins over KSRC). Otherwise it is the
# cached build whose key matches this checkout's patches and config, so two
# checkouts with different patch series (worktrees) never use each other's
# kernel; `current` only records the most recent build.
zn_kdir() {
	if [ "${ZN_KERNEL_VARIANT:-debug}" = release ] && [ -n "${KSRC_RELEASE:-}" ]; then
		printf '%s\n' "$KSRC_RELEASE"
		return
	fi
	if [ -n "${KSRC:-}" ]; then
		printf '%s\n' "$KSRC"
		return
	fi
	local srcver key cache
	[ -f "$ZN_CACHE/kernel/srcver" ] || die "no kernel built yet; run 'make setup'"
	srcver=$(cat "$ZN_CACHE/kernel/srcver")
	cache=$(zn_kernel_cache)
	if [ "${ZN_KERNEL_VARIANT:-debug}" = release ]; then
		key=$(zn_kernel_key_release "$srcver")
		[ -f "$cache/$key/built" ] ||
			die "no release kernel built for this checkout (cache key $key); run 'scripts/build-kernel --release' (make bench does)"
	else
		key=$(zn_kernel_key "$srcver")
		[ -f "$cache/$key/built" ] ||
			die "no kernel built for this checkout's patches (cache key $key); run 'make setup'"
	fi
	printf '%s\n' "$cache/$key/linux"
}
