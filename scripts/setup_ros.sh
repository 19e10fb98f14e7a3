#!/usr/bin/env bash
# Install ROS 2 Kilted from PyPI wheels into an existing venv and build our interfaces into it.
#
#   scripts/setup_ros.sh VENV
#
# 1. pip-installs the runtime wheels the node needs (rclpy, message packages, rmw_fastrtps_cpp)
#    plus the rosidl build tools, pinned to Kilted through the ros-kilted-* meta-packages;
# 2. repoints the wheel builder's Python/numpy include paths baked into the wheels' CMake files;
# 3. builds interfaces/lingbot_ros_interfaces (definitions from msg/ and srv/) with cmake and
#    installs it into the venv itself, which is an ament prefix: nothing is needed at run time;
# 4. builds the minimal interfaces/tf2_msgs the same way, only when no real tf2_msgs is
#    importable (pip-only environments: tf2 has no wheels);
# 5. test tooling, outside the repository: the real launch system (launch, launch_ros,
#    launch_testing, ros2launch, the ros2 CLI verbs) from the wheels in ../shared/ros2-launch
#    (pip --no-index --no-deps, plus osrf-pycommon psutil argcomplete packaging from the index)
#    and composition_interfaces built from its source there, which launch_ros imports. Skipped
#    when launch_ros is importable from elsewhere (a sourced ROS install) or when there is no
#    ../shared/ros2-launch (then the launch tests skip and say why).
# See docs/ros.md. Idempotent: each step records a key (hash of its inputs) under
# VENV/.lingbot_ros-ros/ and is skipped while the key matches. Needs cmake >= 3.16 and a C/C++
# compiler (Debian: apt-get install cmake g++).
set -euo pipefail

