#!/usr/bin/env bash
# Join a GPU node to a Ray cluster started with ray-head.sh.
#
# Usage: launchers/ray-worker.sh --address HEAD_IP:PORT [options] [-- extra `ray start` arguments]
#   --address A       the head's GCS address            (env RAY_ADDRESS)
#   --num-gpus N      GPUs Ray may hand out             (env RAY_NUM_GPUS, default: nvidia-smi count)
#   --gpu-arch NAME   adds resource gpu_arch_NAME=<num gpus> and label gpu-arch=NAME (env AUTOTUNE_GPU_ARCH)
#   --resources JSON  more node resources, e.g. '{"rack_a": 1}'
#   --labels K=V,...  more node labels
#   --node-ip IP      this node's address as the others reach it (env RAY_NODE_IP)
#   --pcie, --no-p2p  NCCL settings as in ray-head.sh (see README.md)
#   --auth MODE       token (default) or disabled; must match the head. With token, this
#                     node needs the head's token: ~/.ray/auth_token, RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH
#   --block           stay in the foreground
#   --dry-run         print the command and the environment, start nothing
set -euo pipefail

address="${RAY_ADDRESS:-}"
num_gpus="${RAY_NUM_GPUS:-}"
gpu_arch="${AUTOTUNE_GPU_ARCH:-}"
resources=""
labels=""
node_ip="${RAY_NODE_IP:-}"
pcie=0
no_p2p=0
auth="${RAY_AUTH_MODE:-token}"
block=0
dry_run=0
extra=()

die() { echo "ray-worker.sh: $*" >&2; exit 2; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --address) address="${2:?--address needs a value}"; shift 2 ;;
    --num-gpus) num_gpus="${2:?--num-gpus needs a value}"; shift 2 ;;
    --gpu-arch) gpu_arch="${2:?--gpu-arch needs a value}"; shift 2 ;;
    --resources) resources="${2:?--resources needs a value}"; shift 2 ;;
    --labels) labels="${2:?--labels needs a value}"; shift 2 ;;
    --node-ip) node_ip="${2:?--node-ip needs a value}"; shift 2 ;;
    --pcie) pcie=1; shift ;;
    --no-p2p) no_p2p=1; shift ;;
    --auth) auth="${2:?--auth needs a value}"; shift 2 ;;
    --block) block=1; shift ;;
    --dry-run) dry_run=1; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    --) shift; extra=("$@"); break ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=launchers/ray-common.sh
source "${script_dir}/ray-common.sh"

[[ "$address" =~ ^[^:]+:[0-9]+$ ]] || die "--address: expected HEAD_IP:PORT, got '${address}'"
num_gpus="$(detect_gpus "$num_gpus")"
set_auth "$auth"
set_node_env "$pcie" "$no_p2p"
unset RAY_ADDRESS  # ray start takes --address; a stale RAY_ADDRESS must not override it

args=(start "--address=${address}" "--num-gpus=${num_gpus}" --disable-usage-stats)
res_json="$(resources_json "$gpu_arch" "$num_gpus" "$resources")"
[[ -n "$res_json" ]] && args+=("--resources=${res_json}")
lab="$(labels_csv "$gpu_arch" "$labels")"
[[ -n "$lab" ]] && args+=("--labels=${lab}")
[[ -n "$node_ip" ]] && args+=("--node-ip-address=${node_ip}")
[[ "$block" == 1 ]] && args+=(--block)
args+=("${extra[@]}")

print_versions
if [[ "$dry_run" == 1 ]]; then
  show_plan "${args[@]}"
  exit 0
fi
if [[ "$auth" == token && -z "${RAY_AUTH_TOKEN:-}" && -z "${RAY_AUTH_TOKEN_PATH:-}" && ! -f "$HOME/.ray/auth_token" ]]; then
  die "token auth: copy the head's ~/.ray/auth_token here first (or set RAY_AUTH_TOKEN / RAY_AUTH_TOKEN_PATH)"
fi
run_ray "$block" "${args[@]}"
echo "joined ${address} with ${num_gpus} GPU(s); 'ray status' on any node shows the cluster"
