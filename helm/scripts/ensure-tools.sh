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

STRATA_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$STRATA_ROOT/scripts/lib/toolchain.sh"
tc="$toolchain_dir"

# helm: built from source; a stamp records the version because a go-install build reports
# only "v3.x" without the patch level.
stamp="$tc/bin/.helm-version"
if [ ! -x "$tc/bin/helm" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$HELM_VERSION" ]; then
  go_install "helm $HELM_VERSION" "the chart's tests (built from the Go module proxy; minutes, once)" \
    "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  echo "$HELM_VERSION" >"$stamp"
fi

# kubernetes-validate with its dependencies, into its own --target folder.
kv="$tc/python/kubernetes-validate"
if [ ! -d "$kv/kubernetes_validate-$KUBERNETES_VALIDATE_VERSION.dist-info" ]; then
  ensure_pip "kubernetes-validate"
  rm -rf "$kv"
  install_step "kubernetes-validate $KUBERNETES_VALIDATE_VERSION" "the chart's schema checks (PyPI, with the Kubernetes API schemas)" \
    "$kv" python3 -m pip install --disable-pip-version-check --progress-bar off --no-warn-script-location \
    --target "$kv" "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION"
fi

copy_crds() {
  local po keda
  module_dir() { go mod download -json "$1" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'; }
  po=$(module_dir "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION")
  keda=$(module_dir "github.com/kedacore/keda/v2@$KEDA_VERSION")
  [ -d "$po" ] && [ -d "$keda" ] || { echo "go mod download did not give the module folders"; return 1; }
  rm -rf "$crds" && mkdir -p "$crds"
  for kind in servicemonitors podmonitors prometheusrules; do
    cp "$po/example/prometheus-operator-crd/monitoring.coreos.com_$kind.yaml" "$crds/"
  done
  cp "$keda/config/crd/bases/keda.sh_scaledobjects.yaml" "$crds/"
}

# CRD definitions: copied out of the two Go modules' source zips (no build).
crds="$tc/k8s-crds"
crd_stamp="$crds/.versions"
want="$PROMETHEUS_OPERATOR_VERSION $KEDA_VERSION"
if [ "$(cat "$crd_stamp" 2>/dev/null)" != "$want" ]; then
  go_env
  install_step "CRD definitions" "the chart's custom resources (prometheus-operator $PROMETHEUS_OPERATOR_VERSION and KEDA $KEDA_VERSION modules)" \
    - copy_crds
  echo "$want" >"$crd_stamp"
fi

# strata-envoy-validate (helm/tools/envoy-validate): Envoy's v3 API from the go-control-plane
# module, to decode and constraint-check the rendered envoy.yaml. Rebuilt when its source changes.
ev_src="$STRATA_ROOT/helm/tools/envoy-validate"
ev_stamp="$tc/bin/.strata-envoy-validate.sum"
ev_sum=$(cat "$ev_src/go.mod" "$ev_src/go.sum" "$ev_src"/*.go | sha256sum | cut -d' ' -f1)
if [ ! -x "$tc/bin/strata-envoy-validate" ] || [ "$(cat "$ev_stamp" 2>/dev/null)" != "$ev_sum" ]; then
  go_env
  install_step "strata-envoy-validate" "checking the rendered Envoy config (Envoy's v3 API from go-control-plane)" \
    "$tc/go" go -C "$ev_src" build -o "$tc/bin/strata-envoy-validate" .
  echo "$ev_sum" >"$ev_stamp"
fi
