#!/usr/bin/env bash
# What the arm64 (aarch64) package needs on an x86_64 Debian machine, from
# rustup and Debian's own archive (apt), installed when missing; a second run
# checks and touches no network.
#
#   scripts/arm64.sh toolchain   a Rust compiler with the standard library for
#                                aarch64-unknown-linux-gnu, for scripts/package
#                                --target aarch64. rustup's toolchain (the one
#                                the x86_64 package is built with) when it has
#                                that library or `rustup target add` fetches
#                                it: prints "rustup". Otherwise (no rustup, or
#                                its downloads out of reach) Debian's rustc-web
#                                (`/usr/bin/rustc`) and its
#                                libstd-rust-web-dev:arm64, installed with
#                                apt: prints that rustc's path.
#                                ARM64_RUSTC=debian takes Debian's directly.
#   scripts/arm64.sh emulator    qemu-user-static, and Debian's arm64 redis 7.0
#                                (redis-tools:arm64, with the arm64 libraries it
#                                loads) unpacked into .tools/arm64/root, never
#                                installed; prints .tools/arm64, which then
#                                holds `run` (runs an aarch64 program under
#                                qemu-aarch64-static with that root),
#                                `redis-server` and `redis-cli`.
#
# Whatever comes from apt, dpkg's foreign architecture arm64 is added first
# (and apt-get update run) when missing: the arm64 .debs come from the same
# Debian mirrors. The emulated
# server is what tests/package.rs serves the arm64 package with
# (scripts/test); there is no binfmt_misc here, so every aarch64 program runs
# through `run` explicitly. Debian/Ubuntu x86_64; run as root or with sudo.
set -euo pipefail
cd "$(dirname "$0")/.."
sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"

# dpkg's foreign architecture arm64 and its package lists.
arm64_arch() {
  dpkg --print-foreign-architectures | grep -qx arm64 && return
  echo "arm64: adding dpkg's foreign architecture arm64" >&2
  $sudo dpkg --add-architecture arm64
  $sudo apt-get update -qq
}

apt_install() {
  echo "installing: $*" >&2
  arm64_arch
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null \
    || { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null; }
}

installed() { [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]; }

triple=aarch64-unknown-linux-gnu
# Whether the rustc $1 has the standard library for $triple.
has_std() { compgen -G "$("$1" --print target-libdir --target $triple 2>/dev/null)/libstd-*.rlib" >/dev/null; }

toolchain() {
  if [ "${ARM64_RUSTC:-}" != debian ] && command -v rustup >/dev/null; then
    if has_std rustc || { echo "arm64: rustup target add $triple" >&2 && timeout 300 rustup target add $triple >&2 && has_std rustc; }; then
      echo rustup
      return
    fi
    echo "arm64: rustup's $(rustc -V) has no standard library for $triple and could not fetch one: Debian's rustc-web instead" >&2
  fi
  local rustc=/usr/bin/rustc
  if ! installed rustc-web || ! installed libstd-rust-web-dev:arm64; then
    apt_install rustc-web libstd-rust-web-dev:arm64
  fi
  has_std $rustc || {
    echo "arm64: $rustc ($($rustc -V)) has no standard library for $triple" >&2
    exit 1
  }
  echo $rustc
}

# Debian's arm64 redis-server (the package holds only its link to
# redis-tools' binary) and redis-cli, and every library they load, unpacked
# (dpkg-deb -x) into .tools/arm64/root: the arm64 copies of the host's
# libraries are never installed (apt would upgrade the host's own to match),
# so nothing on the host changes.
root_debs=(redis-server redis-tools libc6 libgcc-s1 libstdc++6 libatomic1 libjemalloc2 liblzf1 libssl3
  libsystemd0 libcap2 libgcrypt20 libgpg-error0 liblzma5 libzstd1 liblz4-1)
dir=.tools/arm64

emulator_ready() {
  command -v qemu-aarch64-static >/dev/null \
    && "$dir/redis-server" --version 2>/dev/null | grep -q ' v=7\.0\.' \
    && "$dir/redis-cli" --version 2>/dev/null | grep -q '^redis-cli 7\.0\.'
}

emulator() {
  if emulator_ready; then
    echo "$PWD/$dir"
    return
  fi
  command -v qemu-aarch64-static >/dev/null || apt_install qemu-user-static
  arm64_arch
  command -v dpkg-deb >/dev/null
  local since=$SECONDS debs
  rm -rf "$dir" && mkdir -p "$dir/debs" "$dir/root"
  echo "arm64: fetching Debian's arm64 ${root_debs[*]} into $dir" >&2
  (cd "$dir/debs" && apt-get download -qq "${root_debs[@]/%/:arm64}" 2>/dev/null) \
    || { $sudo apt-get update -qq && (cd "$dir/debs" && apt-get download -qq "${root_debs[@]/%/:arm64}"); }
  for debs in "$dir"/debs/*.deb; do dpkg-deb -x "$debs" "$dir/root"; done
  (cd "$dir/debs" && ls) >"$dir/versions"
  rm -rf "$dir/debs"
  cat >"$dir/run" <<'EOF'
#!/bin/sh
# Runs the aarch64 program $1 (arguments after it) under qemu-user, its
# libraries (and /lib/ld-linux-aarch64.so.1) from Debian's arm64 packages in
# ./root (scripts/arm64.sh).
exec qemu-aarch64-static -L "$(dirname "$(readlink -f "$0")")/root" "$@"
EOF
  for p in redis-server redis-cli; do
    printf '#!/bin/sh\n# Debian'"'"'s arm64 %s under qemu-user (scripts/arm64.sh).\nd=$(dirname "$(readlink -f "$0")")\nexec "$d/run" "$d/root/usr/bin/%s" "$@"\n' "$p" "$p" >"$dir/$p"
  done
  chmod 755 "$dir/run" "$dir/redis-server" "$dir/redis-cli"
  emulator_ready || {
    echo "arm64: $dir/redis-server does not run under qemu-aarch64-static:" >&2
    "$dir/redis-server" --version >&2 || true
    exit 1
  }
  echo "arm64: $("$dir/redis-server" --version | cut -d' ' -f1-3) (Debian arm64, under qemu-user) in $((SECONDS - since)) s" >&2
  echo "$PWD/$dir"
}

case "${1:-}" in
  toolchain) toolchain ;;
  emulator) emulator ;;
  *) echo "usage: scripts/arm64.sh toolchain|emulator" >&2; exit 2 ;;
esac
