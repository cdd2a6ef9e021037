#!/usr/bin/env bash
# Installs what the chart's tests need under .toolchain/ (git-ignored), from package registries
# only; idempotent and a no-op (well under a second) when everything is present:
#   helm                 go install from the Go module proxy (a few minutes on 2 cores, once)
#   kubernetes-validate  PyPI: a validator plus the Kubernetes API JSON schemas per version
#   CRD definitions      Go modules of prometheus-operator and KEDA (their CRD YAML files), for
#                        ServiceMonitor, PodMonitor, PrometheusRule and ScaledObject
set -euo pipefail

HELM_VERSION=v3.19.5
KUBERNETES_VALIDATE_VERSION=1.37.0
PROMETHEUS_OPERATOR_VERSION=v0.85.0
KEDA_VERSION=v2.21.0

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tc="$root/.toolchain"
log() { printf '\033[1m[helm-tools]\033[0m %s\n' "$*" >&2; }
die() { printf '\033[1;31m[helm-tools] error:\033[0m %s\n' "$*" >&2; exit 1; }

# Everything Go keeps (module cache, build cache) stays under .toolchain/go.
export GOPATH="$tc/go" GOMODCACHE="$tc/go/pkg/mod" GOCACHE="$tc/go/cache" GOBIN="$tc/bin"
export GOTOOLCHAIN=local GOFLAGS=-modcacherw CGO_ENABLED=0
mkdir -p "$tc/bin"

# Go from PATH, else the usual tarball location (go.dev/dl installs to /usr/local/go).
[ -x /usr/local/go/bin/go ] && ! command -v go >/dev/null && export PATH="/usr/local/go/bin:$PATH"
need_go() {
  command -v go >/dev/null || die "Go is needed to build helm from the Go module proxy (install Go >= 1.24, e.g. from go.dev/dl or apt-get install golang-go)"
}

# helm: built from source; a stamp records the version because a go-install build reports
# only "v3.x" without the patch level.
stamp="$tc/bin/.helm-version"
if [ ! -x "$tc/bin/helm" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$HELM_VERSION" ]; then
  need_go
  log "building helm $HELM_VERSION with $(go version | cut -d' ' -f3) (go install; minutes on a small machine)"
  start=$(date +%s)
  go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  echo "$HELM_VERSION" >"$stamp"
  log "helm built in $(($(date +%s) - start)) s"
fi

# kubernetes-validate with its dependencies, into its own --target folder.
kv="$tc/python/kubernetes-validate"
if [ ! -d "$kv/kubernetes_validate-$KUBERNETES_VALIDATE_VERSION.dist-info" ]; then
  command -v python3 >/dev/null || die "python3 is needed for kubernetes-validate (apt-get install python3 python3-pip)"
  log "installing kubernetes-validate $KUBERNETES_VALIDATE_VERSION from PyPI"
  rm -rf "$kv"
  python3 -m pip install --quiet --disable-pip-version-check --no-warn-script-location \
    --target "$kv" "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION"
fi

# CRD definitions: copied out of the two Go modules' source zips (no build).
crds="$tc/k8s-crds"
crd_stamp="$crds/.versions"
want="$PROMETHEUS_OPERATOR_VERSION $KEDA_VERSION"
if [ "$(cat "$crd_stamp" 2>/dev/null)" != "$want" ]; then
  need_go
  log "fetching CRD definitions (prometheus-operator $PROMETHEUS_OPERATOR_VERSION, KEDA $KEDA_VERSION) from the Go module proxy"
  module_dir() { go mod download -json "$1" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'; }
  po=$(module_dir "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION")
  keda=$(module_dir "github.com/kedacore/keda/v2@$KEDA_VERSION")
  [ -d "$po" ] && [ -d "$keda" ] || die "go mod download did not give the module folders"
  rm -rf "$crds" && mkdir -p "$crds"
  for kind in servicemonitors podmonitors prometheusrules; do
    cp "$po/example/prometheus-operator-crd/monitoring.coreos.com_$kind.yaml" "$crds/"
  done
  cp "$keda/config/crd/bases/keda.sh_scaledobjects.yaml" "$crds/"
  echo "$want" >"$crd_stamp"
fi

# strata-envoy-validate (helm/tools/envoy-validate): Envoy's v3 API from the go-control-plane
# module, to decode and constraint-check the rendered envoy.yaml. Rebuilt when its source changes.
ev_src="$root/helm/tools/envoy-validate"
ev_stamp="$tc/bin/.strata-envoy-validate.sum"
ev_sum=$(cat "$ev_src/go.mod" "$ev_src/go.sum" "$ev_src"/*.go | sha256sum | cut -d' ' -f1)
if [ ! -x "$tc/bin/strata-envoy-validate" ] || [ "$(cat "$ev_stamp" 2>/dev/null)" != "$ev_sum" ]; then
  need_go
  log "building strata-envoy-validate (Envoy's v3 API from go-control-plane)"
  (cd "$ev_src" && go build -o "$tc/bin/strata-envoy-validate" .)
  echo "$ev_sum" >"$ev_stamp"
fi
