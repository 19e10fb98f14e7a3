#!/usr/bin/env bash
# Pack a ROS 2 Kilted runtime for CPython 3.12 x86-64 into .rosbundle/, for the GPU machine
# (Python 3.12 with its own torch and numpy, no ROS, no network):
#
#   bash scripts/gpu_ros_bundle.sh [--clean]
#
# 1. makes a Python 3.12 venv ($ROS312_VENV, default /tmp/ros312-venv) with numpy and runs
#    scripts/setup_ros.sh in it (the Kilted wheels, our lingbot_ros_interfaces, tf2_msgs);
#    --clean deletes that venv first;
# 2. copies what the node needs at run time out of it:
#      site/      rclpy, rpyutils, ament_index_python, rosidl_parser, rosidl_generator_py and
#                 every interface package (std_msgs ... lingbot_ros_interfaces, tf2_msgs),
#                 without their generated .c sources, egg-info and the wheels' .pth
#                 bootstrapper (PYTHONPATH is set instead);
#      lib/       the venv's lib*.so plus the wheels' vendored ros_*.libs (libssl, tinyxml2,
#                 spdlog, ...) in one folder (LD_LIBRARY_PATH); identical copies (the wheels
#                 cannot hold symlinks: libfastdds.so{,.3.2,.3.2.2}) become symlinks;
#      share/ament_index/   the ament resource index (AMENT_PREFIX_PATH);
#      fallback/yaml/, fallback/typing_extensions/   PyYAML and typing_extensions, which
#                 rclpy imports; env.sh adds each only where that Python lacks it;
#    no numpy, no torch: the GPU machine's own are used;
# 3. writes .rosbundle/ros312.tar.xz (reproducible: sorted, fixed mtime and owner) and
#    .rosbundle/env.sh (the environment of an unpacked bundle, also inside the tarball).
# scripts/gpu_ros_env.sh unpacks and sources it there. Needs: python3.12 ($PYTHON312, else
# pyenv's or PATH's), cmake, a C/C++ compiler, xz, and PyPI (or a pip mirror) for the wheels.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${ROS312_VENV:-/tmp/ros312-venv}
OUTDIR="$REPO/.rosbundle"
log() { echo "gpu_ros_bundle: $*"; }
die() { echo "gpu_ros_bundle: $*" >&2; exit 1; }

