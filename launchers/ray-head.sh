#!/usr/bin/env bash
# Start the Ray head on a GPU node, ready for autotune studies (executor: {kind: ray}).
#
# Usage: launchers/ray-head.sh [options] [-- extra `ray start` arguments]
#   --port N          GCS port                          (env RAY_PORT, default 6379)
#   --num-gpus N      GPUs Ray may hand out             (env RAY_NUM_GPUS, default: nvidia-smi count)
#   --gpu-arch NAME   e.g. blackwell, hopper: adds resource gpu_arch_NAME=<num gpus>
#                     and label gpu-arch=NAME           (env AUTOTUNE_GPU_ARCH)
#   --resources JSON  more node resources, e.g. '{"rack_a": 1}' (merged with gpu_arch_*)
#   --labels K=V,...  more node labels
#   --node-ip IP      address the other nodes and the driver use (env RAY_NODE_IP)
#   --pcie            PCIe-only node without InfiniBand: NCCL_IB_DISABLE=1 (see README.md)
#   --no-p2p          also NCCL_P2P_DISABLE=1 (only when P2P over PCIe hangs or corrupts; slower)
#   --auth MODE       token (default) or disabled: sets RAY_AUTH_MODE for the head
#   --block           stay in the foreground; Ctrl-C / SIGTERM stops the head
#   --dry-run         print the command and the environment, start nothing
#
# The environment this script exports reaches the raylet, every Ray worker, and so
# every SGLang server a trial launches. Nothing secret is written here: the auth token
# stays in ~/.ray/auth_token (or RAY_AUTH_TOKEN) of the user running Ray.
set -euo pipefail

port="${RAY_PORT:-6379}"
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

die() { echo "ray-head.sh: $*" >&2; exit 2; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --port) port="${2:?--port needs a value}"; shift 2 ;;
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
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    --) shift; extra=("$@"); break ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=launchers/ray-common.sh
source "${script_dir}/ray-common.sh"

[[ "$port" =~ ^[0-9]+$ ]] || die "--port: expected a number, got '$port'"
num_gpus="$(detect_gpus "$num_gpus")"
set_auth "$auth"
set_node_env "$pcie" "$no_p2p"

args=(start --head "--port=${port}" "--num-gpus=${num_gpus}" --disable-usage-stats --include-dashboard=false)
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
ensure_token "$auth"
run_ray "$block" "${args[@]}"
cat <<EOF
Ray head is up on port ${port} with ${num_gpus} GPU(s).
  Worker nodes:  launchers/ray-worker.sh --address <this-node-ip>:${port}
  Drivers:       RAY_ADDRESS=<this-node-ip>:${port} RAY_AUTH_MODE=${auth} autotune run STUDY.yaml
  Stop it:       ray stop is host-wide; prefer --block and stop that process (see README.md)
EOF
