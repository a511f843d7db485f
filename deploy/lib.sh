# Shell functions the image builds share (sourced by deploy/build-image.sh and
# deploy/s3/build-image.sh), written once so that both images are assembled alike.

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
