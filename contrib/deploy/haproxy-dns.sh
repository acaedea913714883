#!/usr/bin/env bash
# Prints haproxy.cfg (same directory) for pairs that are found by DNS name, one name per pair, as a
# Kubernetes StatefulSet gives them (statefulset.yaml: pod agui-0 is pair1, agui-1 pair2, …): every
# `server` line names its pair's stable DNS name and re-resolves it every second through a
# `resolvers` section, so a pair whose pod is rescheduled on another node (same name, same volume,
# a new address) is followed within seconds, with no reload. Routing rules are haproxy.cfg's.
#
#   contrib/deploy/haproxy-dns.sh > /etc/haproxy/haproxy.cfg   (then `haproxy -c -f` it)
#
# Environment:
#   PAIRS        how many pairs (default 3; the StatefulSet's replicas)
#   PAIR_NAME    printf pattern of a pair's DNS name from its pod ordinal (pair I is ordinal I-1;
#                default agui-%d.agui.default.svc.cluster.local: pod, headless Service, namespace)
#   PAIR_PORT    the port every pair listens on (default 41243)
#   NAMESERVER   host:port of the DNS server (default: those of /etc/resolv.conf)
#   BIND         the frontend's address:port (default haproxy.cfg's; 0.0.0.0:41300 in a pod)
#
# Why one `server` line per pod and not `server-template` over the Service name: a template fills
# its slots with whatever addresses the Service returns, so after a pod moves its new address may
# land in another slot — another position on the hash ring — and its threads would be routed to
# another pair. A pod's own name keeps its slot. Why `hold nx` and friends: while a pod is being
# rescheduled its name does not resolve; HAProxy keeps the last address (connects fail: the JSON
# 503 of haproxy.cfg) instead of taking the server out of the ring, which would hash its threads
# onto pairs that do not hold them (and start new threads there that its pair, once back, no
# longer gets).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
N="${PAIRS:-3}"
PATTERN="${PAIR_NAME:-agui-%d.agui.default.svc.cluster.local}"
PORT="${PAIR_PORT:-41243}"
if [ -n "${NAMESERVER:-}" ]; then NS="nameserver dns1 $NAMESERVER"; else NS="parse-resolv-conf"; fi

awk -v n="$N" -v pat="$PATTERN" -v port="$PORT" -v bind="${BIND:-}" '
function servers(   i) {
  for (i = 1; i <= n; i++)
    printf "    server pair%d %s:%d resolvers cluster resolve-prefer ipv4 init-addr last,libc,none\n", i, sprintf(pat, i - 1), port
}
/^[^ #]/ { sec = $0; first = 1 }
/^    http-error / && sec == "backend pairs" { err = $0 }
/^    bind / && bind != "" && sec == "frontend agui" { print "    bind " bind; next }
sec ~ /^backend pair[0-9]+$/ {
  if (sec == "backend pair1" && first) {
    for (i = 1; i <= n; i++) {
      print "backend pair" i
      print err
      printf "    server pair%d %s:%d resolvers cluster resolve-prefer ipv4 init-addr last,libc,none\n", i, sprintf(pat, i - 1), port
    }
  }
  first = 0
  next
}
/^    server pair[0-9]+ / { if (first) servers(); first = 0; next }
{ print }
' "$HERE/haproxy.cfg"

cat <<EOF

# The pairs' names, asked again once a valid answer is a second old (hold valid 1s: HAProxy 2.6
# re-resolves a name only when its last valid answer is older than that; 10 s by default). A name
# that stops resolving (its pod is being rescheduled) keeps its last address for an hour (hold
# nx/timeout/refused/other): the server stays in the hash ring, its threads are refused until the
# pod is back at its new address. Never take a pair out of the ring on a DNS error: its threads
# would move. No "hold obsolete": it keeps a vanished address as a valid record, and the server
# would stay on its lost address (checked: tests/pairs/hostloss.sh).
resolvers cluster
    $NS
    resolve_retries 3
    timeout resolve 1s
    timeout retry 1s
    hold valid 1s
    hold nx 1h
    hold timeout 1h
    hold refused 1h
    hold other 1h
EOF
