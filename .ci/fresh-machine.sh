#!/usr/bin/env bash
# Prove the README's commands on a genuinely fresh Debian 12.
#
#   bash .ci/fresh-machine.sh           # fast: the README's first command, as
#                                       # root and as a user with sudo (~3-7 min)
#   bash .ci/fresh-machine.sh --full    # also the second command (bash
#                                       # tests/run.sh), as root and as the
#                                       # user with sudo (about 30 min each)
#   bash .ci/fresh-machine.sh --only NAME   # one run: root, sudo-user,
#                                       # full or full-sudo-user
#
# Builds a minimal Debian 12 root filesystem from Debian's package archive
# (mmdebstrap --variant=minbase bookworm: no python3, no bwrap, no pip, only
# sudo added so that a sudo user can exist), copies the committed files of the
# checkout in (git archive HEAD: what a clone would have), and runs the first
# command found in README.md, so the README and this check cannot drift apart.
# The user run gets its own fresh root filesystem and the README line with
# `sudo ` before each `apt-get`, which is what the README tells such a user.
# The full runs then type the README's second command unchanged; the user's
# run also checks that nothing in its checkout was left owned by root.
#
# Each run enters its root filesystem through private mount and pid
# namespaces (unshare) and pivot_root: /proc, /sys and /dev are mounted there
# and vanish with them, and every tree is deleted at the end; after a failing
# run its log is kept in a directory the output names.
# The host's pip configuration (`pip config list`: index URLs, find-links,
# constraints, CA bundle) is passed in by .ci/fresh_pip_conf.py, with the local
# directories it names bound read-only, so the root filesystem reaches the
# same package index; so is the host's trust (the certificates in
# /usr/local/share/ca-certificates, and its CA bundle for pip).
#
# Needs root, mmdebstrap, unshare and git.  Exit 0 when every run passed; on a
# failure the last lines of the failed run's log are printed, with its path.
# DSH_FRESH_BASE=FILE.tar reuses a root filesystem tarball made by an earlier
# run (DSH_FRESH_KEEP=1 keeps the work directory, tarball included).
set -euo pipefail

runs="root sudo-user"
case "${1:-}" in
  "") ;;
  --full) runs="root sudo-user full full-sudo-user" ;;
  --only)
    case "${2:-}" in
      root | sudo-user | full | full-sudo-user) runs="$2" ;;
      *) echo "fresh-machine: --only takes root, sudo-user, full or full-sudo-user, not '${2:-}'" >&2; exit 2 ;;
    esac ;;
  -h | --help) sed -n '2,/^set -euo/p' "$0" | sed -e 's/^# \{0,1\}//' -e '$d'; exit 0 ;;
  *) echo "fresh-machine: unknown argument '$1' (use --full, --only NAME or nothing)" >&2; exit 2 ;;
esac

root="$(cd "$(dirname "$0")/.." && pwd)"
if [ "$(id -u)" != 0 ]; then
  echo "fresh-machine: run as root (it builds and enters a root filesystem)" >&2
  exit 2
fi
for tool in mmdebstrap unshare git; do
  command -v "$tool" >/dev/null 2>&1 || { echo "fresh-machine: $tool not found (apt-get install $tool)" >&2; exit 2; }
done

# The README's first command: the line after the first ```sh fence.
first_command="$(awk '/^```sh$/ { getline; print; exit }' "$root/README.md")"
case "$first_command" in
  *apt-get*dsh-sandbox*) ;;
  *) echo "fresh-machine: README.md's first \`\`\`sh block is not the install command: '$first_command'" >&2; exit 1 ;;
esac
sudo_command="${first_command//apt-get /sudo apt-get }"
# The second command: the line after the second ```sh fence.
second_command="$(awk '/^```sh$/ { n++; if (n == 2) { getline; print; exit } }' "$root/README.md")"
case "$second_command" in
  *tests/run.sh*) ;;
  *) echo "fresh-machine: README.md's second \`\`\`sh block is not the test command: '$second_command'" >&2; exit 1 ;;
esac

