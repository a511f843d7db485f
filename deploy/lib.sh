# Shell functions the image builds share (sourced by deploy/build-image.sh and
# deploy/s3/build-image.sh), written once so that both images are assembled alike.

# require_tools SCRIPT HINT TOOL…: fails, naming SCRIPT and the first TOOL not on the PATH
# (then HINT, which says where to get them), unless every TOOL is there.
require_tools() {
    local script="$1" hint="$2" tool
    shift 2
    for tool in "$@"; do
        command -v "$tool" >/dev/null 2>&1 || {
            echo "$script: needs $tool$hint" >&2
            return 1
        }
    done
}

# make_context: a fresh build context, removed when the script exits: sets `context` (the
# folder docker builds) and `root` (its root/, the image's tree, with a world-writable
# /tmp).
make_context() {
    context=$(mktemp -d)
    trap 'rm -rf "$context"' EXIT
    root="$context/root"
    mkdir -p "$root/tmp"
    chmod 1777 "$root/tmp"
}

# copy_libraries ROOT OBJECT…: copies every shared library the OBJECTs (executables or
# shared objects) link to, as `ldd` lists them, into the image tree ROOT at the path the
# loader looks for it, each once. The loader itself is named by its absolute path
# (`/lib64/ld-linux-x86-64.so.2 (0x…)`); linux-vdso.so.1 has none (it is in the kernel).
# An object ldd cannot read (a static binary, a data file named *.so) adds nothing.
copy_libraries() {
    local root="$1"
    shift
    local object
    for object in "$@"; do
        ldd "$object" 2>/dev/null || true
    done | while read -r first second third _; do
        case "$second" in
            "=>") path="$third" ;;
            *) path="$first" ;;
        esac
        case "$path" in
            /*) ;;
            *) continue ;;
        esac
        [ -e "$root$path" ] && continue
        mkdir -p "$root$(dirname "$path")"
        cp -L "$path" "$root$path"
    done
}

# build_image TAG CONTEXT: builds the image of CONTEXT (its Dockerfile and what it copies)
# as TAG and prints the image's size in MiB. The classic builder needs nothing but the
# daemon (BuildKit may not be installed); its deprecation notice is shown only with a
# failure, when the build's whole output goes to stderr and the function fails.
build_image() {
    local tag="$1" context="$2" out size
    if ! out=$(DOCKER_BUILDKIT=0 docker build --quiet --tag "$tag" "$context" 2>&1); then
        echo "$out" >&2
        return 1
    fi
    size=$(docker image inspect --format '{{.Size}}' "$tag")
    echo "$((size / 1024 / 1024))"
}
