# SPDX-License-Identifier: MIT
# tests/lib/tls_certs.sh: make_tls_certs DIR: a test PKI made with the openssl CLI, for the
# TLS tests (tests/agent/tls.sh, tests/store/test_tls.c). In DIR:
#   ca.pem                  the CA every good certificate is signed by
#   server.pem server.key   CN=crun-store, names localhost and 127.0.0.1 (serverAuth+clientAuth)
#   client.pem client.key   CN=crun-client, signed by ca.pem
#   other-ca.pem other.pem other.key   a second CA and a client certificate it signed
#   expired.pem expired.key a server certificate (localhost, 127.0.0.1) that expired in 2001
# Keys are mode 0600. Needs openssl; faketime for expired.pem (then missing when absent).

make_tls_certs() {
	local d=$1 ext
	mkdir -p "$d" || return 1
	ext="$d/ext.cnf"
	cat >"$ext" <<'CNF'
[srv]
basicConstraints = CA:FALSE
keyUsage = digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = DNS:localhost, IP:127.0.0.1
[cli]
basicConstraints = CA:FALSE
keyUsage = digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
CNF
	(
		set -e
		cd "$d"
		umask 077
		for ca in ca other-ca; do
			openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
				-keyout "$ca.key" -out "$ca.pem" -days 2 -subj "/CN=crun test $ca" \
				2>/dev/null
		done
		sign() { # NAME CN CA SECTION [faketime...]
			local name=$1 cn=$2 ca=$3 sec=$4
			shift 4
			openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
				-keyout "$name.key" -out "$name.csr" -subj "/CN=$cn" 2>/dev/null
			"$@" openssl x509 -req -in "$name.csr" -CA "$ca.pem" -CAkey "$ca.key" \
				-CAcreateserial -days 2 -extfile ext.cnf -extensions "$sec" \
				-out "$name.pem" 2>/dev/null
			rm -f "$name.csr"
		}
		sign server crun-store ca srv
		sign client crun-client ca cli
		sign other crun-other other-ca cli
		if command -v faketime >/dev/null; then
			# The CA is made now, so the certificate alone is out of date.
			sign expired crun-expired ca srv faketime '2001-01-01 00:00:00'
		fi
		chmod 600 ./*.key
		chmod 644 ./*.pem
	)
}
