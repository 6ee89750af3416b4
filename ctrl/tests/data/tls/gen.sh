#!/bin/sh
# Regenerates the TLS test fixtures (run once; the outputs are committed). Needs the
# openssl CLI (3.x). Good certificates are valid for 100 years from the day they were
# made; `expired` ended in 2001, `future` starts in 2100. See README.md.
set -eu
cd "$(dirname "$0")"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
touch "$work/index.txt"
echo 1000 > "$work/serial"
cat > "$work/ca.cnf" <<CNF
[ca]
default_ca = test_ca
[test_ca]
database = $work/index.txt
serial = $work/serial
new_certs_dir = $work
default_md = sha256
policy = anything
unique_subject = no
copy_extensions = none
[anything]
commonName = supplied
[leaf]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = \$ENV::SAN
CNF
ca() { # ca NAME KEYFILE CN SAN [startdate enddate]
  openssl req -new -key "$2" -subj "/CN=$3" -out "$work/$1.csr"
  if [ $# -ge 6 ]; then dates="-startdate $5 -enddate $6"; else dates="-days 36525"; fi
  # shellcheck disable=SC2086
  SAN="$4" openssl ca -batch -config "$work/ca.cnf" -extensions leaf -cert ca.crt \
    -keyfile "$work/ca.key" -notext $dates -in "$work/$1.csr" -out "$1.crt" 2>/dev/null
}
# The CA (ECDSA P-256): tests trust ca.crt; its key is thrown away.
openssl ecparam -name prime256v1 -genkey -noout -out "$work/ca.key"
openssl req -x509 -new -key "$work/ca.key" -subj "/CN=sluice test CA" -days 36525 \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign" \
  -out ca.crt
# RSA-2048: PKCS#1 (BEGIN RSA PRIVATE KEY) and PKCS#8 (BEGIN PRIVATE KEY).
openssl genrsa -traditional -out rsa-pkcs1.key 2048
openssl pkcs8 -topk8 -nocrypt -in rsa-pkcs1.key -out rsa-pkcs8.key
ca rsa rsa-pkcs1.key rsa.example.com "DNS:rsa.example.com"
# ECDSA P-256: SEC1 (BEGIN EC PRIVATE KEY) and PKCS#8.
openssl ecparam -name prime256v1 -genkey -noout -out ec-sec1.key
openssl pkcs8 -topk8 -nocrypt -in ec-sec1.key -out ec-pkcs8.key
ca ec ec-sec1.key ec.example.com "DNS:ec.example.com,DNS:Ec2.Example.Com"
# A wildcard certificate (ECDSA, PKCS#8 key).
openssl ecparam -name prime256v1 -genkey -noout | openssl pkcs8 -topk8 -nocrypt -out wildcard.key
ca wildcard wildcard.key "*.example.com" "DNS:*.example.com"
# Expired (2000-2001) and not yet valid (2100-2200), each with its own key.
openssl ecparam -name prime256v1 -genkey -noout | openssl pkcs8 -topk8 -nocrypt -out expired.key
ca expired expired.key expired.example.com "DNS:expired.example.com" 20000101000000Z 20010101000000Z
openssl ecparam -name prime256v1 -genkey -noout | openssl pkcs8 -topk8 -nocrypt -out future.key
ca future future.key future.example.com "DNS:future.example.com" 21000101000000Z 22000101000000Z
# A mismatched pair: mismatch.crt is ec.crt's twin for another key; mismatch.key is
# the RSA key.
cp ec.crt mismatch.crt
cp rsa-pkcs8.key mismatch.key
