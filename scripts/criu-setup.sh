#!/bin/bash
# Makes a working CRIU >= 4 the `criu` on PATH (Debian 12 or 13, as root), for
# runc checkpoint/restore. Idempotent and quiet when there is nothing to do.
#
#   Debian 13: Debian's own package `criu` (4.1.1).
#   Debian 12: its criu 3.17 fails on kernels >= 6.13 ([vvar_vclock] mapping), and
#     trixie's package needs glibc 2.38, so it cannot be installed either. Instead,
#     trixie's `criu` and the libraries it needs (glibc included) are downloaded with
#     a private apt configuration and state (the system's apt state is untouched;
#     the mirror is the one of the machine's own bookworm entry), unpacked into
#     $PREFIX and run through trixie's own dynamic loader by the wrapper $WRAPPER
#     (/usr/local/sbin precedes /usr/sbin on root's PATH). Should that fail, CRIU is
#     built from Debian's orig tarball instead (checked against a pinned sha256).
#
# Usage: scripts/criu-setup.sh
# Env:   PYSCRUN_CRIU_ROUTE=deb|build  Debian 12 only: (re)install by this route
#        even when a working criu exists (default: deb, then build if deb fails).
# Log:   /tmp/pyscrun-criu-setup.log
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

need_root

PREFIX=/usr/local/lib/pyscrun-criu
WRAPPER=/usr/local/sbin/criu
WRAPPER_MARK='# pyscrun-criu wrapper'
SUITE=trixie
BUILD_VERSION=4.1.1
BUILD_SHA256=f80a66cb3726bb2116266d4759ce3bcbfab7abdb6b6d430bf20dd41911717afe
BUILD_DEPS=(
    build-essential pkg-config libprotobuf-dev libprotobuf-c-dev protobuf-c-compiler
    protobuf-compiler python3-protobuf libnl-3-dev libnet1-dev libcap-dev libbsd-dev
    libgnutls28-dev libnftables-dev uuid-dev xz-utils
)
LOG=/tmp/pyscrun-criu-setup.log
TMP=""
STAGE=""

cleanup() {
    [[ -n $TMP ]] && rm -rf "$TMP"
    [[ -n $STAGE ]] && rm -rf "$STAGE"
    return 0
}
trap cleanup EXIT

# criu_version BIN: "4.1.1" (empty when BIN does not run).
criu_version() {
    "$1" --version 2>/dev/null | sed -n 's/^Version: *//p' | head -n 1
}

# criu_ok BIN: BIN reports version >= 4 and `criu check` says "Looks good".
# (criu also logs a harmless "Can't setup RLIMIT_NOFILE" without CAP_SYS_RESOURCE.)
criu_ok() {
    local bin=$1 v
    [[ -x $bin ]] || return 1
    v="$(criu_version "$bin")"
    [[ -n $v ]] && dpkg --compare-versions "$v" ge 4 || return 1
    v="$("$bin" check 2>&1 || true)"
    grep -q '^Looks good' <<<"$v"
}

ours() { [[ -f $WRAPPER ]] && grep -qxF "$WRAPPER_MARK" "$WRAPPER"; }

remove_ours() {
    if ours; then
        say "removing $WRAPPER and $PREFIX (superseded by the criu package)"
        rm -f "$WRAPPER"
        rm -rf "$PREFIX"
    fi
}

run_logged() {
    "$@" >>"$LOG" 2>&1 && return 0
    local rc=$?
    tail -n 20 "$LOG" >&2
    say "failed (exit $rc): $1 ... ${*: -1}; full log: $LOG"
    return "$rc"
}

apt_system() {
    DEBIAN_FRONTEND=noninteractive run_logged apt-get "$@"
}

# ---- Debian 13 and later: the distribution's package ------------------------

install_package() {
    local v
    v="$(dpkg-query -W -f='${db:Status-Status} ${Version}' criu 2>/dev/null || true)"
    if [[ $v != installed\ * ]] || ! dpkg --compare-versions "${v#installed }" ge 4; then
        say "installing Debian's criu package"
        apt_system update -qq || die "apt-get update failed"
        apt_system install -y -qq criu || die "apt-get install criu failed"
    fi
    remove_ours
    criu_ok /usr/sbin/criu || die "/usr/sbin/criu is not usable: $(/usr/sbin/criu check 2>&1 | tail -n 3)"
}

# ---- Debian 12 -----------------------------------------------------------------

new_stage() {
    STAGE="$(mktemp -d "$PREFIX.new.XXXXXX")"
    chmod 0755 "$STAGE"
}

