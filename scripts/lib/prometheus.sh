# shellcheck shell=bash
# Sourced after scripts/lib/toolchain.sh: Prometheus and promtool (Debian's `prometheus`
# package) for the alert-rule checks, the dashboard stack test and the load harness.
#   ensure_prometheus   installs the package when either binary is missing (as root with
#                       apt-get); otherwise stops with a message saying what to install.
# The Debian package enables a system service; the tests start their own on a free port.
ensure_prometheus() {
  command -v prometheus >/dev/null && command -v promtool >/dev/null && return 0
  apt_install_or_die "the observability tests and the load harness (Prometheus, promtool)" prometheus
}