work="$(mktemp -d /var/tmp/dsh-fresh.XXXXXX)"
# After a failure only the logs are kept (a few KB, in a directory of their own
# that is named); the root filesystems (about 1 GB) go.  DSH_FRESH_KEEP=1 keeps
# everything, and says so.
kept_logs=""
cleanup() {
  if [ "${DSH_FRESH_KEEP:-}" = 1 ]; then
    echo "fresh-machine: kept $work ($(du -sh "$work" 2>/dev/null | cut -f1)); remove it with: rm -rf $work"
    return
  fi
  if [ -n "$kept_logs" ]; then
    mkdir -p "$kept_logs"
    cp "$work"/*.log "$kept_logs"/ 2>/dev/null || true
    echo "fresh-machine: removed the root filesystems; the logs of this run are kept in $kept_logs" >&2
  fi
  rm -rf --one-file-system "$work"
}
trap cleanup EXIT
echo "fresh-machine: work directory $work"

base="${DSH_FRESH_BASE:-}"
if [ -z "$base" ]; then
  base="$work/bookworm.tar"
  echo "fresh-machine: mmdebstrap --variant=minbase --include=sudo bookworm"
  start=$SECONDS
  mmdebstrap --quiet --variant=minbase --include=sudo bookworm "$base"
  echo "fresh-machine: root filesystem built in $((SECONDS - start)) s"
fi
git -C "$root" archive --format=tar --prefix=dsh-sandbox/ HEAD >"$work/checkout.tar"

# The host's pip configuration, so the root filesystem reaches the same index.
python3 "$root/.ci/fresh_pip_conf.py" "$work"
# The host's trust: certificates the user added system-wide (a TLS-intercepting
# proxy's CA, say) go where Debian's ca-certificates picks them up when it is
# installed inside; pip, which may use its own bundle, gets the host's whole
# bundle unless its configuration names one already.
host_bundle=/etc/ssl/certs/ca-certificates.crt
if [ -f "$host_bundle" ] && ! grep -q '^cert = ' "$work/pip.conf"; then
  echo "cert = /usr/local/share/dsh-fresh/host-ca-bundle.crt" >>"$work/pip.conf"
  echo "$host_bundle /usr/local/share/dsh-fresh/host-ca-bundle.crt" >>"$work/copies"
fi
echo "fresh-machine: trust passed in: $(find /usr/local/share/ca-certificates -name '*.crt' 2>/dev/null | wc -l) added certificate(s); pip's $(grep '^cert = ' "$work/pip.conf" || echo 'cert: none')"

# run_fresh NAME USER COMMAND: a fresh root filesystem, the checkout in USER's
# home, COMMAND run there as USER through a login shell.  Logs to $work/NAME.log.
run_fresh() {
  local name="$1" user="$2" command="$3"
  local rootfs="$work/$name" log="$work/$name.log" home
  mkdir "$rootfs"
  tar -C "$rootfs" -xf "$base"
  cp /etc/resolv.conf "$rootfs/etc/resolv.conf"
  if [ -d /usr/local/share/ca-certificates ]; then
    mkdir -p "$rootfs/usr/local/share/ca-certificates"
    cp -r /usr/local/share/ca-certificates/. "$rootfs/usr/local/share/ca-certificates/"
  fi
  cp "$work/pip.conf" "$rootfs/etc/pip.conf"
  while read -r src dst; do
    mkdir -p "$(dirname "$rootfs$dst")" && cp "$src" "$rootfs$dst"
  done <"$work/copies"
  if [ "$user" = root ]; then
    home=/root
  else
    home="/home/$user"
    chroot "$rootfs" useradd --create-home --shell /bin/bash "$user"
    echo "$user ALL=(ALL) NOPASSWD: ALL" >"$rootfs/etc/sudoers.d/$user"
    chmod 0440 "$rootfs/etc/sudoers.d/$user"
  fi
  tar -C "$rootfs$home" -xf "$work/checkout.tar"
  chroot "$rootfs" chown -R "$user:" "$home/dsh-sandbox"

  local script="$work/$name.enter.sh"
  {
    echo 'set -eu'
    echo "mount --bind '$rootfs' '$rootfs'"
    echo "mount -t proc proc '$rootfs/proc'"
    echo "mount --rbind /sys '$rootfs/sys'"
    echo "mount --rbind /dev '$rootfs/dev'"
    while read -r path; do
      [ -n "$path" ] || continue
      echo "mkdir -p '$rootfs$path' && mount --bind -o ro '$path' '$rootfs$path'"
    done <"$work/binds"
    # pivot_root, not chroot: the kernel refuses a new user namespace to a
    # chrooted process, so bwrap (and anything using namespaces) would fail.
    echo "mkdir '$rootfs/.host-root' && cd '$rootfs' && pivot_root . .host-root"
    echo 'cd / && umount -l /.host-root && rmdir /.host-root'
    # A login shell of USER in its checkout, as a person would open one; the
    # environment is the root filesystem's, not this host's.  Not exec'd: this
    # shell is pid 1 of the run's pid namespace and reaps what the run orphans
    # (runuser would not; unreaped, nobody's zombies piled up to its process
    # limit and the tests that set one failed to fork).
    printf '/usr/sbin/runuser -l %q -c %q\nexit $?\n' "$user" "cd ~/dsh-sandbox && $command"
  } >"$script"

  echo "fresh-machine: [$name] as $user: $command"
  local start=$SECONDS status=0
  env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin unshare --mount --pid --fork --propagation private \
    bash "$script" >"$log" 2>&1 </dev/null || status=$?
  local took=$((SECONDS - start))
  if [ "$status" != 0 ]; then
    echo "fresh-machine: [$name] FAILED (exit $status after $took s); last lines of $log:" >&2
    # pip's notes about a local index lacking a project only hide the error.
    grep -v 'is ignored: it is neither a file nor a directory' "$log" | tail -n 40 | sed "s/^/  [$name] /" >&2
    kept_logs="/var/tmp/dsh-fresh-logs.$(basename "$work")"
    return 1
  fi
  echo "fresh-machine: [$name] ok in $took s; last lines:"
  tail -n 6 "$log" | sed "s/^/  [$name] /"
  rm -rf --one-file-system "$rootfs"
}

# A command run as root anywhere in the user's checkout would leave files the
# user cannot change or delete.
no_root_files='{ left="$(find . -xdev -user 0 -print -quit)" || left="(find failed)"; [ -z "$left" ] || { echo "fresh-machine: owned by root in the checkout: $left" >&2; false; }; }'

failed=0
for run in $runs; do
  # The long runs are worth nothing once the README's first command failed.
  case "$run" in full*) [ "$failed" = 0 ] || break ;; esac
  case "$run" in
    root) run_fresh root root "$first_command" || failed=1 ;;
    sudo-user) run_fresh sudo-user newbie "$sudo_command" || failed=1 ;;
    # The second command in a machine where the first one has run.
    full) run_fresh full root "$first_command && $second_command" || failed=1 ;;
    full-sudo-user) run_fresh full-sudo-user newbie "$sudo_command && $second_command && $no_root_files" || failed=1 ;;
  esac
done
exit "$failed"
