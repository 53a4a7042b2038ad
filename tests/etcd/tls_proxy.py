#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# tests/etcd/tls_proxy.py: a TLS proxy in front of an https etcd member that tells which calls
# crun sends over gRPC and which through the JSON gateway (stdlib only).
#   tls_proxy.py LISTEN_HOST PORT_FILE UPSTREAM_HOST:PORT CERT KEY CACERT CLIENT_CERT CLIENT_KEY LOG
#                [--http1-only]
# It listens on LISTEN_HOST (a free port, written to PORT_FILE), ends the client's TLS with
# CERT/KEY offering ALPN "h2" and "http/1.1", and relays each connection to the member over a
# TLS connection of its own (CACERT, the client pair), agreeing the same protocol there. It
# appends one line per connection to LOG: "h2" for an HTTP/2 connection (gRPC), and for an
# HTTP/1.1 one "http/1.1" followed by the path of every request on it (the gateway).
# --http1-only offers only "http/1.1" (a proxy on the way that cannot relay HTTP/2). Runs
# until killed.
import os
import socket
import ssl
import sys
import threading

listen_host, port_file, upstream, cert, key, cacert, ccert, ckey, log_path = sys.argv[1:10]
up_host, up_port = upstream.rsplit(":", 1)
log_lock = threading.Lock()

server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
server_ctx.load_cert_chain(cert, key)
server_ctx.set_alpn_protocols(
    ["http/1.1"] if sys.argv[10:11] == ["--http1-only"] else ["h2", "http/1.1"])


def client_ctx(proto):
    ctx = ssl.create_default_context(cafile=cacert)
    ctx.load_cert_chain(ccert, ckey)
    ctx.set_alpn_protocols([proto])
    return ctx


def pump(src, dst, paths):
    """Copy src to dst until either side closes; with paths, note HTTP/1.1 request lines."""
    pending = b""
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            if paths is not None:
                pending += data
                while b"\r\n" in pending:
                    line, pending = pending.split(b"\r\n", 1)
                    parts = line.split(b" ")
                    if len(parts) == 3 and parts[2].startswith(b"HTTP/1."):
                        paths.append(parts[1].decode("ascii", "replace"))
                pending = pending[-4096:]
            dst.sendall(data)
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def serve(raw):
    try:
        conn = server_ctx.wrap_socket(raw, server_side=True)
    except (OSError, ssl.SSLError):
        raw.close()
        return
    proto = conn.selected_alpn_protocol() or "http/1.1"
    try:
        up = client_ctx(proto).wrap_socket(
            socket.create_connection((up_host, int(up_port)), timeout=10),
            server_hostname=up_host)
        up.settimeout(None)
    except (OSError, ssl.SSLError) as e:
        print(f"tls_proxy: upstream: {e}", file=sys.stderr)
        conn.close()
        return
    paths = [] if proto != "h2" else None
    back = threading.Thread(target=pump, args=(up, conn, None), daemon=True)
    back.start()
    pump(conn, up, paths)
    back.join(timeout=5)
    with log_lock, open(log_path, "a") as f:
        f.write(proto + ("" if paths is None else " " + " ".join(paths)) + "\n")
    conn.close()
    up.close()


def main():
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((listen_host, 0))
    ls.listen(64)
    tmp = port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"{ls.getsockname()[1]}\n")
    os.rename(tmp, port_file)
    while True:
        raw, _ = ls.accept()
        threading.Thread(target=serve, args=(raw,), daemon=True).start()


if __name__ == "__main__":
    main()
