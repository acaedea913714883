#!/usr/bin/env python3
"""Starts the scripted LLM, the real iac-code kernel and iac-code-agui (tests/real_kernel's own
launcher code, imported, not copied), then runs one framework suite's command against them.

    python launch.py --venv VENV --adapter BIN [--timeout SECS] [--keep] -- node test.mjs ...

The command gets, in its environment:
    ADAPTER_URL   http://127.0.0.1:<port> (iac-code-agui, --cors-allow-origin PAGE_ORIGIN)
    PAGE_PORT     a free port for the suite's own page server; PAGE_ORIGIN http://127.0.0.1:PAGE_PORT
    AGUI_CWD      a workspace directory inside the adapter's and kernel's allowed roots
    WORK          the run's temporary directory (logs/ holds every child's log)
Everything binds 127.0.0.1; every child runs in its own process group and is killed on exit, on
the deadline and on SIGTERM/SIGINT/SIGHUP. Exit status: the command's (124 on the deadline).
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import signal
import subprocess
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "real_kernel"))
import run as rk  # noqa: E402  tests/real_kernel/run.py: Env, start_child, cleanup


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--venv", required=True)
    ap.add_argument("--adapter", required=True)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    args.venv = os.path.abspath(args.venv)

    test = {}

    def stop_test():
        p = test.get("popen")
        if p is not None and p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
                p.wait(timeout=3)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def on_signal(signum, _frame):
        stop_test()
        rk.cleanup()
        os._exit(128 + signum)

    atexit.register(rk.cleanup)
    atexit.register(stop_test)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)

    def on_timeout():
        print(f"launch.py: global timeout after {args.timeout:.0f}s", flush=True)
        stop_test()
        for child in rk.CHILDREN:
            print(f"--- {child.name} log tail:\n{child.tail(15)}", flush=True)
        rk.cleanup()
        os._exit(124)

    watchdog = threading.Timer(args.timeout, on_timeout)
    watchdog.daemon = True
    watchdog.start()

    env = rk.Env(args)
    page_port = rk.free_port()
    page_origin = f"http://127.0.0.1:{page_port}"
    rc = 1
    try:
        env.start_llm()
        env.start_kernel()
        child = rk.start_child("adapter", [args.adapter, "--host", "127.0.0.1", "--port",
                                           str(env.ours_port), "--a2a-url",
                                           f"http://127.0.0.1:{env.kernel_port}",
                                           "--state-dir", env.state_ours,
                                           "--cors-allow-origin", page_origin, "--debug"],
                               env.base_env, env.tmp, env.logs)
        rk.wait_health(env.ours_port, child, timeout=20)
        rk.log(f"adapter on {env.ours_port}, kernel on {env.kernel_port}, LLM on {env.llm_port}")
        test_env = dict(os.environ)
        test_env.update({
            "ADAPTER_URL": f"http://127.0.0.1:{env.ours_port}",
            "PAGE_PORT": str(page_port),
            "PAGE_ORIGIN": page_origin,
            "AGUI_CWD": env.cwd("framework"),
            "WORK": env.tmp,
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
        })
        test["popen"] = subprocess.Popen(cmd, env=test_env, start_new_session=True)
        rc = test["popen"].wait()
    finally:
        watchdog.cancel()
        stop_test()
        rk.cleanup()
        if rc != 0:
            for child in rk.CHILDREN:
                print(f"--- {child.name} log tail ({child.log_path}):\n{child.tail(20)}",
                      flush=True)
        if args.keep or rc != 0:
            print(f"launch.py: kept {env.tmp}", flush=True)
        else:
            shutil.rmtree(env.tmp, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
