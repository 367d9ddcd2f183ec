#!/usr/bin/env python3
"""Test servers for remote storage, all on 127.0.0.1 (ephemeral ports), in one process.

  s3         an S3-protocol server (moto's server mode, in process; or, with --s3s-fs,
             the s3s-fs binary from crates.io, a Rust server, for the benchmark)
  http       a static HTTP server with Range requests over --serve-dir (read only)
  slow       a TCP proxy to s3 that holds every request --latency-ms before forwarding it
  flaky      a TCP proxy to s3 that drops every --drop-every-th request (closes the
             connection without an answer)
  blackhole  accepts connections and never answers
  deny       answers every request as S3 does for unknown credentials (403
             InvalidAccessKeyId): moto itself accepts any credentials
  dying      (with --stop-after N) a TCP proxy to s3 that forwards N requests, then stops
             at the start of the next one: closes every connection and its listening
             socket (later connections are refused), as a server that goes away mid-write

When every server listens, one JSON line goes to stdout: {"s3": "http://127.0.0.1:P", ...}.
The process runs until its standard input closes (the test that started it exits or drops
the pipe) or it gets SIGTERM/SIGINT, so no server outlives the tests.

Used by the Rust tests (tests/remote_*.rs start it), by scripts/test-remote.sh and the
benchmark (benches/remote.sh). Needs: moto[server] (PyPI; installed by scripts/setup.sh).
"""

import argparse
import asyncio
import json
import os
import re
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer

HOST = "127.0.0.1"
REQUEST_START = re.compile(rb"^(GET|PUT|POST|HEAD|DELETE|PATCH|OPTIONS) ")


class RangeHandler(SimpleHTTPRequestHandler):
    """Static files with single byte ranges (bytes=a-b, a-, -n), HEAD, 404 and 416."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet
        pass

    def send_head(self):
        path = self.translate_path(self.path)
        if os.path.isdir(path) or not os.path.isfile(path):
            self.send_error(404, "not found")
            return None
        f = open(path, "rb")
        size = os.fstat(f.fileno()).st_size
        start, end = 0, size - 1
        rng = self.headers.get("Range")
        status = 200
        if rng:
            m = re.fullmatch(r"bytes=(\d*)-(\d*)", rng.strip())
            if not m or (m.group(1) == "" and m.group(2) == ""):
                f.close()
                self.send_error(400, "bad range")
                return None
            if m.group(1) == "":
                start, end = max(0, size - int(m.group(2))), size - 1
            else:
                start = int(m.group(1))
                end = min(int(m.group(2)), size - 1) if m.group(2) else size - 1
            if start >= size or start > end:
                f.close()
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return None
            status = 206
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(end - start + 1))
        self.send_header("Last-Modified", self.date_time_string(int(os.path.getmtime(path))))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.end_headers()
        f.seek(start)
        self._remaining = end - start + 1
        return f

    def copyfile(self, source, outputfile):
        left = self._remaining
        while left > 0:
            chunk = source.read(min(left, 1 << 20))
            if not chunk:
                break
            outputfile.write(chunk)
            left -= len(chunk)


def start_http(directory):
    handler = lambda *a, **k: RangeHandler(*a, directory=directory, **k)  # noqa: E731
    server = ThreadingHTTPServer((HOST, 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server.server_address[1]


class DenyHandler(BaseHTTPRequestHandler):
    """403 InvalidAccessKeyId for everything, with S3's XML error body."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        body = (
            b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>InvalidAccessKeyId</Code>'
            b"<Message>The AWS Access Key Id you provided does not exist in our records."
            b"</Message></Error>"
        )
        self.send_response(403)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", "0" if self.command == "HEAD" else str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = answer


def start_deny():
    server = ThreadingHTTPServer((HOST, 0), DenyHandler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server.server_address[1]


def start_moto():
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)

    server = ThreadedMotoServer(ip_address=HOST, port=0, verbose=False)
    server.start()
    return server.get_host_and_port()[1]


async def pump(reader, writer, latency_s=0.0, drop=None):
    try:
        while True:
            chunk = await reader.read(1 << 16)
            if not chunk:
                break
            if REQUEST_START.match(chunk):
                if drop is not None and drop():
                    return "drop"
                if latency_s:
                    await asyncio.sleep(latency_s)
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            writer.close()
        except Exception:
            pass
    return "done"


