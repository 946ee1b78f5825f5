#!/usr/bin/env bash
# ro_run.sh DIR COMMAND...: runs COMMAND with the folder DIR read-only to it, the way a user meets
# a read-only folder: as a user without write permission (not root: chmod a-w), or as root in a
# user and mount namespace with DIR bind-mounted read-only (EROFS), or as root dropped to the
# user nobody (setpriv) with DIR mode 555. `ro_run.sh --mode` prints which of chmod, unshare,
# setpriv works here, or "none" (exit 77).
set -uo pipefail
# Whether a read-only bind mount in a new user and mount namespace works (not in every container).
probe_unshare() {
  local d rc
  d=$(mktemp -d) || return 1
  unshare -rm sh -c 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" "$1" && ! touch "$1/x"' \
    sh "$d" 2>/dev/null
  rc=$?
  rm -rf "$d"
  return $rc
}
mode() {
  if [[ $(id -u) -ne 0 ]]; then
    echo chmod
  elif probe_unshare; then
    echo unshare
  elif command -v setpriv >/dev/null && setpriv --reuid=65534 --regid=65534 --clear-groups true 2>/dev/null; then
    echo setpriv
  else
    echo none
  fi
}
if [[ ${1:-} == --mode ]]; then
  m=$(mode)
  echo "$m"
  [[ $m != none ]] || exit 77
  exit 0
fi
dir=$1
shift
case $(mode) in
  chmod)
    chmod a-w "$dir"
    "$@"
    rc=$?
    chmod u+w "$dir"
    exit $rc
    ;;
  unshare)
    exec unshare -rm sh -c 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" "$1" && shift && exec "$@"' \
      sh "$dir" "$@"
    ;;
  setpriv)
    chmod 555 "$dir"
    # nobody reads the inputs (umask 022) and needs its own MPI session and shared-memory folders.
    setpriv --reuid=65534 --regid=65534 --clear-groups env HOME=/tmp TMPDIR=/tmp \
      OMPI_MCA_btl_vader_backing_directory=/tmp "$@"
    rc=$?
    chmod 755 "$dir"
    exit $rc
    ;;
  *)
    echo "ro_run.sh: no way to make a folder read-only here" >&2
    exit 77
    ;;
esac
