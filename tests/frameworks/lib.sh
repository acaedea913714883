# Shared by the chat-framework suites' run.sh (sourced).

# npm ci in $1 when its lock is newer than the last install (as tests/run-all.sh does): a suite
# run again costs no install.
npm_ci() {
  [ "$1/node_modules/.package-lock.json" -nt "$1/package-lock.json" ] && return 0
  (cd "$1" && timeout 240 npm ci --no-audit --no-fund --loglevel=error)
}
