#!/usr/bin/env bash
# Scale Strata's GPU node groups to zero and back, for cost control between working sessions.
#
#   gpu-scale.sh down <cluster> [nodegroup ...] [--region R] [--dry-run]
#   gpu-scale.sh up   <cluster> [nodegroup ...] [--region R] [--dry-run] [--min N] [--desired N] [--max N]
#
# down sets minSize=0 and desiredSize=0 (maxSize stays, EKS needs it >= 1): the nodes drain and
# terminate, the node group and its configuration remain. up restores the sizes the CDKTF stack
# recorded on each group (tags strata.dev/min-size, desired-size, max-size); with any of --min/
# --desired/--max it uses only those (min defaults to 0, an absent max stays as it is).
# Without node group names: every group of the cluster tagged strata.dev/gpu=true.
# --dry-run prints the update commands instead of running them; lookups (list/describe) are
# read-only and still need the AWS CLI, so pass names and sizes to dry-run without it.
# Note: this sizes the managed node groups only. Karpenter (on by default) launches GPU nodes of
# its own for pending GPU pods, as a cluster autoscaler would scale a group back up; scale the
# backend Deployments to zero first when the goal is to stop paying.
set -euo pipefail

die() { echo "gpu-scale: $1" >&2; exit "${2:-1}"; }
usage() { sed -n '4,5p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

action="${1:-}"
[[ "$action" == down || "$action" == up ]] || usage
shift
cluster="" region="" dry_run=0 min="" desired="" max=""
groups=()
while (($#)); do
  case "$1" in
    --region) region="${2:?--region needs a value}"; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    --min) min="${2:?--min needs a value}"; shift 2 ;;
    --desired) desired="${2:?--desired needs a value}"; shift 2 ;;
    --max) max="${2:?--max needs a value}"; shift 2 ;;
    -h | --help) usage ;;
    -*) echo "gpu-scale: unknown option $1" >&2; usage ;;
    *) if [[ -z "$cluster" ]]; then cluster="$1"; else groups+=("$1"); fi; shift ;;
  esac
done
[[ -n "$cluster" ]] || usage
for n in "$min" "$desired" "$max"; do
  [[ -z "$n" || "$n" =~ ^[0-9]+$ ]] || die "sizes must be whole numbers, got '$n'" 2
done
if [[ "$action" == down && -n "$min$desired$max" ]]; then die "--min/--desired/--max apply to 'up' only" 2; fi

region_args=()
[[ -n "$region" ]] && region_args=(--region "$region")

# Read-only AWS calls; they run in dry-run mode too.
aws_read() {
  command -v aws >/dev/null || die "the AWS CLI is needed to look up $1; pass node group names (and for 'up' --min/--desired/--max) to work without it"
  shift
  aws "$@" "${region_args[@]}"
}

tag_of() { # tag_of <nodegroup> <tag key> -> value or empty
  local v
  v=$(aws_read "the tags of node group $1" eks describe-nodegroup --cluster-name "$cluster" --nodegroup-name "$1" \
    --query "nodegroup.tags.\"$2\"" --output text) || return 1 # errexit is off inside `x || y`
  [[ "$v" == None ]] && v=""
  echo "$v"
}

# Command substitutions below end in `|| exit 1`: a failed lookup must stop the script, and bash
# does not propagate errors out of $(...) on its own.
if ((${#groups[@]} == 0)); then
  listed=$(aws_read "the node groups of $cluster" eks list-nodegroups --cluster-name "$cluster" \
    --query nodegroups --output text) || exit 1
  read -r -a all <<<"$listed"
  for g in "${all[@]}"; do
    is_gpu=$(tag_of "$g" strata.dev/gpu) || exit 1
    [[ "$is_gpu" == true ]] && groups+=("$g")
  done
  ((${#groups[@]})) || die "no node group of $cluster is tagged strata.dev/gpu=true"
fi

# Prints a command so it can be pasted back into a shell: words with shell metacharacters are quoted.
print_command() {
  local out="" w
  for w in "$@"; do
    if [[ "$w" =~ ^[A-Za-z0-9_./=,:@%+-]+$ ]]; then out+="$w "; else out+="'${w//\'/\'\\\'\'}' "; fi
  done
  echo "${out% }"
}

run() {
  if ((dry_run)); then
    print_command "$@"
  else
    "$@"
  fi
}

for g in "${groups[@]}"; do
  if [[ "$action" == down ]]; then
    scaling="minSize=0,desiredSize=0"
  else
    gmin="$min" gdesired="$desired" gmax="$max"
    if [[ -z "$min$desired$max" ]]; then # no sizes given: the ones the stack recorded
      gmin=$(tag_of "$g" strata.dev/min-size) || exit 1
      gdesired=$(tag_of "$g" strata.dev/desired-size) || exit 1
      gmax=$(tag_of "$g" strata.dev/max-size) || exit 1
    fi
    [[ -n "$gdesired" ]] || die "$g: no desired size (tag strata.dev/desired-size or --desired)"
    gmin="${gmin:-0}"
    ((gmin <= gdesired)) || die "$g: min ($gmin) is greater than desired ($gdesired)" 2
    if [[ -n "$gmax" ]]; then
      ((gdesired <= gmax)) || die "$g: desired ($gdesired) is greater than max ($gmax)" 2
      scaling="minSize=$gmin,maxSize=$gmax,desiredSize=$gdesired"
    else
      scaling="minSize=$gmin,desiredSize=$gdesired"
    fi
  fi
  run aws eks update-nodegroup-config --cluster-name "$cluster" --nodegroup-name "$g" \
    --scaling-config "$scaling" "${region_args[@]}"
done