[ "${1:-}" = "--clean" ] && { log "removing $VENV"; rm -rf "$VENV"; shift; }
[ $# -eq 0 ] || die "usage: $0 [--clean]"

# --- 1. the Python 3.12 venv with ROS ---------------------------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
  PY312=${PYTHON312:-}
  if [ -z "$PY312" ]; then
    for cand in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12 python3.12; do
      if "$cand" -c 'import sys, venv; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
        PY312=$cand; break
      fi
    done
  fi
  [ -n "$PY312" ] || die "no python3.12 found (set PYTHON312)"
  log "creating $VENV with $PY312"
  "$PY312" -m venv "$VENV"
fi
PY="$VENV/bin/python"
[ "$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" = 3.12 ] ||
  die "$VENV is not a Python 3.12 venv (use --clean)"
"$PY" -c 'import numpy' 2>/dev/null || "$PY" -m pip install -q --disable-pip-version-check numpy
bash "$REPO/scripts/setup_ros.sh" "$VENV"

# --- 2. staging -------------------------------------------------------------------------------
SITE="$VENV/lib/python3.12/site-packages"
STAGE=$(mktemp -d "${TMPDIR:-/tmp}/rosbundle.XXXXXX")
trap 'rm -rf "$STAGE"' EXIT
B="$STAGE/ros312"
mkdir -p "$B/site" "$B/lib" "$B/share" "$B/fallback/yaml" "$B/fallback/typing_extensions"

PKGS=(rclpy rpyutils ament_index_python rosidl_parser rosidl_generator_py)
for so in "$SITE"/*/*_s__rosidl_typesupport_c.so; do   # the interface packages
  PKGS+=("$(basename "$(dirname "$so")")")
done
for p in "${PKGS[@]}"; do
  [ -d "$SITE/$p" ] || die "$p missing from $SITE"
  cp -a "$SITE/$p" "$B/site/"
done
cp -a "$SITE/yaml" "$SITE"/_yaml "$B/fallback/yaml/"
cp -a "$SITE/typing_extensions.py" "$B/fallback/typing_extensions/"
# Generated C sources and byte code (3.12 writes its own on first import) are not needed.
find "$B" \( -name '*.c' -o -name '*.pyc' \) -delete
find "$B" -type d -name __pycache__ -empty -delete

cp -a "$VENV"/lib/lib*.so* "$B/lib/"
for d in "$SITE"/ros_*.libs; do
  [ -d "$d" ] && cp -a "$d"/. "$B/lib/"   # same file names are the same hashed library
done
cp -a "$VENV/share/ament_index" "$B/share/"

# Identical files in lib/ -> one file plus relative symlinks.
"$PY" - "$B/lib" <<'EOF'
import hashlib, os, sys
lib = sys.argv[1]
seen = {}
for name in sorted(os.listdir(lib), key=lambda n: (len(n), n)):   # shortest name is kept...
    path = os.path.join(lib, name)
    if os.path.islink(path) or not os.path.isfile(path):
        continue
    h = hashlib.sha256(open(path, "rb").read()).hexdigest()
    if h in seen:
        os.remove(path)
        os.symlink(seen[h], path)
    else:
        seen[h] = name
EOF

# --- 3. env.sh and the tarball ----------------------------------------------------------------
cat > "$B/env.sh" <<'EOF'
# Environment of an unpacked ROS 2 Kilted bundle (scripts/gpu_ros_bundle.sh), for CPython 3.12
# x86-64. Source it with ROS_BUNDLE_DIR set to the folder it was unpacked into.
# ROS_PYTHON (default python3) is the interpreter that will run ROS: it must be CPython 3.12
# and have numpy; PyYAML and typing_extensions come from the bundle where it lacks them.
: "${ROS_BUNDLE_DIR:?set ROS_BUNDLE_DIR to the unpacked bundle}"
# Each folder is added once (sourcing again changes nothing).
case ":${PYTHONPATH:-}:" in *":$ROS_BUNDLE_DIR/site:"*) ;;
  *) export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$ROS_BUNDLE_DIR/site;; esac
case ":${LD_LIBRARY_PATH:-}:" in *":$ROS_BUNDLE_DIR/lib:"*) ;;
  *) export LD_LIBRARY_PATH=$ROS_BUNDLE_DIR/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH};; esac
case ":${AMENT_PREFIX_PATH:-}:" in *":$ROS_BUNDLE_DIR:"*) ;;
  *) export AMENT_PREFIX_PATH=$ROS_BUNDLE_DIR${AMENT_PREFIX_PATH:+:$AMENT_PREFIX_PATH};; esac
export RMW_IMPLEMENTATION=rmw_fastrtps_cpp
export ROS_LOG_DIR=${ROS_LOG_DIR:-$ROS_BUNDLE_DIR/log}
unset _ROS_WHEELS_BOOTSTRAP_COMPLETE
# One interpreter start tells its version and which fallbacks it needs.
_ros_probe=$("${ROS_PYTHON:-python3}" -c 'import importlib.util as u, sys
print("%d.%d" % sys.version_info[:2], *[m for m in ("yaml", "typing_extensions") if u.find_spec(m) is None])') || _ros_probe="?"
[ "${_ros_probe%% *}" = 3.12 ] || echo "ros env: ${ROS_PYTHON:-python3} is Python ${_ros_probe%% *}, not 3.12: the bundle's extension modules will not load" >&2
for _ros_m in ${_ros_probe#* }; do
  case $_ros_m in yaml|typing_extensions)
    case ":$PYTHONPATH:" in *":$ROS_BUNDLE_DIR/fallback/$_ros_m:"*) ;;
      *) PYTHONPATH=$PYTHONPATH:$ROS_BUNDLE_DIR/fallback/$_ros_m;; esac;; esac
done
unset _ros_probe _ros_m
EOF
cp "$B/env.sh" "$STAGE/env.sh"

{
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) from $VENV ($("$PY" -c 'import sys; print(sys.version.split()[0])'))"
  "$PY" -m pip list --format=freeze 2>/dev/null | grep -iE '^(ros-kilted-|ros-rclpy|ros-fastdds|pyyaml|typing.extensions)' || true
  echo "site: ${PKGS[*]}"
} > "$B/BUNDLE_INFO"

mkdir -p "$OUTDIR"
log "packing $(du -sh "$B" | cut -f1) into $OUTDIR/ros312.tar.xz"
tar -C "$STAGE" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
    --exclude=ros312/BUNDLE_INFO -cf - ros312 | xz -9e -T1 > "$STAGE/ros312.tar.xz"
# BUNDLE_INFO (with its date) stays outside the reproducible tarball: next to it.
mv "$B/BUNDLE_INFO" "$OUTDIR/BUNDLE_INFO"
mv "$STAGE/env.sh" "$OUTDIR/env.sh"
mv "$STAGE/ros312.tar.xz" "$OUTDIR/ros312.tar.xz"
log "wrote $OUTDIR/ros312.tar.xz ($(du -h "$OUTDIR/ros312.tar.xz" | cut -f1), $(sha256sum "$OUTDIR/ros312.tar.xz" | cut -c1-16)) and $OUTDIR/env.sh"
