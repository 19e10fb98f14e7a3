"""What image intake costs the worker: the GIL time an rclpy executor takes per camera image.

    .venv/bin/python scripts/intake_gil.py [--frames 300] [--rate 30] [--rounds 5] \
        [--services 25] [--out intake_gil.json]

The node's worker runs the model in Python; every image the executor thread takes (DDS take,
deserialisation, the executor's own Python) holds the GIL meanwhile, and the worker waits.
This measures it without a GPU: a subscriber process with ``--services`` extra services (the
node has about 25: lifecycle, parameters, its own) takes 640x480 rgb8 images from a
publisher process at ``--rate``, while a Python thread of the same process counts fixed
chunks of pure-Python work. Its rate while the executor is idle (2 s, spinning with no
images) against its rate while images flow gives the share of the GIL the intake took, and
per image: ``gil_ms_per_image = (1 - share) * seconds / images`` (noisy on a busy machine:
compare medians of several rounds). ``executor_cpu_ms_per_image`` is the spinning thread's own
CPU time per image (take, deserialisation, the executor's Python: mostly under the GIL), the
steadier of the two.

Variants, each a fresh pair of processes, interleaved over ``--rounds`` (medians in the
JSON): the executor (``single``: rclpy's SingleThreadedExecutor, what the node runs;
``events``: rclpy.experimental.EventsExecutor) and the take (``message``: the Python
message; ``raw``: the serialized bytes). ROS traffic stays on loopback
(ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST, a random ROS_DOMAIN_ID per run).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time

os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"  # loopback only, also children

VARIANTS = [("single", "message"), ("single", "raw"), ("events", "message"), ("events", "raw")]
TOPIC = "intake_gil/image"
IDLE_S = 2.0  # the worker's rate with the executor idle


def _qos():
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    return QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)


def publish(frames: int, rate: float) -> None:
    """Wait for the subscriber (and its idle phase), then ``frames`` images at ``rate``."""
    import numpy as np
    import rclpy
    from sensor_msgs.msg import Image
    rclpy.init()
    node = rclpy.create_node("intake_gil_pub")
    pub = node.create_publisher(Image, TOPIC, _qos())
    msg = Image(height=480, width=640, encoding="rgb8", step=640 * 3)
    msg.data = np.random.default_rng(0).integers(0, 255, 480 * 640 * 3, np.uint8).tobytes()
    deadline = time.monotonic() + 60
    while pub.get_subscription_count() == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(IDLE_S + 1.0)  # the subscriber's idle phase runs meanwhile
    start = time.monotonic()
    for i in range(frames):
        time.sleep(max(0.0, start + i / rate - time.monotonic()))
        pub.publish(msg)
    time.sleep(1.0)
    node.destroy_node()
    rclpy.try_shutdown()


def subscribe(frames: int, executor: str, take: str, services: int) -> dict:
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.experimental import EventsExecutor
    from sensor_msgs.msg import Image
    from std_srvs.srv import Trigger
    rclpy.init()
    node = rclpy.create_node("intake_gil_sub")
    for i in range(services):
        node.create_service(Trigger, f"~/service_{i}", lambda req, resp: resp)
    got = {"n": 0, "first": None, "last": None}

    def on_image(_msg) -> None:
        now = time.perf_counter()
        got["first"] = got["first"] or now
        got["last"], got["n"] = now, got["n"] + 1

    node.create_subscription(Image, TOPIC, on_image, _qos(), raw=take == "raw")
    spin = EventsExecutor() if executor == "events" else SingleThreadedExecutor()
    spin.add_node(node)
    chunks = {"n": 0, "stop": False}

    def work() -> None:  # fixed chunks of pure-Python work, as the worker's host code
        while not chunks["stop"]:
            x = 0
            for i in range(20_000):
                x += i
            chunks["n"] += 1

    worker = threading.Thread(target=work)
    worker.start()
    t0, c0 = time.perf_counter(), chunks["n"]
    while time.perf_counter() - t0 < IDLE_S and got["n"] == 0:
        spin.spin_once(timeout_sec=0.05)
    idle_rate = (chunks["n"] - c0) / (time.perf_counter() - t0)
    while got["n"] == 0:
        spin.spin_once(timeout_sec=0.5)
    t1, c1, cpu1 = got["first"], chunks["n"], time.thread_time()
    deadline = time.monotonic() + frames / 5 + 60
    while got["n"] < frames and time.monotonic() < deadline:
        spin.spin_once(timeout_sec=0.5)
    seconds, busy_chunks = got["last"] - t1, chunks["n"] - c1
    executor_cpu = time.thread_time() - cpu1  # this (the spinning) thread's CPU time
    chunks["stop"] = True
    worker.join()
    images = got["n"] - 1  # those after the first, within [first, last]
    share = busy_chunks / seconds / idle_rate
    spin.shutdown()
    node.destroy_node()
    rclpy.try_shutdown()
    return {"executor": executor, "take": take, "images": images, "seconds": seconds,
            "worker_share": share, "gil_ms_per_image": (1 - share) * seconds / images * 1e3,
            "executor_cpu_ms_per_image": executor_cpu / images * 1e3}


def run_pair(args, executor: str, take: str) -> dict:
    env = {**os.environ, "ROS_DOMAIN_ID": str(random.randint(1, 101))}
    me = [sys.executable, os.path.abspath(__file__)]
    pub = subprocess.Popen(me + ["--role", "pub", "--frames", str(args.frames),
                                 "--rate", str(args.rate)], env=env)
    try:
        out = subprocess.run(me + ["--role", "sub", "--frames", str(args.frames),
                                   "--executor", executor, "--take", take,
                                   "--services", str(args.services)],
                             env=env, capture_output=True, text=True, timeout=600)
    finally:
        pub.wait(timeout=120)
    if out.returncode != 0:
        raise RuntimeError(f"subscriber {executor}/{take} failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--role", choices=("driver", "pub", "sub"), default="driver")
    p.add_argument("--frames", type=int, default=300)
    p.add_argument("--rate", type=float, default=30.0)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--services", type=int, default=25)
    p.add_argument("--executor", choices=("single", "events"), default="single")
    p.add_argument("--take", choices=("message", "raw"), default="message")
    p.add_argument("--out", help="JSON output file (default: stdout only)")
    args = p.parse_args(argv)
    if args.role == "pub":
        publish(args.frames, args.rate)
        return 0
    if args.role == "sub":
        print(json.dumps(subscribe(args.frames, args.executor, args.take, args.services)))
        return 0
    runs = {f"{e}/{t}": [] for e, t in VARIANTS}
    for _ in range(args.rounds):
        for executor, take in VARIANTS:
            runs[f"{executor}/{take}"].append(run_pair(args, executor, take))
    summary = {name: {"gil_ms_per_image_median": statistics.median(r["gil_ms_per_image"]
                                                                   for r in rs),
                      "worker_share_median": statistics.median(r["worker_share"] for r in rs),
                      "executor_cpu_ms_per_image_median": statistics.median(
                          r["executor_cpu_ms_per_image"] for r in rs),
                      "images_median": statistics.median(r["images"] for r in rs)}
               for name, rs in runs.items()}
    result = {"settings": {k: getattr(args, k) for k in ("frames", "rate", "rounds",
                                                         "services")},
              "image": "640x480 rgb8 (921,600 bytes)", "summary": summary, "runs": runs}
    text = json.dumps(result, indent=1)
    if args.out:
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, args.out)
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
