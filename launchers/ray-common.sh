# shellcheck shell=bash
# Helpers shared by ray-head.sh and ray-worker.sh (sourced, not run).

# The Python of the environment `ray` comes from (RAY_PYTHON overrides).
ray_python() {
  if [[ -n "${RAY_PYTHON:-}" ]]; then echo "$RAY_PYTHON"; return; fi
  local ray_bin dir
  ray_bin="$(command -v ray || true)"
  [[ -n "$ray_bin" ]] || die "ray is not on PATH (pip install 'ray[default]' in the env autotune uses)"
  dir="$(dirname "$ray_bin")"
  if [[ -x "$dir/python" ]]; then echo "$dir/python"; else echo python3; fi
}

# GPUs to declare: the given number, else what nvidia-smi lists.
detect_gpus() {
  local n="$1"
  if [[ -z "$n" ]]; then
    if command -v nvidia-smi >/dev/null 2>&1; then
      n="$(nvidia-smi -L | grep -c '^GPU ' || true)"
    else
      die "no nvidia-smi here: pass --num-gpus N (declared GPUs, e.g. for the simulated backend)"
    fi
  fi
  [[ "$n" =~ ^[0-9]+$ ]] || die "--num-gpus: expected a number, got '$n'"
  echo "$n"
}

# RAY_AUTH_MODE for this node; the same mode must be used on every node and driver.
set_auth() {
  case "$1" in
    token|disabled) export RAY_AUTH_MODE="$1" ;;
    *) die "--auth: expected token or disabled, got '$1'" ;;
  esac
}

# With token auth, make sure a token exists (Ray writes it to ~/.ray/auth_token).
ensure_token() {
  [[ "$1" == token ]] || return 0
  if [[ -n "${RAY_AUTH_TOKEN:-}" ]]; then return 0; fi
  if [[ -n "${RAY_AUTH_TOKEN_PATH:-}" ]]; then
    [[ -f "$RAY_AUTH_TOKEN_PATH" ]] || die "RAY_AUTH_TOKEN_PATH=$RAY_AUTH_TOKEN_PATH does not exist"
    return 0
  fi
  if [[ ! -f "$HOME/.ray/auth_token" ]]; then
    ray get-auth-token --generate >/dev/null
    echo "generated a Ray auth token in ~/.ray/auth_token: copy it to every node and driver (scp, mode 600)"
  fi
}

# Environment for SGLang servers started on this node (inherited through raylet -> worker -> server).
set_node_env() {
  local pcie="$1" no_p2p="$2"
  # CUDA numbers GPUs fastest-first by default; Ray's ids and nvidia-smi use bus order.
  export CUDA_DEVICE_ORDER="${CUDA_DEVICE_ORDER:-PCI_BUS_ID}"
  if [[ "$pcie" == 1 ]]; then
    # No InfiniBand HCA on a single PCIe box: NCCL skips probing for one.
    export NCCL_IB_DISABLE="${NCCL_IB_DISABLE:-1}"
  fi
  if [[ "$no_p2p" == 1 ]]; then
    # Only where PCIe P2P hangs or corrupts (IOMMU/ACS on, some VMs): NCCL goes through host memory.
    export NCCL_P2P_DISABLE=1
  fi
  export RAY_USAGE_STATS_ENABLED=0
}

# {"gpu_arch_<arch>": <gpus>} merged with the user's JSON resources.
resources_json() {
  local arch="$1" gpus="$2" user="$3"
  if [[ -n "$arch" && ! "$arch" =~ ^[A-Za-z0-9_-]+$ ]]; then
    die "--gpu-arch: letters, digits, '_' or '-' only, got '$arch'"
  fi
  [[ -z "$arch" && -z "$user" ]] && return 0
  "$(ray_python)" - "$arch" "$gpus" "$user" <<'PY' || die "--resources: expected a JSON object of numbers, got '$3'"
import json, sys
arch, gpus, user = sys.argv[1], int(sys.argv[2]), sys.argv[3]
res = json.loads(user) if user else {}
if not isinstance(res, dict) or not all(isinstance(v, (int, float)) for v in res.values()):
    raise SystemExit(1)
if arch:
    res.setdefault(f"gpu_arch_{arch.replace('-', '_')}", gpus)
print(json.dumps(res, separators=(",", ":")))
PY
}

# gpu-arch=<arch> plus the user's labels, comma separated.
labels_csv() {
  local arch="$1" user="$2" out=""
  [[ -n "$arch" ]] && out="gpu-arch=${arch}"
  if [[ -n "$user" ]]; then out="${out:+${out},}${user}"; fi
  echo "$out"
}

print_versions() {
  local py
  py="$(ray_python)"
  echo "ray $("$py" -c 'import ray; print(ray.__version__)') on $("$py" -c 'import sys; print(sys.version.split()[0])') ($py)"
  echo "drivers and all nodes need exactly these Ray and Python versions"
}

show_plan() {
  echo "would run: ray $*"
  env | grep -E '^(RAY_AUTH_MODE|RAY_USAGE_STATS_ENABLED|CUDA_DEVICE_ORDER|NCCL_[A-Z0-9_]+)=' | sort
}

# Run `ray ARGS` with SIGINT at its default, so Ray's soft cancel (a KeyboardInterrupt in
# the task) works even when this script itself was started in the background.
# First argument 1: replace this shell (for --block, so signals reach ray directly).
run_ray() {
  local replace="$1"; shift
  local py reset
  py="$(ray_python)"
  reset='import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp("ray", ["ray"] + sys.argv[1:])'
  if [[ "$replace" == 1 ]]; then
    exec "$py" -c "$reset" "$@"
  fi
  "$py" -c "$reset" "$@"
}
