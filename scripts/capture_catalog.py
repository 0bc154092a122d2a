#!/usr/bin/env python3
"""Capture MCP tool catalogs from real servers over stdio and merge them.

Standard library only (Python >= 3.11). Speaks MCP JSON-RPC directly:

    initialize  ->  notifications/initialized  ->  tools/list (+ nextCursor pages)

Subcommands:

  capture  Start one server, list its tools, write one JSON file:
             {"name", "description", "serverInfo", "instructions", "tools"}
           e.g.
             capture_catalog.py capture --name time --out work/time.json \\
                 --fallback-description "Current time and time-zone conversion." \\
                 -- /path/to/venv/bin/mcp-server-time

  merge    Combine hand-written built-in tools with captured servers into the
           grouped catalog {"builtin": [...], "servers": [...]}.
             capture_catalog.py merge --builtin scripts/builtin-tools.json \\
                 --out examples/catalog.json work/*.json

Output is deterministic: servers sorted by name, tools kept in the order the
server returned them, 2-space indent, UTF-8, trailing newline.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PROTOCOL_VERSION = "2025-06-18"
CLIENT_INFO = {"name": "toolshelf-capture", "version": "0.1.0"}
MAX_PAGES = 100
DESCRIPTION_MAX_CHARS = 200
NAME_RE = re.compile(r"[a-zA-Z0-9_-]{1,64}")


class CaptureError(RuntimeError):
    pass


class StdioClient:
    """Minimal newline-delimited JSON-RPC client over a child's stdin/stdout."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: str | None, timeout: float):
        self.deadline = time.monotonic() + timeout
        self.timeout = timeout
        self.stderr_file = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr_file,
            env=env,
            cwd=cwd,
            start_new_session=True,  # so we can signal the server's own group only
        )
        self.sel = selectors.DefaultSelector()
        assert self.proc.stdout is not None
        self.sel.register(self.proc.stdout, selectors.EVENT_READ)
        self.buf = b""
        self.next_id = 1
        self.skipped: list[str] = []

    # -- transport -----------------------------------------------------------
    def send(self, msg: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        data = json.dumps(msg, separators=(",", ":")).encode() + b"\n"
        try:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
        except BrokenPipeError as exc:
            raise CaptureError(f"server closed stdin: {self.stderr_tail()}") from exc

    def read_line(self) -> bytes:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buf:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                raise CaptureError(f"timed out after {self.timeout:.0f}s; stderr: {self.stderr_tail()}")
            if not self.sel.select(timeout=remaining):
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                raise CaptureError(
                    f"server exited (code {self.proc.poll()}) before answering; stderr: {self.stderr_tail()}"
                )
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line

    def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        req_id = self.next_id
        self.next_id += 1
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": req_id, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)
        while True:
            raw = self.read_line().strip()
            if not raw:
                continue
            try:
                resp = json.loads(raw)
            except json.JSONDecodeError:
                # A server logging to stdout: not protocol, skip it.
                self.skipped.append(raw.decode(errors="replace")[:200])
                continue
            if not isinstance(resp, dict):
                continue
            if "method" in resp:
                if "id" in resp:
                    # A request from the server (ping, roots/list, ...): we
                    # declared no capabilities, so answer ping and refuse the rest.
                    if resp["method"] == "ping":
                        self.send({"jsonrpc": "2.0", "id": resp["id"], "result": {}})
                    else:
                        self.send({
                            "jsonrpc": "2.0",
                            "id": resp["id"],
                            "error": {"code": -32601, "message": "Method not found"},
                        })
                # Notifications (logging, list_changed, progress): skip.
                continue
            if resp.get("id") != req_id:
                continue
            if "error" in resp:
                raise CaptureError(f"{method} failed: {json.dumps(resp['error'])}")
            result = resp.get("result")
            if not isinstance(result, dict):
                raise CaptureError(f"{method}: result is not an object: {raw[:200]!r}")
            return result

    def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)

    def stderr_tail(self, limit: int = 1500) -> str:
        try:
            self.stderr_file.seek(0)
            data = self.stderr_file.read()
        except (OSError, ValueError):
            return ""
        text = data.decode(errors="replace").strip()
        return text[-limit:] if text else "(empty)"

    def close(self) -> None:
        """Close stdin (the stdio transport's shutdown), then TERM, then KILL."""
        try:
            if self.proc.stdin:
                self.proc.stdin.close()
        except OSError:
            pass
        for sig, wait in ((None, 2.0), (signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)):
            if self.proc.poll() is not None:
                break
            if sig is not None:
                try:
                    os.killpg(self.proc.pid, sig)  # the group we created for it
                except ProcessLookupError:
                    break
            try:
                self.proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                continue
        self.sel.close()
        if self.proc.stdout:
            self.proc.stdout.close()
        self.stderr_file.close()