# install_stage LOADER_REL LIBPATH_REL: move $STAGE to $PREFIX and write $WRAPPER.
# With LOADER_REL empty, the wrapper runs $PREFIX/usr/sbin/criu directly.
install_stage() {
    local loader=$1 libpath=$2 old=""
    if [[ -e $PREFIX ]]; then
        old="$PREFIX.old.$$"
        mv "$PREFIX" "$old" || return 1
    fi
    mv "$STAGE" "$PREFIX" || return 1
    STAGE=""
    [[ -n $old ]] && rm -rf "$old"

    local exec_line
    if [[ -n $loader ]]; then
        exec_line="exec \"\$p/$loader\" --library-path \"$libpath\" \"\$p/usr/sbin/criu\" \"\$@\""
    else
        # shellcheck disable=SC2016 # expanded by the wrapper
        exec_line='exec "$p/usr/sbin/criu" "$@"'
    fi
    mkdir -p "$(dirname "$WRAPPER")"
    write_if_changed "$WRAPPER" 0755 <<EOF || true
#!/bin/sh
$WRAPPER_MARK
# CRIU for Debian 12, installed by scripts/criu-setup.sh (see $PREFIX/SOURCE).
p=$PREFIX
$exec_line
EOF
}

# Route 2: trixie's binary package and its libraries, run through trixie's loader.
route_deb() {
    local uri arch keyring opts=()
    uri="$(mirror_uri bookworm)" || {
        say "no bookworm entry (component main) in the apt sources"
        return 1
    }
    arch="$(dpkg --print-architecture)"
    keyring=""
    [[ -r /usr/share/keyrings/debian-archive-keyring.gpg ]] &&
        keyring=" signed-by=/usr/share/keyrings/debian-archive-keyring.gpg"

    say "fetching criu from $SUITE ($uri) into $PREFIX"
    local a=$TMP/apt
    mkdir -p "$a/sources.list.d" "$a/preferences.d" "$a/state/lists" "$a/cache/archives"
    : >"$a/status"
    printf 'deb [arch=%s%s] %s %s main\n' "$arch" "$keyring" "$uri" "$SUITE" >"$a/sources.list"
    opts=(
        -o "Dir::Etc::SourceList=$a/sources.list" -o "Dir::Etc::SourceParts=$a/sources.list.d"
        -o "Dir::Etc::Preferences=$a/preferences" -o "Dir::Etc::PreferencesParts=$a/preferences.d"
        -o "Dir::State=$a/state" -o "Dir::State::status=$a/status" -o "Dir::Cache=$a/cache"
        -o "APT::Architecture=$arch" -o "APT::Architectures::=$arch" -o "Acquire::Languages=none"
    )
    # An empty status file: apt fetches criu's whole dependency closure from trixie.
    run_logged apt-get "${opts[@]}" -q update || return 1
    run_logged apt-get "${opts[@]}" -q -y --no-install-recommends --download-only install criu || return 1

    new_stage
    local deb
    for deb in "$a"/cache/archives/*.deb; do
        dpkg-deb -x "$deb" "$STAGE" || return 1
        # shellcheck disable=SC2016 # dpkg's ${Field} placeholders
        dpkg-deb --show --showformat='${Package} ${Version}\n' "$deb" >>"$STAGE/PACKAGES"
    done
    [[ -x $STAGE/usr/sbin/criu ]] || {
        say "no usr/sbin/criu in $SUITE's criu package"
        return 1
    }

    # The loader and the multiarch library directory it lives in.
    local ld libdir loader libpath
    ld="$(find "$STAGE/usr/lib" -mindepth 2 -maxdepth 2 -name 'ld-linux*.so.*' -type f | head -n 1)"
    [[ -n $ld ]] || {
        say "no dynamic loader in $SUITE's libc6"
        return 1
    }
    libdir="$(dirname "$ld")"
    loader="${ld#"$STAGE"/}"
    libpath="\$p/${libdir#"$STAGE"/}"
    [[ -d $STAGE/lib/$(basename "$libdir") ]] && libpath="$libpath:\$p/lib/$(basename "$libdir")"

    # Keep the binary, the libraries and the copyright files; drop the rest.
    find "$STAGE/usr/share" -mindepth 1 -maxdepth 1 ! -name doc -exec rm -rf {} +
    find "$STAGE/usr/share/doc" -type f ! -name copyright -delete 2>/dev/null || true
    find "$STAGE/usr/share/doc" -depth -type d -empty -delete 2>/dev/null || true
    find "$STAGE/usr/sbin" -mindepth 1 ! -name criu -delete
    rm -rf "${STAGE:?}/etc" "${STAGE:?}/usr/bin" "${STAGE:?}/usr/lib/$(basename "$libdir")/gconv"
    find "$STAGE/usr/libexec" -mindepth 1 -maxdepth 1 ! -name criu -exec rm -rf {} + 2>/dev/null || true

    # Every library must come from the stage, none from the system.
    local list stage_libpath=${libpath//\$p/$STAGE}
    list="$("$ld" --list --library-path "$stage_libpath" "$STAGE/usr/sbin/criu" 2>&1)" || {
        printf '%s\n' "$list" >>"$LOG"
        say "$SUITE's loader cannot run criu (see $LOG)"
        return 1
    }
    if awk -v s="$STAGE/" '$2 == "=>" && index($3, s) != 1 { bad = 1 } END { exit !bad }' <<<"$list"; then
        printf '%s\n' "$list" >>"$LOG"
        say "criu would use libraries from outside $STAGE (see $LOG)"
        return 1
    fi

    {
        echo "route: $SUITE binary package, run through its own loader"
        echo "mirror: $uri"
        echo "loader: $loader"
        echo "library-path: $libpath"
        echo "packages:"
        sed 's/^/  /' "$STAGE/PACKAGES"
    } >"$STAGE/SOURCE"
    rm -f "$STAGE/PACKAGES"
    install_stage "$loader" "$libpath"
}

# Route 1: build upstream CRIU from Debian's orig tarball.
route_build() {
    local uri
    uri="$(mirror_uri bookworm)" || {
        say "no bookworm entry (component main) in the apt sources"
        return 1
    }
    local p missing=()
    for p in "${BUILD_DEPS[@]}"; do
        package_installed "$p" || missing+=("$p")
    done
    if [[ ${#missing[@]} -gt 0 ]]; then
        say "installing build dependencies: ${missing[*]}"
        apt_system update -qq || return 1
        apt_system install -y -qq --no-install-recommends "${missing[@]}" || return 1
    fi

    local src=$TMP/src tarball=criu_${BUILD_VERSION}.orig.tar.xz
    local url=$uri/pool/main/c/criu/$tarball
    say "building criu $BUILD_VERSION from $url"
    mkdir -p "$src"
    # apt's own downloader: same proxy and transport settings as apt.
    id _apt >/dev/null 2>&1 && chown _apt "$src"
    run_logged /usr/lib/apt/apt-helper download-file "$url" "$src/$tarball" "SHA256:$BUILD_SHA256" || return 1
    echo "$BUILD_SHA256  $src/$tarball" | sha256sum -c --quiet - >>"$LOG" 2>&1 || {
        say "sha256 mismatch: $url"
        return 1
    }
    tar -xJf "$src/$tarball" -C "$src" || return 1
    local dir
    dir="$(find "$src" -mindepth 1 -maxdepth 1 -type d -name 'criu*' | head -n 1)"
    [[ -n $dir ]] || return 1
    run_logged make -C "$dir" -j"$(nproc)" criu || return 1

    new_stage
    install -D -m 0755 "$dir/criu/criu" "$STAGE/usr/sbin/criu" || return 1
    {
        echo "route: built from $tarball (sha256 $BUILD_SHA256)"
        echo "mirror: $uri"
    } >"$STAGE/SOURCE"
    install_stage "" ""
}

install_debian12() {
    # The download and the staging directory stay outside the repository.
    TMP="$(mktemp -d "${TMPDIR:-/var/tmp}/pyscrun-criu.XXXXXX")"
    chmod 0755 "$TMP"
    mkdir -p "$(dirname "$PREFIX")"
    case ${PYSCRUN_CRIU_ROUTE:-} in
        deb) route_deb || die "installing $SUITE's criu failed" ;;
        build) route_build || die "building criu failed" ;;
        "")
            if ! route_deb || ! criu_ok "$WRAPPER"; then
                [[ -n $STAGE ]] && rm -rf "$STAGE"
                STAGE=""
                say "$SUITE's binary package did not work; building criu instead"
                route_build || die "building criu failed"
            fi
            ;;
        *) die "PYSCRUN_CRIU_ROUTE must be deb or build, not '$PYSCRUN_CRIU_ROUTE'" ;;
    esac
    criu_ok "$WRAPPER" || die "$WRAPPER does not work: $("$WRAPPER" check 2>&1 | tail -n 3)"
}

main() {
    local rel first want
    rel="$(debian_release)"
    first="$(command -v criu 2>/dev/null || true)"
    if [[ -z ${PYSCRUN_CRIU_ROUTE:-} ]]; then
        if [[ -n $first ]] && criu_ok "$first"; then
            # A stale wrapper of ours in front of the package after an upgrade to 13+.
            if [[ $first == "$WRAPPER" && $rel != 12 ]] && criu_ok /usr/sbin/criu; then
                remove_ours
            fi
            return 0
        fi
        # Ours works but is not first on this PATH: nothing to install.
        if [[ $rel == 12 ]] && ours && criu_ok "$WRAPPER"; then
            say "warning: $WRAPPER works but 'criu' on PATH is ${first:-missing} (PATH=$PATH)"
            return 0
        fi
    fi

    : >"$LOG"
    case $rel in
        12)
            install_debian12
            want=$WRAPPER
            ;;
        *)
            [[ $rel == 13 ]] || say "warning: untested Debian version '$rel': trying Debian's criu package"
            install_package
            want=/usr/sbin/criu
            ;;
    esac

    hash -r
    first="$(command -v criu 2>/dev/null || true)"
    [[ $first == "$want" ]] ||
        say "warning: 'criu' on PATH is ${first:-missing}, not $want (PATH=$PATH)"
    say "criu $(criu_version "$want") ($want): $("$want" check 2>&1 | grep -m 1 '^Looks good' || true)"
}

main "$@"
