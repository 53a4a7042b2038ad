#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# tests/etcd/etcd_probe.py: look at a test's etcd through its JSON gateway (stdlib only), so the
# tests check etcd's own view rather than crun's: health, key and lease counts, the leader,
# compaction, users and roles.
#   etcd_probe.py URL health                 exit 0 when the member answers {"health":"true"}
#   etcd_probe.py URL keys [PREFIX]          number of keys (under PREFIX; default: all)
#   etcd_probe.py URL dump [PREFIX]          every key under PREFIX, one a line
#   etcd_probe.py URL leases                 number of leases granted and not yet expired
#   etcd_probe.py URL leader                 exit 0 when this member is the leader
#   etcd_probe.py URL compact                compact to the current revision and defragment
#   etcd_probe.py URL auth ROLE_PREFIX USER PASSWORD   users root and USER (role "job" on
#                                            ROLE_PREFIX), then enable authentication
# URL is http://HOST:PORT. Every request has a 5 s timeout; errors exit 1 with a message.
# Once authentication is on, the probe signs in as root (its password is set by "auth").
# An https URL is reached with the TLS files in PROBE_CACERT, PROBE_CERT and PROBE_KEY.
import base64
import json
import os
import ssl
import sys
import urllib.error
import urllib.request


def b64(s):
    return base64.b64encode(s.encode()).decode()


def prefix_end(p):
    # etcd's range_end for "every key starting with p": p with its last byte plus one.
    b = bytearray(p.encode())
    while b and b[-1] == 0xFF:
        b.pop()
    if not b:
        return "AA=="  # "\0": to the end of the key space
    b[-1] += 1
    return base64.b64encode(bytes(b)).decode()


TOKEN = None
ROOT_PASSWORD = "rootpw"
TLS = None


def tls():
    global TLS
    if TLS is None:
        TLS = ssl.create_default_context(cafile=os.environ.get("PROBE_CACERT"))
        if os.environ.get("PROBE_CERT"):
            TLS.load_cert_chain(os.environ["PROBE_CERT"], os.environ.get("PROBE_KEY"))
    return TLS


def urlopen(req):
    url = req if isinstance(req, str) else req.full_url
    return urllib.request.urlopen(req, timeout=5,
                                  context=tls() if url.startswith("https:") else None)


def post(url, path, body, retry=True):
    global TOKEN
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST")
    req.add_header("Content-Type", "application/json")
    if TOKEN:
        req.add_header("Authorization", TOKEN)
    try:
        with urlopen(req) as r:
            return json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        text = e.read().decode(errors="replace")
        if retry and TOKEN is None and "user name is empty" in text:
            TOKEN = post(url, "/v3/auth/authenticate",
                         {"name": "root", "password": ROOT_PASSWORD}, False)["token"]
            return post(url, path, body, False)
        raise OSError("%s: HTTP %d: %s" % (path, e.code, text.strip()))


def key_range(url, prefix, count_only):
    body = {"key": b64(prefix) if prefix else "AA==",
            "range_end": prefix_end(prefix) if prefix else "AA=="}
    if count_only:
        body["count_only"] = True
    return post(url, "/v3/kv/range", body)


def main(argv):
    if len(argv) < 3:
        sys.stderr.write(__doc__ if __doc__ else "usage: etcd_probe.py URL COMMAND ...\n")
        return 2
    url, cmd, args = argv[1].rstrip("/"), argv[2], argv[3:]
    if cmd == "health":
        with urlopen(url + "/health") as r:
            return 0 if json.loads(r.read()).get("health") == "true" else 1
    if cmd == "keys":
        print(int(key_range(url, args[0] if args else "", True).get("count", 0)))
        return 0
    if cmd == "dump":
        for kv in key_range(url, args[0] if args else "", False).get("kvs", []):
            print(base64.b64decode(kv["key"]).decode(errors="replace"))
        return 0
    if cmd == "leases":
        print(len(post(url, "/v3/lease/leases", {}).get("leases", [])))
        return 0
    if cmd == "leader":
        st = post(url, "/v3/maintenance/status", {})
        return 0 if st.get("leader") == st["header"]["member_id"] else 1
    if cmd == "compact":
        rev = int(post(url, "/v3/kv/range", {"key": "AA==", "count_only": True})
                  ["header"]["revision"])
        post(url, "/v3/kv/compaction", {"revision": rev, "physical": True})
        post(url, "/v3/maintenance/defragment", {})
        return 0
    if cmd == "auth" and len(args) == 3:
        role_prefix, user, password = args
        post(url, "/v3/auth/user/add", {"name": "root", "password": ROOT_PASSWORD})
        post(url, "/v3/auth/user/grant", {"user": "root", "role": "root"})
        post(url, "/v3/auth/role/add", {"name": "job"})
        post(url, "/v3/auth/role/grant", {"name": "job", "perm": {
            "permType": "READWRITE", "key": b64(role_prefix),
            "range_end": prefix_end(role_prefix)}})
        post(url, "/v3/auth/user/add", {"name": user, "password": password})
        post(url, "/v3/auth/user/grant", {"user": user, "role": "job"})
        post(url, "/v3/auth/enable", {})
        return 0
    sys.stderr.write("etcd_probe.py: unknown command %s\n" % cmd)
    return 2


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except (urllib.error.URLError, OSError, ValueError, KeyError) as e:
        sys.stderr.write("etcd_probe.py %s: %s\n" % (" ".join(sys.argv[1:3]), e))
        sys.exit(1)
