#!/usr/bin/env bash
# Builds the image of deploy/compose.yaml's S3-compatible store (moto's S3 server, PyPI's
# `moto[server]`) without pulling any image: FROM scratch, with this machine's Python
# interpreter, its standard library, exactly the shared libraries they link to (`ldd`), and
# a virtual environment holding only moto[server] and its dependencies (installed with pip).
#
#   deploy/s3/build-image.sh                  # → weir-s3:latest
#   deploy/s3/build-image.sh --tag weir-s3:dev
#
# Needs python3 (3.9 or newer, with the venv module: Debian's python3-venv) and pip's
# access to PyPI, docker and ldd. About 120 MB.
set -euo pipefail
cd "$(dirname "$0")"
. ../lib.sh

tag="weir-s3:latest"
while [ $# -gt 0 ]; do
    case "$1" in
        --tag) tag="$2"; shift 2 ;;
        -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
        *) echo "deploy/s3/build-image.sh: unknown argument $1 (--tag TAG)" >&2; exit 2 ;;
    esac
done
require_tools deploy/s3/build-image.sh "" docker ldd python3

make_context
mkdir -p "$root/opt/s3"

# moto and its dependencies, alone in a virtual environment.
python3 -m venv "$context/venv" || {
    echo "deploy/s3/build-image.sh: python3 -m venv failed (Debian: apt-get install python3-venv)" >&2
    exit 1
}
# moto's S3 alone and its HTTP server (moto[server] would add every AWS service's
# dependencies, three times the size).
"$context/venv/bin/pip" install -q --disable-pip-version-check 'moto[s3]' flask flask-cors
site=$("$context/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
cp -a "$site" "$root/opt/s3/site-packages"
cp serve.py "$root/opt/s3/serve.py"

# The interpreter and its standard library, at /opt/python (PYTHONHOME below).
read -r exe stdlib version < <(python3 -c 'import os, sys, sysconfig
print(os.path.realpath(sys.executable), sysconfig.get_paths()["stdlib"], "%d.%d" % sys.version_info[:2])')
mkdir -p "$root/opt/python/bin" "$root/opt/python/lib"
cp -L "$exe" "$root/opt/python/bin/python3"
# Without what a server never imports (tests, IDLE, Tk, ensurepip) and without the
# installed packages of this machine (only the venv's go in) or byte code.
tar -C "$(dirname "$stdlib")" -cf - \
    --exclude="python$version/site-packages" --exclude="python$version/dist-packages" \
    --exclude="python$version/test" --exclude="python$version/idlelib" \
    --exclude="python$version/tkinter" --exclude="python$version/turtledemo" \
    --exclude="python$version/ensurepip" --exclude="python$version/config-*" \
    --exclude="__pycache__" "python$version" | tar -C "$root/opt/python/lib" -xf -

# Every shared library the interpreter, the standard library's and the packages' extension
# modules link to, at the path the loader looks for it.
mapfile -t objects < <(find "$root/opt" -name '*.so*' -type f)
copy_libraries "$root" "$exe" "${objects[@]}"

cat >"$context/Dockerfile" <<EOF
FROM scratch
COPY root/ /
ENV PYTHONHOME=/opt/python PYTHONPATH=/opt/s3/site-packages PYTHONDONTWRITEBYTECODE=1 PORT=5000
USER 65532:65532
EXPOSE 5000
ENTRYPOINT ["/opt/python/bin/python3", "/opt/s3/serve.py"]
EOF

mib=$(build_image "$tag" "$context")
echo "built $tag ($mib MiB): moto's S3 server"