def first_sentence(text: str) -> str:
    """First sentence of the first prose paragraph (markdown headings skipped)."""
    lines = [ln.strip() for ln in text.splitlines()]
    prose = " ".join(ln for ln in lines if ln and not ln.startswith("#"))
    prose = " ".join(prose.split())
    for i, ch in enumerate(prose):
        if ch in ".!?" and (i + 1 == len(prose) or prose[i + 1] == " "):
            return prose[: i + 1]
    return prose


def pick_description(init: dict[str, Any], override: str, fallback: str) -> str:
    """--description if given (for servers whose self-description is not a
    description, e.g. instructions addressed to the model); else
    serverInfo.description, else the first sentence of instructions when it is
    one line long; else --fallback-description."""
    if override:
        return override
    info = init.get("serverInfo") or {}
    for cand in (info.get("description"), init.get("instructions")):
        if isinstance(cand, str) and cand.strip():
            sentence = first_sentence(cand)
            if 20 <= len(sentence) <= DESCRIPTION_MAX_CHARS:
                return sentence
    if not fallback:
        raise CaptureError("server describes itself in no usable way; pass --fallback-description")
    return fallback


def capture(args: argparse.Namespace) -> int:
    env = dict(os.environ)
    for kv in args.env:
        key, sep, value = kv.partition("=")
        if not sep:
            raise SystemExit(f"--env expects KEY=VALUE, got {kv!r}")
        env[key] = value
    argv = args.command
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise SystemExit("capture: no server command given (put it after --)")

    started = time.monotonic()
    try:
        client = StdioClient(argv, env, args.cwd, args.timeout)
    except OSError as exc:
        print(f"capture {args.name}: cannot start {argv[0]}: {exc}", file=sys.stderr)
        return 1
    try:
        init = client.request("initialize", {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": CLIENT_INFO,
        })
        client.notify("notifications/initialized")
        tools: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            page = client.request("tools/list", {"cursor": cursor} if cursor else {})
            page_tools = page.get("tools")
            if not isinstance(page_tools, list):
                raise CaptureError(f"tools/list: no tools array: {json.dumps(page)[:200]}")
            tools.extend(page_tools)
            cursor = page.get("nextCursor")
            if not cursor:
                break
        else:
            raise CaptureError(f"tools/list: more than {MAX_PAGES} pages")
    except CaptureError as exc:
        print(f"capture {args.name}: {exc}", file=sys.stderr)
        return 1
    finally:
        client.close()

    try:
        description = pick_description(init, args.description, args.fallback_description)
    except CaptureError as exc:
        print(f"capture {args.name}: {exc}", file=sys.stderr)
        return 1
    record = {
        "name": args.name,
        "description": description,
        "protocolVersion": init.get("protocolVersion"),
        "serverInfo": init.get("serverInfo"),
        "instructions": init.get("instructions"),
        # Each tool exactly as the server sent it (all fields, key order kept).
        "tools": tools,
    }
    text = json.dumps(record, indent=2, ensure_ascii=False) + "\n"
    for old, new in args.redact:
        text = text.replace(json.dumps(old)[1:-1], json.dumps(new)[1:-1])
    Path(args.out).write_text(text, encoding="utf-8")
    info = init.get("serverInfo") or {}
    print(
        f"{args.name:<20} {len(tools):>3} tools  {info.get('name')} {info.get('version')}"
        f"  protocol {init.get('protocolVersion')}  ({time.monotonic() - started:.1f}s)",
        file=sys.stderr,
    )
    if client.skipped:
        print(f"  note: skipped {len(client.skipped)} non-JSON stdout line(s)", file=sys.stderr)
    return 0


