#!/usr/bin/env bash
# Builds the container image of the `weir` binary without pulling any image: the image
# starts FROM scratch (empty) and holds only the binary (its debug info stripped), exactly
# the shared libraries it links to (as `ldd` lists them: libc, libm, libgcc_s, the loader),
# the CA certificates (for S3 over HTTPS) and an empty /tmp and /data. The same binary runs
# as coordinator (`weir run … --workers N`) and as worker (`weir worker`).
#
#   deploy/build-image.sh                      # target/release/weir → weir:latest
#   deploy/build-image.sh --binary PATH --tag weir:dev
#
# Build the binary first: `cargo build --release -p weir-cli` (the script says so when it
# is missing). Needs docker, ldd and strip (binutils).
set -euo pipefail
cd "$(dirname "$0")/.."
. deploy/lib.sh

target="${CARGO_TARGET_DIR:-target}"
binary="$target/release/weir"
tag="weir:latest"
while [ $# -gt 0 ]; do
    case "$1" in
        --binary) binary="$2"; shift 2 ;;
        --tag) tag="$2"; shift 2 ;;
        -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
        *) echo "deploy/build-image.sh: unknown argument $1 (--binary PATH, --tag TAG)" >&2; exit 2 ;;
    esac
done
if [ ! -x "$binary" ]; then
    echo "deploy/build-image.sh: no weir binary at $binary: build it with" \
        "\`cargo build --release -p weir-cli\`, or name one with --binary PATH" >&2
    exit 1
fi
require_tools deploy/build-image.sh \
    " (docker: Docker Engine; ldd: libc-bin; strip: binutils)" docker ldd strip

make_context
mkdir -p "$root/usr/local/bin" "$context/data"
# Debug info is for the build machine, not the image (it is most of a debug build).
strip --strip-debug -o "$root/usr/local/bin/weir" "$binary"

# Every library the binary needs, at the path the loader looks for it.
copy_libraries "$root" "$binary"
if ldd "$binary" 2>&1 | grep -q "not found"; then
    echo "deploy/build-image.sh: $binary needs a library this machine lacks:" >&2
    ldd "$binary" | grep "not found" >&2
    exit 1
fi
# CA certificates, for S3 endpoints over HTTPS.
for ca in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt; do
    if [ -f "$ca" ]; then
        mkdir -p "$root/etc/ssl/certs"
        cp -L "$ca" "$root/etc/ssl/certs/ca-certificates.crt"
        break
    fi
done
# Who the process runs as (no shell, no login: the names are for `ps` and error messages).
mkdir -p "$root/etc"
printf 'root:x:0:0:root:/:/sbin/nologin\nweir:x:65532:65532:weir:/data:/sbin/nologin\n' >"$root/etc/passwd"
printf 'root:x:0:\nweir:x:65532:\n' >"$root/etc/group"

cat >"$context/Dockerfile" <<'EOF'
FROM scratch
COPY root/ /
# /data: the working folder (outputs, local checkpoints); the weir user owns it, so a named
# volume mounted there starts writable.
COPY --chown=65532:65532 data/ /data/
USER 65532:65532
WORKDIR /data
ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
# 6123: the coordinator's --cluster-listen; 6124: a worker's exchange (--listen);
# 8081: the coordinator's control endpoint (--control), dashboard and /metrics.
EXPOSE 6123 6124 8081
ENTRYPOINT ["/usr/local/bin/weir"]
CMD ["--help"]
EOF

mib=$(build_image "$tag" "$context")
echo "built $tag ($mib MiB) from $binary"