async def proxy(target_port, latency_ms=0, drop_every=0, stop_after=0):
    count = [0]
    state = {"server": None, "stopped": False, "writers": []}

    def stop():
        state["stopped"] = True
        state["server"].close()
        for w in state["writers"]:
            try:
                w.transport.abort()
            except Exception:
                pass

    def drop():
        count[0] += 1
        if stop_after > 0 and count[0] > stop_after:
            if not state["stopped"]:
                stop()
            return True
        return drop_every > 0 and count[0] % drop_every == 0

    async def handle(client_r, client_w):
        if state["stopped"]:
            client_w.transport.abort()
            return
        try:
            server_r, server_w = await asyncio.open_connection(HOST, target_port)
        except OSError:
            client_w.close()
            return
        state["writers"].extend([client_w, server_w])
        up = asyncio.ensure_future(pump(client_r, server_w, latency_ms / 1000.0, drop))
        down = asyncio.ensure_future(pump(server_r, client_w))
        done, _ = await asyncio.wait([up, down], return_when=asyncio.FIRST_COMPLETED)
        for t in (up, down):
            if t not in done:
                t.cancel()
        for w in (client_w, server_w):
            try:
                w.transport.abort()
            except Exception:
                pass

    server = await asyncio.start_server(handle, HOST, 0)
    state["server"] = server
    return server, server.sockets[0].getsockname()[1]


async def blackhole():
    held = []

    async def handle(reader, writer):
        held.append(writer)  # never answered, never closed by us
        try:
            while await reader.read(1 << 16):
                pass
        except (ConnectionError, OSError):
            pass

    server = await asyncio.start_server(handle, HOST, 0)
    return server, server.sockets[0].getsockname()[1]


def start_s3s_fs(binary, data_dir, buckets, key, secret):
    """s3s-fs (crates.io: `cargo install --locked s3s-fs --features binary`), a Rust S3
    server over a directory, on a free port; buckets are directories of `data_dir`."""
    import socket
    import subprocess
    import time

    for bucket in buckets:
        os.makedirs(os.path.join(data_dir, bucket), exist_ok=True)
    with socket.socket() as s:
        s.bind((HOST, 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [binary, "--host", HOST, "--port", str(port), "--access-key", key,
         "--secret-key", secret, data_dir],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{binary} exited with status {proc.returncode}")
        try:
            socket.create_connection((HOST, port), timeout=1).close()
            return proc, port
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"{binary} did not listen on port {port} within 30 s")


async def main_async(args):
    loop = asyncio.get_running_loop()
    s3s = None
    if args.s3s_fs:
        s3s, s3_port = start_s3s_fs(args.s3s_fs, args.s3s_fs_dir, args.bucket,
                                    args.s3s_fs_key, args.s3s_fs_secret)
    else:
        s3_port = start_moto()
    for bucket in [] if s3s else args.bucket:
        import urllib.request

        req = urllib.request.Request(f"http://{HOST}:{s3_port}/{bucket}", method="PUT")
        urllib.request.urlopen(req, timeout=30).read()
    ports = {"s3": s3_port, "deny": start_deny()}
    if args.serve_dir:
        ports["http"] = start_http(args.serve_dir)
    keep = []
    server, ports["slow"] = await proxy(s3_port, latency_ms=args.latency_ms)
    keep.append(server)
    server, ports["flaky"] = await proxy(s3_port, drop_every=args.drop_every)
    keep.append(server)
    server, ports["blackhole"] = await blackhole()
    keep.append(server)
    if args.stop_after > 0:
        server, ports["dying"] = await proxy(s3_port, stop_after=args.stop_after)
        keep.append(server)
    print(json.dumps({k: f"http://{HOST}:{p}" for k, p in ports.items()}), flush=True)

    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    def watch_stdin():
        try:
            while sys.stdin.buffer.read(1 << 12):
                pass
        except Exception:
            pass
        loop.call_soon_threadsafe(stop.set)

    threading.Thread(target=watch_stdin, daemon=True).start()
    await stop.wait()
    if s3s is not None:
        s3s.kill()
        s3s.wait()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--serve-dir", help="directory served by the Range HTTP server")
    p.add_argument("--bucket", action="append", default=[], help="create this S3 bucket")
    p.add_argument("--latency-ms", type=float, default=20.0, help="latency of the slow proxy")
    p.add_argument("--drop-every", type=int, default=3, help="the flaky proxy drops every N-th request")
    p.add_argument("--stop-after", type=int, default=0,
                   help="start the dying proxy, which stops after forwarding N requests")
    p.add_argument("--s3s-fs", metavar="BINARY",
                   help="serve S3 with this s3s-fs binary instead of moto (faster; benchmark)")
    p.add_argument("--s3s-fs-dir", help="s3s-fs's data directory (required with --s3s-fs)")
    p.add_argument("--s3s-fs-key", default="bench-key-id", help="s3s-fs's access key")
    p.add_argument("--s3s-fs-secret", default="bench-secret", help="s3s-fs's secret key")
    args = p.parse_args()
    if args.s3s_fs and not args.s3s_fs_dir:
        p.error("--s3s-fs needs --s3s-fs-dir")
    asyncio.run(main_async(args))
    os._exit(0)  # moto's and the HTTP server's threads are daemons; leave at once


if __name__ == "__main__":
    main()