def check_names(builtin: list[dict[str, Any]], servers: list[dict[str, Any]]) -> None:
    """Fail on missing/duplicate names; warn on names an Anthropic-shaped API would
    reject (canonical mcp__<server>__<tool> must match ^[a-zA-Z0-9_-]{1,64}$)."""
    seen: set[str] = set()
    canon = [(t.get("name"), t) for t in builtin]
    for s in servers:
        if not NAME_RE.fullmatch(s["name"]) or "__" in s["name"]:
            raise SystemExit(f"server name {s['name']!r} is not a valid name segment")
        for t in s["tools"]:
            if not isinstance(t.get("name"), str) or not isinstance(t.get("inputSchema"), dict):
                raise SystemExit(f"server {s['name']}: tool without a name or an object inputSchema: {t!r:.200}")
            canon.append((f"mcp__{s['name']}__{t['name']}", t))
    for name, _ in canon:
        if name in seen:
            raise SystemExit(f"duplicate tool name {name!r}")
        seen.add(name)
        if not NAME_RE.fullmatch(name or ""):
            print(f"  warning: {name!r} does not match ^[a-zA-Z0-9_-]{{1,64}}$", file=sys.stderr)


def merge(args: argparse.Namespace) -> int:
    builtin = json.loads(Path(args.builtin).read_text(encoding="utf-8"))
    if not isinstance(builtin, list):
        raise SystemExit(f"{args.builtin}: expected a JSON array of tools")
    for tool in builtin:
        missing = [k for k in ("name", "description", "input_schema") if k not in tool]
        if missing or not isinstance(tool.get("input_schema"), dict):
            raise SystemExit(f"{args.builtin}: tool {tool.get('name')!r} lacks {missing or ['an object input_schema']}")
    servers = []
    for path in args.captures:
        rec = json.loads(Path(path).read_text(encoding="utf-8"))
        servers.append({"name": rec["name"], "description": rec["description"], "tools": rec["tools"]})
    servers.sort(key=lambda s: s["name"])
    names = [s["name"] for s in servers]
    if len(set(names)) != len(names):
        raise SystemExit(f"duplicate server names: {names}")
    check_names(builtin, servers)
    catalog = {"builtin": builtin, "servers": servers}
    total = len(builtin) + sum(len(s["tools"]) for s in servers)
    if total < args.min_tools:
        raise SystemExit(f"only {total} tools in total, need at least {args.min_tools}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(catalog, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    for s in servers:
        print(f"  {s['name']:<20} {len(s['tools']):>3}", file=sys.stderr)
    mcp_total = total - len(builtin)
    print(
        f"wrote {args.out}: {len(builtin)} built-in + {mcp_total} MCP tools from "
        f"{len(servers)} servers = {total}",
        file=sys.stderr,
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)

    cap = sub.add_parser("capture", help="list one server's tools over stdio")
    cap.add_argument("--name", required=True, help="server name used in the catalog (mcp__<name>__<tool>)")
    cap.add_argument("--out", required=True, help="per-server JSON file to write")
    cap.add_argument("--description", default="", help="server description to use instead of the server's own")
    cap.add_argument("--fallback-description", default="", help="used when the server describes itself in no usable way")
    cap.add_argument("--timeout", type=float, default=60.0, help="seconds for the whole exchange")
    cap.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
    cap.add_argument("--cwd")
    cap.add_argument("--redact", nargs=2, action="append", default=[], metavar=("TEXT", "REPLACEMENT"),
                     help="replace machine-specific text (e.g. a temp dir) in the captured JSON")
    cap.add_argument("command", nargs=argparse.REMAINDER, help="-- server command and arguments")
    cap.set_defaults(func=capture)

    mer = sub.add_parser("merge", help="merge built-ins and captures into the grouped catalog")
    mer.add_argument("--builtin", required=True)
    mer.add_argument("--out", required=True)
    mer.add_argument("--min-tools", type=int, default=0)
    mer.add_argument("captures", nargs="+")
    mer.set_defaults(func=merge)

    args = parser.parse_args()
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
