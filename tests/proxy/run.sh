#!/usr/bin/env bash
# A new user's first deployment behind their own nginx, with a plain `proxy_pass` (no
# `proxy_set_header Host $http_host`): Debian's nginx serves http://localhost:<port>/ and proxies
# it to iac-code-agui (and the fake A2A kernel). A page of that origin POSTs a turn, as a browser
# does: `Origin: http://localhost:<port>`, while nginx sends the adapter its upstream's Host
# (`127.0.0.1:<adapter port>`). Checked:
#   1. the 403 names both causes (the proxy must pass the page's Host, with the nginx line; a page
#      of another origin must be allowed with --cors-allow-origin) and the two values compared,
#      and the adapter logs which header and value it compared;
#   2. with `proxy_set_header Host $http_host` added (the line the message gives), the same
#      request streams the turn to RUN_FINISHED.
#
#   bash tests/proxy/run.sh            (needs: apt-get install -y nginx curl)
#
# Everything binds 127.0.0.1 on free ports and is stopped on exit; bounded by PROXY_TEST_TIMEOUT
# (default 120 s). Logs of a failed run are printed (tail) and kept under $TMPDIR.
set -euo pipefail
STARTED=$(date +%s)

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
cd "$ROOT"

NGINX="${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}"
[ -x "$NGINX" ] || { echo "nginx not found (apt-get install -y nginx)" >&2; exit 1; }
command -v curl >/dev/null || { echo "curl not found (apt-get install -y curl)" >&2; exit 1; }

if [ -z "${PROXY_TEST_BOUNDED:-}" ]; then
  PROXY_TEST_BOUNDED=1 exec timeout --kill-after=5 "${PROXY_TEST_TIMEOUT:-120}" bash "$0" "$@"
fi

cargo build --quiet --examples --bins

WORK="$(mktemp -d "${TMPDIR:-/tmp}/agui-proxy.XXXXXX")"
chmod 755 "$WORK"
mkdir -p "$WORK/workspace" "$WORK/state" "$WORK/nginx"
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
    for f in adapter.log kernel.log nginx/error.log; do
      echo "--- $f (tail) ---" >&2
      tail -n 30 "$WORK/$f" >&2 2>/dev/null || true
    done
    echo "--- logs kept in $WORK ---" >&2
  fi
  echo "proxy test: $(( $(date +%s) - STARTED )) s" >&2
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() { echo "FAIL: $*" >&2; exit 1; }

# shellcheck source=tests/support/servers.sh
source tests/support/servers.sh
start_fake_kernel || fail "the fake kernel did not start"

ADAPTER_PORT="$(free_port)"
env -u IAC_CODE_AGUI_AUTH_TOKEN -u IAC_CODE_AGUI_CORS_ALLOW_ORIGIN IAC_CODE_AGUI_ALLOWED_CWDS="$WORK" \
  target/debug/iac-code-agui --a2a-url "$KERNEL_URL" --state-dir "$WORK/state" \
    --port "$ADAPTER_PORT" >>"$WORK/adapter.log" 2>&1 &
PIDS+=($!)
wait_http "http://127.0.0.1:$ADAPTER_PORT/health" "$!" || fail "the adapter did not start"

NGINX_PORT="$(free_port)"
site() { # extra proxy lines
  cat >"$WORK/nginx/nginx.conf" <<EOF
worker_processes 1;
daemon on;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/error.log warn;
events { worker_connections 64; }
http {
  access_log $WORK/nginx/access.log;
  client_body_temp_path $WORK/nginx/body;
  proxy_temp_path $WORK/nginx/proxy;
  fastcgi_temp_path $WORK/nginx/fastcgi;
  uwsgi_temp_path $WORK/nginx/uwsgi;
  scgi_temp_path $WORK/nginx/scgi;
  server {
    listen 127.0.0.1:$NGINX_PORT;
    server_name localhost;
    location / {
      proxy_pass http://127.0.0.1:$ADAPTER_PORT;
      proxy_http_version 1.1;
      proxy_buffering off;
      $1
    }
  }
}
EOF
  "$NGINX" -t -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx" 2>"$WORK/nginx/test.log" \
    || { cat "$WORK/nginx/test.log" >&2; fail "nginx -t"; }
}

PAGE="http://localhost:$NGINX_PORT"
turn() { # run id -> writes $WORK/answer, prints the status
  local body
  body=$(printf '{"threadId":"t-proxy","runId":"%s","state":{},"tools":[],"context":[],"messages":[{"id":"m-%s","role":"user","content":"hi"}],"forwardedProps":{"iacCode":{"schemaVersion":1,"rosInvocationId":"inv-1","cwd":"%s"}}}' "$1" "$1" "$WORK/workspace")
  curl -sS -o "$WORK/answer" -w '%{http_code}' --max-time 30 -X POST "$PAGE/" \
    -H "Origin: $PAGE" -H 'Content-Type: application/json' -H 'Accept: text/event-stream' \
    --data "$body"
}

# 1. The plain proxy_pass a new user writes first.
site ""
"$NGINX" -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx"
wait_http "$PAGE/health" "$$" || fail "nginx did not start"
status="$(turn r1)"
message="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["error"]["message"])' "$WORK/answer")"
echo "plain proxy_pass: $status $message"
[ "$status" = 403 ] || fail "expected 403, got $status: $(cat "$WORK/answer")"
for part in "\`$PAGE\`" "\`127.0.0.1:$ADAPTER_PORT\`" 'proxy_set_header Host $http_host' \
    "--cors-allow-origin $PAGE"; do
  case "$message" in
    *"$part"*) ;;
    *) fail "the message does not name: $part" ;;
  esac
done
grep -F "refused: Origin \"$PAGE\" is neither the request's Host \"127.0.0.1:$ADAPTER_PORT\"" \
  "$WORK/adapter.log" >/dev/null || fail "the adapter did not log the Origin and Host it compared"
echo "adapter log: $(grep -F 'refused: Origin' "$WORK/adapter.log" | tail -n1)"

# 2. The line the message gives: the page's Host passes, and the turn streams.
site 'proxy_set_header Host $http_host;'
"$NGINX" -s reload -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx"
for _ in $(seq 1 100); do
  status="$(turn "r2-$RANDOM")"
  [ "$status" != 403 ] && break
  sleep 0.1   # the old worker may still take the first request after the reload
done
[ "$status" = 200 ] || fail "with proxy_set_header Host \$http_host: $status $(cat "$WORK/answer")"
grep -q '"type":"RUN_FINISHED"' "$WORK/answer" || fail "no RUN_FINISHED: $(cat "$WORK/answer")"
echo "with proxy_set_header Host \$http_host: 200, the turn streamed to RUN_FINISHED"
RC=0
echo "proxy test: PASS"
