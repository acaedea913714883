//! `--help`: the usage text.

pub const USAGE: &str = "\
Usage: iac-code-agui [OPTIONS]

AG-UI (HTTP + SSE) adapter for the iac-code A2A execution kernel.

Options:
  --host HOST                 bind address [env IAC_CODE_AGUI_HOST] (default 127.0.0.1)
  --port PORT                 port [env IAC_CODE_AGUI_PORT] (default 8000)
  --a2a-url URL               loopback A2A URL [env IAC_CODE_AGUI_A2A_URL];
                              empty starts a managed `iac-code a2a` kernel
  --a2a-command CMD           managed kernel command (default \"iac-code a2a\";
                              --host/--port are appended) [env IAC_CODE_AGUI_A2A_COMMAND]
  --state-dir DIR             thread-state directory [env IAC_CODE_AGUI_STATE_DIR]
                              (default <config-dir>/agui; config-dir from IAC_CODE_CONFIG_DIR,
                              else ~/.iac-code)
  --idle-shutdown SECS        exit after SECS without requests, 0 = off (default 0)
  --heartbeat-interval SECS   SSE heartbeat after SECS without an event (default 15)
  --interrupt-ttl SECS        lifetime of a pending interrupt (default 540)
  --a2a-idle-timeout SECS     fail a run whose upstream is silent this long, 0 = never (default 900)
  --kernel-start-timeout SECS wait this long for the managed kernel's /health (default 60)
  --workers N                 HTTP dispatcher threads; each request runs on its own
                              thread (default 8)
  --max-connections N         open client connections; beyond it a fast 503 (default 2048)
  --max-header-bytes N        request line plus headers, in bytes; beyond it 431 (default 16384)
  --max-headers N             header lines per request; beyond it 431 (default 100)
  --max-url-bytes N           request-target length; beyond it 414 (default 8192)
  --header-timeout SECS       time to send the request head; beyond it 408 (default 60)
  --body-timeout SECS         total time to send the request body; beyond it 408 (default 60)
  --keepalive-timeout SECS    idle keep-alive connections are closed after SECS (default 5)
  --write-timeout SECS        a client that accepts no bytes this long is dropped (default 60)
  --allowed-host HOST         extra Host header value accepted when bound to loopback (only
                              localhost, 127.0.0.1 and [::1] are otherwise); repeatable, env
                              comma-separated; on a non-loopback bind, enables the Host check
  --cors-allow-origin ORIGIN  a web page origin (scheme://host[:port]) allowed to call this
                              server from another origin (CORS; off by default); repeatable,
                              env comma-separated; `*` only without IAC_CODE_AGUI_AUTH_TOKEN
  --detach-grace SECS         a run whose client left keeps running this long for a client to
                              re-attach (subscribe route); then it is cancelled (default 0:
                              a client that leaves cancels its run, as the AG-UI spec says)
  --replay-buffer-bytes N     recent events kept per execution for an exact resume with
                              Last-Event-ID (default 262144)
  --pair-mode                 one of several adapter + kernel pairs behind a load balancer:
                              a thread this pair never held, arriving with history or a
                              resume, is refused (503 STATE_UNAVAILABLE), never restarted
  -d, --debug                 debug logging
  --log-stdout, --no-log-stdout
                              log to stdout instead of stderr (default: stderr)
  --log-format text|json      log lines as text, or one JSON object each with threadId, runId
                              and executionId as fields when known [env IAC_CODE_AGUI_LOG_FORMAT]
                              (default text)
  --config FILE               YAML file with the keys above (flat `key: value`), plus
                              `auth-token` and `a2a-token` (the variables below win over them)
                              Each option but --config also reads IAC_CODE_AGUI_<OPTION> (upper
                              snake case, e.g. IAC_CODE_AGUI_MAX_CONNECTIONS); the command line
                              wins over the variable, the variable over the file.
  -h, --help                  print this help
  -V, --version               print the version

Environment: IAC_CODE_AGUI_AUTH_TOKEN (protects this endpoint and /metrics), IAC_CODE_AGUI_A2A_TOKEN
(upstream bearer), IAC_CODE_AGUI_ALLOWED_CWDS (allowed workspace roots, ':'-separated; falls back to
IACCODE_A2A_ALLOWED_CWDS; default: the current directory and the system temp directory).
";
