#!/bin/sh
# Install everything mrc-testbed needs on Debian 12 or Ubuntu 22.04/24.04. Idempotent; run as root.
#
#   scripts/install.sh              apt packages, the venv at .venv, the project (editable, with test extras),
#                                   p4runtime-shell in a venv of its own at .venv-shell (for mrc-ctl shell)
#   scripts/install.sh --with-bmv2  the same plus p4c, BMv2 (simple_switch_grpc) and PI from p4lang's packages
#
# The venv is made from the system python3 with --system-site-packages so that Debian's Mininet
# (python3-mininet, which brings mnexec) is importable from it.
set -eu

here=$(cd "$(dirname "$0")/.." && pwd)
with_bmv2=0
for arg in "$@"; do
    case "$arg" in
        --with-bmv2) with_bmv2=1 ;;
        -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "install.sh: unknown option '$arg' (expected --with-bmv2 or --help)" >&2; exit 2 ;;
    esac
done

say() { printf 'installing: %s\n' "$*"; }
die() { printf 'install.sh: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (sudo $0 $*): apt packages and the Mininet check need it"
command -v apt-get >/dev/null 2>&1 || die "apt-get not found: this script supports Debian and Ubuntu only"

export DEBIAN_FRONTEND=noninteractive
APT_PACKAGES="python3 python3-venv python3-pip python3-dev gcc git ca-certificates \
mininet openvswitch-switch iproute2 ethtool bridge-utils tcpdump tshark iperf3 procps psmisc kmod \
make libc6-dev libibverbs-dev"

missing=""
for pkg in $APT_PACKAGES; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed' || missing="$missing $pkg"
done
if [ -n "$missing" ]; then
    say "apt packages:$missing"
    # tshark asks whether non-root users may capture; answer no without a prompt.
    echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections 2>/dev/null || true
    apt-get update -qq || die "apt-get update failed: check the network and /etc/apt/sources.list"
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $missing >/dev/null \
        || die "apt-get install failed for:$missing"
    say "apt packages ok"
else
    say "apt packages ok (already present)"
fi

# pip trusts its own CA bundle by default; use the system store instead so that a CA the
# administrator installed (a TLS-inspecting proxy, say) is honoured as it is by apt and curl.
if [ -z "${PIP_CERT:-}" ] && [ -f /etc/ssl/certs/ca-certificates.crt ]; then
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt
    export PIP_CERT
fi

venv="$here/.venv"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import mininet.net' >/dev/null 2>&1; then
    say "venv at .venv (system python3, system site packages for Mininet)"
    rm -rf "$venv"
    /usr/bin/python3 -m venv --system-site-packages "$venv" || die "could not create the venv at $venv"
fi
stamp="$venv/.installed"
if [ ! -f "$stamp" ] || [ "$here/pyproject.toml" -nt "$stamp" ]; then
    say "python packages (pip install -e '.[test]')"
    "$venv/bin/python" -m pip install -q --upgrade pip >/dev/null \
        || die "pip could not reach the package index (see the messages above)"
    # an older install had p4runtime-shell and p4runtime here, holding protobuf at 3.20: they
    # live in .venv-shell now (below), and their descriptors would clash with the project's
    "$venv/bin/python" -m pip uninstall -q -y p4runtime-shell p4runtime googleapis-common-protos \
        >/dev/null 2>&1 || true
    "$venv/bin/python" -m pip install -q -e "$here[test]" || die "pip install failed (see the messages above)"
    touch "$stamp"
    say "venv ok"
else
    say "venv ok (already present)"
fi
"$venv/bin/python" -c 'import mininet.net' 2>/dev/null \
    || die "the venv cannot import mininet.net: is Debian's python3-mininet installed for /usr/bin/python3?"

# p4runtime-shell, for the interactive 'mrc-ctl shell' only, pins protobuf<3.21, p4runtime 1.4.1,
# IPython 7 and jedi 0.17: it gets a venv of its own so that its pins do not bind the project.
shell_venv="$here/.venv-shell"
if [ ! -x "$shell_venv/bin/python" ] || ! "$shell_venv/bin/python" -c 'import p4runtime_sh.shell' >/dev/null 2>&1; then
    say "p4runtime-shell in .venv-shell (for mrc-ctl shell)"
    rm -rf "$shell_venv"
    /usr/bin/python3 -m venv "$shell_venv" || die "could not create the venv at $shell_venv"
    "$shell_venv/bin/python" -m pip install -q --upgrade pip >/dev/null \
        || die "pip could not reach the package index (see the messages above)"
    "$shell_venv/bin/python" -m pip install -q "p4runtime-shell==0.0.6" \
        || die "pip install p4runtime-shell failed (see the messages above)"
    say "p4runtime-shell ok"
else
    say "p4runtime-shell ok (already present)"
fi

# The Wireshark dissector of the MRC headers, where tshark / Wireshark is installed: into the
# personal Lua plugin folder of the user running this (root), so captures open decoded.
if command -v tshark >/dev/null 2>&1; then
    plugins=$(tshark -G folders 2>/dev/null | sed -n 's/^Personal Lua Plugins:[[:space:]]*//p')
    if [ -n "$plugins" ]; then
        mkdir -p "$plugins"
        if cmp -s "$here/tools/wireshark/mrc.lua" "$plugins/mrc.lua"; then
            say "Wireshark dissector ok (already in $plugins)"
        else
            cp "$here/tools/wireshark/mrc.lua" "$plugins/mrc.lua"
            say "Wireshark dissector in $plugins"
        fi
    fi
else
    say "Wireshark dissector skipped (no tshark)"
fi

# lib_mrc.so and the emulated verbs device (libibverbs.so.1) for programs written against the
# OCP MRC API (docs/ocp-api.md), built against the OCP headers where they are (MRC_H_PATH,
# default ../shared/ocp-mrc next to the repository).
mrc_h="${MRC_H_PATH:-$here/../shared/ocp-mrc}"
if [ -f "$mrc_h/mrc.h" ]; then
    make -s -C "$here/capi" MRC_H_PATH="$mrc_h" >/dev/null || die "building lib_mrc.so failed (see the messages above)"
    say "lib_mrc.so and the emulated verbs device in build/capi"
else
    make -s -C "$here/capi" verbs >/dev/null || die "building the emulated verbs device failed (see the messages above)"
    say "lib_mrc.so skipped: no mrc.h in $mrc_h."
    say "  The OCP MRC API headers (mrc.h, mrc_ctl.h and their version headers) are published in"
    say "  the repository opencomputeproject/OCP-Multipath-Reliable-Connection; put a copy beside"
    say "  this checkout as ../shared/ocp-mrc, or run: MRC_H_PATH=DIR ./testbed install"
fi

if [ "$with_bmv2" = 1 ]; then
    if command -v p4c >/dev/null 2>&1 && command -v simple_switch_grpc >/dev/null 2>&1; then
        say "BMv2 and p4c ok (already present)"
    else
        . /etc/os-release
        case "$ID" in
            ubuntu) obs="xUbuntu_${VERSION_ID}" ;;
            debian) obs="Debian_${VERSION_ID}" ;;
            *) die "--with-bmv2: no p4lang packages for $ID (expected Ubuntu or Debian)" ;;
        esac
        repo="https://download.opensuse.org/repositories/home:/p4lang/${obs}"
        say "p4c and BMv2 from p4lang's packages ($repo)"
        apt-get install -y -qq --no-install-recommends curl gnupg >/dev/null || die "cannot install curl and gnupg"
        curl -fsSL --connect-timeout 15 --max-time 60 "$repo/Release.key" \
            | gpg --dearmor --yes -o /etc/apt/trusted.gpg.d/home_p4lang.gpg \
            || die "cannot reach p4lang's package repository ($repo): BMv2 and p4c need network access to it; without it use the switchmodel target (--target model)"
        echo "deb $repo/ /" > /etc/apt/sources.list.d/home:p4lang.list
        timeout 600 apt-get update -qq || die "apt-get update failed with p4lang's repository ($repo)"
        timeout 1800 apt-get install -y -qq p4lang-p4c p4lang-bmv2 p4lang-pi >/dev/null \
            || die "apt-get install p4lang-p4c p4lang-bmv2 p4lang-pi failed"
    fi
    p4c --version | head -n 1 || die "p4c is installed but does not run"
    simple_switch_grpc --version 2>&1 | head -n 1 || die "simple_switch_grpc is installed but does not run"
fi
say "done"
