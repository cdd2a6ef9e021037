#!/usr/bin/env bash
# The CRD schemas the synth tests validate Karpenter's NodePools and EC2NodeClasses against, copied
# out of the karpenter-provider-aws Go module (the Go module proxy; no build) into
# .toolchain/k8s-crds/karpenter-<version>/. A no-op when they are there.
set -euo pipefail
KARPENTER_VERSION=v1.14.1  # the chart version the app installs (src/config/schema.ts)
STRATA_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$STRATA_ROOT/scripts/lib/toolchain.sh"
dest="$toolchain_dir/k8s-crds/karpenter-$KARPENTER_VERSION"
files=(karpenter.sh_nodepools.yaml karpenter.k8s.aws_ec2nodeclasses.yaml)
copy_karpenter_crds() {
  local dir
  dir=$(go mod download -json "github.com/aws/karpenter-provider-aws@$KARPENTER_VERSION" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -d "$dir/pkg/apis/crds" ] || { echo "go mod download gave no pkg/apis/crds"; return 1; }
  mkdir -p "$dest"
  for f in "${files[@]}"; do cp "$dir/pkg/apis/crds/$f" "$dest/"; done
}
if [ ! -f "$dest/${files[0]}" ] || [ ! -f "$dest/${files[1]}" ]; then
  go_env
  install_step "Karpenter $KARPENTER_VERSION CRDs" "the synth tests' NodePool and EC2NodeClass schemas (Go module proxy)" \
    - copy_karpenter_crds
fi
