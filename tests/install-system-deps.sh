#!/bin/sh
# Installs what the tests need from Debian's packages, only when it is missing: Prometheus (for
# promtool and the live dashboard test). Nothing that is already there is touched, and no process
# is stopped: the tests start their own Prometheus on free ports. Debian's package would start a
# daemon on install; a policy-rc.d, only for the time of the install, keeps it from doing so.
set -eu

if command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
    if ! command -v sudo >/dev/null 2>&1; then
        echo "make test needs Debian's prometheus package and installing it needs root:" >&2
        echo "  run 'apt-get install prometheus' as root, or run make test as root" >&2
        exit 1
    fi
    SUDO=sudo
fi
echo "installing prometheus from Debian's packages (its service is not started)"
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
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
