# Source on the GPU machine after scripts/gpu_env.sh, from the repository root:
#
#   source scripts/gpu_env.sh && source scripts/gpu_ros_env.sh
#
# Unpacks the ROS 2 bundle carried in .rosbundle/ (built by scripts/gpu_ros_bundle.sh) into
# $ROS_BUNDLE_DIR (default /tmp/ros312; skipped while the unpacked copy is of this same
# tarball) and sets up this shell so that the machine's own python3 (CPython 3.12, its own
# torch and numpy) runs ROS: PYTHONPATH, LD_LIBRARY_PATH, AMENT_PREFIX_PATH,
# RMW_IMPLEMENTATION (.rosbundle/env.sh), then ROS traffic kept on this machine:
# ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST and a random ROS_DOMAIN_ID (unless already set), the
# same for every process started from this shell. Ends with a check that rclpy imports.
_ros_repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
_ros_tar=$_ros_repo/.rosbundle/ros312.tar.xz
ROS_BUNDLE_DIR=${ROS_BUNDLE_DIR:-/tmp/ros312}
_ros_ok=1
if [ ! -f "$_ros_tar" ]; then
  echo "gpu_ros_env: no $_ros_tar (build it with scripts/gpu_ros_bundle.sh, carry .rosbundle)" >&2
  _ros_ok=0
else
  _ros_sum=$(sha256sum "$_ros_tar" | cut -c1-64)
  if [ "$(cat "$ROS_BUNDLE_DIR/.bundle_sha256" 2>/dev/null)" != "$_ros_sum" ]; then
    if [ -e "$ROS_BUNDLE_DIR" ] && [ ! -f "$ROS_BUNDLE_DIR/.bundle_sha256" ] &&
       [ -n "$(ls -A "$ROS_BUNDLE_DIR" 2>/dev/null)" ]; then
      echo "gpu_ros_env: $ROS_BUNDLE_DIR exists and is not an unpacked bundle: not touching it (set ROS_BUNDLE_DIR)" >&2
      _ros_ok=0
    else
      rm -rf "$ROS_BUNDLE_DIR" "$ROS_BUNDLE_DIR.part"
      mkdir -p "$ROS_BUNDLE_DIR.part"
      if tar -C "$ROS_BUNDLE_DIR.part" -xJf "$_ros_tar" --strip-components=1; then
        echo "$_ros_sum" > "$ROS_BUNDLE_DIR.part/.bundle_sha256"
        mv "$ROS_BUNDLE_DIR.part" "$ROS_BUNDLE_DIR"
      else
        echo "gpu_ros_env: unpacking $_ros_tar failed" >&2
        _ros_ok=0
      fi
    fi
  fi
fi
if [ "$_ros_ok" = 1 ]; then
  export ROS_BUNDLE_DIR
  # The bundle's own env.sh (the same as .rosbundle/env.sh).
  . "$ROS_BUNDLE_DIR/env.sh"
  export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
  export ROS_DOMAIN_ID=${ROS_DOMAIN_ID:-$((RANDOM % 100 + 1))}
  if ! "${ROS_PYTHON:-python3}" -c 'import rclpy, std_msgs.msg, lingbot_ros_interfaces.msg'; then
    echo "gpu_ros_env: the ROS bundle does not import (see above)" >&2
    _ros_ok=0
  else
    echo "gpu_ros_env: ROS 2 Kilted from $ROS_BUNDLE_DIR, ROS_DOMAIN_ID=$ROS_DOMAIN_ID, discovery LOCALHOST"
  fi
fi
[ "$_ros_ok" = 1 ]
_ros_rc=$?
unset _ros_repo _ros_tar _ros_sum _ros_ok
return $_ros_rc 2>/dev/null || exit $_ros_rc
