#!/bin/sh
# Install the Debian packages whose command is missing, each given as command:package
# (the Makefile's SYSTEM_PACKAGES and the like; a command may be an absolute path, for a
# package that gives no command on PATH); nothing to do when every command is there.
#
# Another apt or dpkg at work (unattended upgrades on a fresh machine, a second clone's
# `make test`) holds its locks: this waits for them, up to APT_LOCK_WAIT seconds (600),
# instead of failing at once.  apt-get install waits by itself (DPkg::Lock::Timeout);
# apt-get update (apt 2.6, bookworm's) does not wait for the lists' lock, so it is retried
# while that lock is what stops it.  A package that cannot be had, or that leaves its
# command missing, ends this with exit 1 and one line saying which: the tests that need
# it would only fail later, one by one, or hang.
#
# A "command" of the form perl/Some/Module.pm is a Perl module instead, present when a
# directory of perl's @INC holds that file: swaks speaks STARTTLS only with Net::SSLeay,
# which Debian's swaks merely recommends (and this installs without recommends).
set -u

present() {
  case $1 in
    perl/*) perl -e 'exit !grep { -e "$_/$ARGV[0]" } @INC' "${1#perl/}" 2>/dev/null ;;
    *) command -v "$1" >/dev/null 2>&1 ;;
  esac
}
wait_s=${APT_LOCK_WAIT:-600}

missing=""
for pair in "$@"; do
  present "${pair%%:*}" || missing="$missing ${pair##*:}"
done
[ -z "$missing" ] && exit 0

fail() {
  echo "error: cannot install the Debian packages$missing: $1" >&2
  echo "       (install them as root, then run make again)" >&2
  exit 1
}

echo "installing Debian packages:$missing"
deadline=$(($(date +%s) + wait_s))
said=""
until out=$(apt-get -o "DPkg::Lock::Timeout=$wait_s" update -qq 2>&1); do
  case $out in
    *"Could not get lock"*) ;;
    *) printf '%s\n' "$out" >&2; fail "apt-get update failed" ;;
  esac
  [ "$(date +%s)" -lt "$deadline" ] || fail "another apt or dpkg held its lock for ${wait_s}s"
  [ -n "$said" ] || echo "waiting for another apt or dpkg to finish (up to ${wait_s}s) ..."
  said=1
  sleep 2
done
# Questions a package would ask (postfix's mailer type) are answered beforehand.
debconf-set-selections "$(dirname "$0")/debconf-preseed.txt" || fail "debconf-set-selections failed"
# shellcheck disable=SC2086 # one word per package
DEBIAN_FRONTEND=noninteractive apt-get -o "DPkg::Lock::Timeout=$wait_s" install -y -qq \
  --no-install-recommends $missing >/dev/null || fail "apt-get install failed (above)"

for pair in "$@"; do
  present "${pair%%:*}" \
    || fail "${pair##*:} is installed but gives no command ${pair%%:*}"
done
