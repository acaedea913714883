#!/usr/bin/env bash
# The example web console (contrib/console) as users use it: Debian's chromium (driven by
# puppeteer-core) opens it through Debian's nginx with the shipped site config
# (contrib/nginx/agui.conf), in front of iac-code-agui and the fake A2A kernel; a second adapter
# with --cors-allow-origin serves the cross-origin case.
#
#   bash tests/browser/run.sh            (needs: apt-get install -y chromium nginx; node >= 20)
#
# Everything binds 127.0.0.1 on free ports and is stopped on exit; the whole run is bounded
# (BROWSER_TEST_TIMEOUT, default 240 s). Screenshots go to target/browser-screenshots/.
# Logs of a failed run are printed (tail) and kept under $TMPDIR.
set -euo pipefail
STARTED=$(date +%s)

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
cd "$ROOT"

CHROMIUM="${CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}"
NGINX="${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}"
[ -x "$CHROMIUM" ] || { echo "chromium not found (apt-get install -y chromium)" >&2; exit 1; }
[ -x "$NGINX" ] || { echo "nginx not found (apt-get install -y nginx)" >&2; exit 1; }

cargo build --quiet --examples --bins
if [ ! -d "$HERE/node_modules/puppeteer-core" ]; then
  (cd "$HERE" && npm ci --no-audit --no-fund --loglevel=error)
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/agui-browser.XXXXXX")"
chmod 755 "$WORK"
mkdir -p "$WORK/workspace" "$WORK/state" "$WORK/state-cors" "$WORK/nginx"
SHOTS="$ROOT/target/browser-screenshots"
rm -rf "$SHOTS" && mkdir -p "$SHOTS"
PIDS=()
RC=1

cleanup() {
  if [ -f "$WORK/nginx/nginx.pid" ]; then
    kill "$(cat "$WORK/nginx/nginx.pid")" 2>/dev/null || true
  fi
  for pid in "${PIDS[@]}"; do
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    fi
  done
  if [ "$RC" -eq 0 ]; then
    rm -rf "$WORK"
  else
    for f in adapter.log adapter-cors.log nginx/error.log; do
      echo "--- $f (tail) ---" >&2
      tail -n 30 "$WORK/$f" >&2 2>/dev/null || true
    done
    echo "--- logs kept in $WORK ---" >&2
  fi
  echo "browser test: $(( $(date +%s) - STARTED )) s" >&2
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# shellcheck source=tests/support/servers.sh
source tests/support/servers.sh
start_fake_kernel || { echo "fake kernel did not start" >&2; exit 1; }

NGINX_PORT="$(free_port)"
start_adapter() { # port state-dir log extra-args...
  local port="$1" state="$2" log="$3"
  shift 3
  env -u IAC_CODE_AGUI_AUTH_TOKEN IAC_CODE_AGUI_ALLOWED_CWDS="$WORK" \
    target/debug/iac-code-agui --a2a-url "$KERNEL_URL" --state-dir "$state" \
      --heartbeat-interval 1 --port "$port" --debug "$@" >>"$log" 2>&1 &
  PIDS+=($!)
  wait_http "http://127.0.0.1:$port/health" "$!" || { echo "adapter on $port did not start" >&2; exit 1; }
}
ADAPTER_PORT="$(free_port)"
start_adapter "$ADAPTER_PORT" "$WORK/state" "$WORK/adapter.log"
CORS_PORT="$(free_port)"
start_adapter "$CORS_PORT" "$WORK/state-cors" "$WORK/adapter-cors.log" \
  --cors-allow-origin "http://127.0.0.1:$NGINX_PORT" --detach-grace 30

# The shipped site config, pointed at this test's ports and files, inside a minimal nginx.conf
# that (like Debian's default) turns gzip on for everything, text/event-stream included: the
# site's own `gzip off` must win.
sed -e "s#server 127.0.0.1:8000;#server 127.0.0.1:$ADAPTER_PORT;#" \
    -e "s#listen 80;#listen 127.0.0.1:$NGINX_PORT;#" \
    -e "s#/usr/share/iac-code-agui/console/#$ROOT/contrib/console/#" \
    contrib/nginx/agui.conf >"$WORK/nginx/site.conf"
USER_LINE=""
[ "$(id -u)" = 0 ] && USER_LINE="user root;"
cat >"$WORK/nginx/nginx.conf" <<EOF
$USER_LINE
worker_processes 1;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/error.log warn;
events { worker_connections 256; }
http {
  include /etc/nginx/mime.types;
  access_log $WORK/nginx/access.log;
  client_body_temp_path $WORK/nginx/body;
  proxy_temp_path $WORK/nginx/proxy;
  fastcgi_temp_path $WORK/nginx/fastcgi;
  uwsgi_temp_path $WORK/nginx/uwsgi;
  scgi_temp_path $WORK/nginx/scgi;
  gzip on;
  gzip_min_length 1;
  gzip_types text/event-stream application/json application/javascript;
  include $WORK/nginx/site.conf;
}
EOF
"$NGINX" -t -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx" 2>"$WORK/nginx/test.log" \
  || { cat "$WORK/nginx/test.log" >&2; exit 1; }
"$NGINX" -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx"
wait_http "http://127.0.0.1:$NGINX_PORT/console/" "$$" || { echo "nginx did not start" >&2; exit 1; }

set +e
CHROMIUM="$CHROMIUM" SHOTS="$SHOTS" KERNEL_URL="$KERNEL_URL" WORK="$WORK" \
  AGUI_BIN="$ROOT/target/debug/iac-code-agui" \
  NGINX_URL="http://127.0.0.1:$NGINX_PORT" \
  ADAPTER_URL="http://127.0.0.1:$ADAPTER_PORT" \
  CORS_ADAPTER_URL="http://127.0.0.1:$CORS_PORT" \
  AGUI_CWD="$WORK/workspace" \
  timeout "${BROWSER_TEST_TIMEOUT:-240}" node "$HERE/test.mjs" "$@"
RC=$?
set -e
exit "$RC"
