"""Run inside the throwaway cv-bridge venv (see test_cv_bridge_parity.py): decode and encode every
case with cv_bridge and with lingbot_ros.ros.intake.convert, print one JSON line of results."""
import json
import sys

import numpy as np

from cv_bridge import CvBridge
from lingbot_ros.ros.intake.convert import ENCODINGS, ImageRejected, array_to_image, image_to_array


def case(encoding: str, big_endian: bool) -> dict:
    fmt = ENCODINGS[encoding]
    shape = (5, 7) if fmt.channels == 1 else (5, 7, fmt.channels)
    array = np.random.default_rng(0).integers(0, np.iinfo(fmt.dtype).max, shape, dtype=fmt.dtype,
                                              endpoint=True)
    msg = array_to_image(array, encoding)
    if big_endian:
        msg.data = array.astype(array.dtype.newbyteorder(">")).tobytes()
        msg.is_bigendian = 1
    out = {}
    ours = image_to_array(msg, backend="numpy")
    out["numpy_ok"] = bool(np.array_equal(ours, array))
    try:
        theirs = np.asarray(CvBridge().imgmsg_to_cv2(msg, desired_encoding="passthrough"))
        out["decode_equal"] = bool(theirs.shape == ours.shape and theirs.dtype.itemsize ==
                                   ours.dtype.itemsize and np.array_equal(theirs, ours))
    except Exception as err:  # noqa: BLE001 -- reported, judged by the test
        out["decode_error"] = f"{type(err).__name__}: {err}"
    try:
        out["backend_equal"] = bool(np.array_equal(image_to_array(msg, backend="cv_bridge"), ours))
    except ImageRejected as err:
        out["backend_rejected"] = err.reason
    if not big_endian:
        try:
            theirs = CvBridge().cv2_to_imgmsg(array, encoding=encoding)
            fields = ("height", "width", "step", "encoding", "is_bigendian")
            out["encode_equal"] = all(getattr(theirs, f) == getattr(msg, f) for f in fields) \
                and bytes(theirs.data) == bytes(msg.data)
        except Exception as err:  # noqa: BLE001
            out["encode_error"] = f"{type(err).__name__}: {err}"
    return out


if __name__ == "__main__":
    results = {f"{e}{'/be' if be else ''}": case(e, be) for e in ENCODINGS for be in (False, True)
               if not (be and ENCODINGS[e].dtype == "uint8")}
    print(json.dumps({"numpy": np.__version__, "results": results}))
    sys.exit(0)
