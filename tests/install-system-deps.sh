#!/bin/sh
# Installs what the tests need from Debian's packages, only what is missing: Prometheus (for
# promtool and the live dashboard test), Redis (the shared verdict cache's and the resolver's
# tests), Chromium (the report as a browser renders it, headless) and PostgreSQL (the resolver's
# tests: initdb and pg_ctl make a throwaway cluster). Nothing that is already there is touched,
# and no process is stopped: the tests start their own Prometheus, redis-server and PostgreSQL on
# free ports. Debian's packages would start daemons on install; a policy-rc.d, only for the time
# of the install, keeps them from doing so.
set -eu

packages=""
if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then
    packages=" prometheus"
fi
if ! command -v redis-server >/dev/null 2>&1; then
    packages="$packages redis-server"
fi
if ! command -v chromium >/dev/null 2>&1; then
    packages="$packages chromium"
fi
# Debian keeps initdb and pg_ctl out of PATH, in /usr/lib/postgresql/VERSION/bin.
have_initdb() {
    command -v initdb >/dev/null 2>&1 && return 0
    for found in "${POSTGRESQL_LIB:-/usr/lib/postgresql}"/*/bin/initdb; do  # overridable for the test of this script
        [ -x "$found" ] && return 0
    done
    return 1
}
if ! have_initdb; then
    packages="$packages postgresql"
fi
if [ -z "$packages" ]; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
    if ! command -v sudo >/dev/null 2>&1; then
        echo "make test needs Debian's packages $packages and installing them needs root:" >&2
        echo "  run 'apt-get install $packages' as root, or run make test as root" >&2
        exit 1
    fi
    SUDO=sudo
fi
echo "installing$packages from Debian's packages (their services are not started)"
policy="${POLICY_RC_D:-/usr/sbin/policy-rc.d}"  # overridable for the test of this script
own_policy=""
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# written by ctxprec make test for the length of one install\nexit 101\n' | $SUDO tee "$policy" >/dev/null
    $SUDO chmod 755 "$policy"
    own_policy=1
fi
cleanup() { if [ -n "$own_policy" ]; then $SUDO rm -f "$policy"; fi; }
trap cleanup EXIT
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $packages >/dev/null
