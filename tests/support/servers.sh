# Shell helpers shared by the suites that start servers from bash (tests/browser/run.sh,
# tests/proxy/run.sh). Source it after setting WORK (the suite's scratch dir) and PIDS (an
# array the suite's cleanup kills).

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

wait_http() { # url pid: until the url answers 2xx, or the process is gone (10 s at most)
  for _ in $(seq 1 200); do
    curl -fsS "$1" >/dev/null 2>&1 && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}

# Starts target/debug/examples/fake-kernel on a free port; sets KERNEL_URL (its log in
# $WORK/kernel.log). Returns 1 when it does not say where it listens within 10 s.
start_fake_kernel() {
  target/debug/examples/fake-kernel --port 0 >"$WORK/kernel.log" 2>&1 &
  PIDS+=($!)
  KERNEL_URL=""
  for _ in $(seq 1 200); do
    KERNEL_URL="$(sed -n 's/^listening on \(http:\/\/127\.0\.0\.1:[0-9]*\).*/\1/p' "$WORK/kernel.log" | head -n1)"
    [ -n "$KERNEL_URL" ] && return 0
    sleep 0.05
  done
  return 1
}