[ $# -eq 1 ] || { echo "usage: $0 VENV" >&2; exit 2; }
[ -x "$1/bin/python" ] || { echo "setup_ros.sh: no venv at '$1' (create it first)" >&2; exit 2; }
VENV=$(cd "$1" && pwd)
PY="$VENV/bin/python"
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STAMPS="$VENV/.lingbot_ros-ros"
mkdir -p "$STAMPS"
for tool in cmake c++; do
  command -v "$tool" >/dev/null || { echo "setup_ros.sh: '$tool' not found (apt-get install cmake g++)" >&2; exit 2; }
done
# A guard inherited from another venv's bootstrapped Python would skip this venv's bootstrap
# (the re-exec that puts the wheels' shared libraries on LD_LIBRARY_PATH).
unset _ROS_WHEELS_BOOTSTRAP_COMPLETE
export PIP_DISABLE_PIP_VERSION_CHECK=1

WHEELS=(
  # runtime
  ros-kilted-rclpy ros-kilted-rmw-fastrtps-cpp ros-kilted-builtin-interfaces ros-kilted-std-msgs
  ros-kilted-std-srvs ros-kilted-sensor-msgs ros-kilted-geometry-msgs ros-kilted-nav-msgs
  ros-kilted-diagnostic-msgs ros-kilted-rosgraph-msgs
  # interface build: the generators, plus dependencies their wheels do not declare
  ros-kilted-rosidl-default-generators ros-kilted-ament-cmake ros-kilted-ament-package
  ros-kilted-ament-cmake-include-directories ros-kilted-ament-cmake-ros-core
  ros-kilted-rosidl-core-generators 'catkin_pkg>=1.0,<2'
)

key_of() { sha256sum "$@" | sha256sum | cut -c1-16; }
log() { echo "setup_ros: $*"; }
PYVER=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')

# --- 1. wheels -------------------------------------------------------------------------------
WHEELS_KEY=$(printf '%s\n' "$PYVER" "${WHEELS[@]}" | sha256sum | cut -c1-16)
if [ "$(cat "$STAMPS/wheels.key" 2>/dev/null)" != "$WHEELS_KEY" ]; then
  log "installing ROS 2 Kilted wheels into $VENV"
  "$PY" -m pip install -q "${WHEELS[@]}"
  echo "$WHEELS_KEY" > "$STAMPS/wheels.key"
fi

# --- 2. baked paths --------------------------------------------------------------------------
# The wheels' exported CMake targets name the builder's /opt/python/cp3XX-cp3XX include dirs.
# Cheap to repeat: after the first run grep finds nothing.
PYINC=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
NPINC=$("$PY" -c 'import numpy; print(numpy.get_include())')
{ grep -rlZ '/opt/python/cp3' "$VENV"/share/*/cmake 2>/dev/null || true; } | xargs -0r sed -i \
  -e "s#/opt/python/cp3[0-9]*-cp3[0-9]*/include/python3\.[0-9]*#$PYINC#g" \
  -e "s#/opt/python/cp3[0-9]*-cp3[0-9]*/lib/python3\.[0-9]*/site-packages/numpy/_core/include#$NPINC#g"

# --- 3./4. interface packages ----------------------------------------------------------------
# build_interfaces NAME SRC KEY: configure and build SRC, then install it into the venv. The
# files of the previous install (its manifest) are removed just before, so a deleted .msg
# leaves nothing behind and the package is missing only for the moment of the install.
build_interfaces() {
  local name=$1 src=$2 key=$3 build
  build=$(mktemp -d "${TMPDIR:-/tmp}/lingbot_ros-$name.XXXXXX")
  log "building $name into $VENV"
  if ! (export AMENT_PREFIX_PATH="$VENV" PATH="$VENV/bin:$PATH" VIRTUAL_ENV="$VENV"
        cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF \
          -DCMAKE_PREFIX_PATH="$VENV" -DCMAKE_INSTALL_PREFIX="$VENV" \
          -DPython3_EXECUTABLE="$PY" -DPython3_FIND_VIRTUALENV=ONLY > "$build/cmake.log" 2>&1 &&
        cmake --build "$build" -j"$(nproc)" > "$build/build.log" 2>&1); then
    tail -n 40 "$build"/*.log >&2
    echo "setup_ros.sh: building $name failed; logs in $build" >&2
    exit 1
  fi
  if [ -f "$STAMPS/$name.manifest" ]; then
    xargs -r -d '\n' rm -f < "$STAMPS/$name.manifest"
    rm -f "$STAMPS/$name.key" "$STAMPS/$name.manifest"
  fi
  cmake --install "$build" > "$build/install.log" 2>&1 || {
    tail -n 20 "$build/install.log" >&2; echo "setup_ros.sh: installing $name failed" >&2; exit 1; }
  cp "$build/install_manifest.txt" "$STAMPS/$name.manifest"
  rm -rf "$build"
  echo "$key" > "$STAMPS/$name.key"
}

IFACE_SRC="$REPO/interfaces/lingbot_ros_interfaces"
IFACE_KEY=$(printf '%s\n' "$WHEELS_KEY" "$(key_of "$IFACE_SRC"/package.xml "$IFACE_SRC"/CMakeLists.txt \
  "$REPO"/msg/*.msg "$REPO"/srv/*.srv "$REPO/scripts/setup_ros.sh")" | sha256sum | cut -c1-16)
if [ "$(cat "$STAMPS/lingbot_ros_interfaces.key" 2>/dev/null)" != "$IFACE_KEY" ]; then
  build_interfaces lingbot_ros_interfaces "$IFACE_SRC" "$IFACE_KEY"
  "$PY" -c 'from lingbot_ros_interfaces.srv import GetCacheInfo, SaveTrajectory'
fi

TF_SRC="$REPO/interfaces/tf2_msgs"
TF_KEY=$(printf '%s\n' "$WHEELS_KEY" "$(key_of "$TF_SRC"/package.xml "$TF_SRC"/CMakeLists.txt \
  "$TF_SRC"/msg/TFMessage.msg "$REPO/scripts/setup_ros.sh")" | sha256sum | cut -c1-16)
if [ -f "$STAMPS/tf2_msgs.key" ]; then   # ours: keep it current
  [ "$(cat "$STAMPS/tf2_msgs.key")" = "$TF_KEY" ] || build_interfaces tf2_msgs "$TF_SRC" "$TF_KEY"
elif "$PY" -c 'import tf2_msgs.msg' 2>/dev/null; then
  log "a real tf2_msgs is importable: not building the minimal one"
else
  build_interfaces tf2_msgs "$TF_SRC" "$TF_KEY"
fi
# --- 5. the launch system, for the tests -------------------------------------------------------
# Never copied into the repository: installed from the shared folder beside the clone.
LAUNCH_DIR="${LINGBOT_ROS2_LAUNCH_DIR:-$REPO/../shared/ros2-launch}"
LAUNCH_PYPI=(osrf-pycommon psutil argcomplete packaging)
if [ -f "$STAMPS/launch.key" ] || ! "$PY" -c 'import launch_ros' 2>/dev/null; then
  if [ -d "$LAUNCH_DIR/wheels" ] && [ -d "$LAUNCH_DIR/src/composition_interfaces" ]; then
    LAUNCH_DIR=$(cd "$LAUNCH_DIR" && pwd)
    COMP_SRC="$LAUNCH_DIR/src/composition_interfaces"
    LAUNCH_KEY=$(printf '%s\n' "$WHEELS_KEY" "${LAUNCH_PYPI[@]}" "$(key_of "$LAUNCH_DIR"/wheels/*.whl \
      "$COMP_SRC"/package.xml "$COMP_SRC"/CMakeLists.txt "$COMP_SRC"/srv/*.srv \
      "$REPO/scripts/setup_ros.sh")" | sha256sum | cut -c1-16)
    if [ "$(cat "$STAMPS/launch.key" 2>/dev/null)" != "$LAUNCH_KEY" ]; then
      log "installing the launch system (tests) from $LAUNCH_DIR"
      "$PY" -m pip install -q --no-index --no-deps "$LAUNCH_DIR"/wheels/*.whl
      "$PY" -m pip install -q "${LAUNCH_PYPI[@]}" 'pytest<9'
      rm -f "$STAMPS/launch.key"
      build_interfaces composition_interfaces "$COMP_SRC" "$LAUNCH_KEY"
      "$PY" -c 'import launch_ros.actions, launch_testing, composition_interfaces.srv'
      mv "$STAMPS/composition_interfaces.key" "$STAMPS/launch.key"
    fi
  else
    echo "setup_ros: no launch system ($LAUNCH_DIR/wheels missing, no ROS install): the" \
         "launch tests will be skipped" >&2
  fi
fi

"$PY" -c 'import rclpy, tf2_msgs.msg, lingbot_ros_interfaces.msg' || {
  echo "setup_ros.sh: the installed ROS packages do not import (see above)" >&2; exit 1; }
log "ROS 2 ready in $VENV"
