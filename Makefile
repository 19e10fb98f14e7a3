# Two entry points (README "Quick start"): `make demo` and `make test`. Both create .venv on
# first use and are idempotent: the venv is rebuilt only when the install inputs change.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.lingbot_ros-installed
# CPU build, installed from the local wheel on dev/CI machines; override for a CUDA build.
TORCH_SPEC ?= torch==2.13.0
PYTEST_ARGS ?=
# The loop-closure pose graph (lingbot_ros/loop). --no-deps: gtsam 4.3.0 declares pytest>=9
# (which it does not import) against our pytest<9; 4.2.x wheels need numpy<2.
GTSAM_SPEC ?= gtsam==4.3.0

# ROS traffic stays on loopback, in a random domain (ROS_LOCALHOST_ONLY alone still multicasts).
export ROS_AUTOMATIC_DISCOVERY_RANGE := LOCALHOST
export ROS_DOMAIN_ID ?= $(shell python3 -c 'import random; print(random.randint(1, 100))')
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: demo demo-offline test soak venv ros browser bench-cache clean

venv: $(STAMP) ros

$(STAMP): setup.py setup.cfg package.xml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[test,fleet,view]"
	$(PY) -m pip install -q --no-deps "$(GTSAM_SPEC)"
	touch $@

# ROS 2 Kilted from pip wheels + our interface package, built into the venv; for the tests also
# the real launch system (launch, launch_ros, launch_testing, ros2 CLI) from ../shared/ros2-launch
# (never copied into the repo; without it, or a sourced ROS install, tests/launch skips).
# Idempotent and cheap when nothing changed (it keeps its own stamps, keyed on its inputs).
ros: $(STAMP)
	bash scripts/setup_ros.sh $(VENV)

# The node on a synthetic rosbag2 (ROS traffic on loopback, random domain), in metres: its
# scale locks on the bag's aligned depth (scale.source: depth); the summary ends with it.
demo: venv
	$(PY) -m lingbot_ros.clients.demo

# The same pipeline without ROS: lingbot-ros-offline on a synthetic bag.
demo-offline: venv
	$(PY) -m lingbot_ros.tools.offline.demo

# Chromium from the distribution's packages, for the viewer's browser test (idempotent: a
# no-op when one is installed; under CI a Chromium it cannot install fails the run).
browser:
	bash scripts/setup_browser.sh

# pytest exits 5 when it collects nothing (e.g. a -k filter that matches no test): say so.
test: venv browser
	@rc=0; $(PY) -m pytest $(PYTEST_ARGS) || rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests"; exit 1; fi; exit $$rc

# 10 minutes of load on the node over DDS (loopback): 2x its processing rate, every
# consumer subscribed, a reset every 10 s; per-minute poses/s, RSS, drops, reset latency.
SOAK_MINUTES ?= 10
soak: venv
	$(PY) scripts/soak.py --minutes $(SOAK_MINUTES) --out soak.json

bench-cache: venv
	$(PY) -m lingbot_ros.tools.bench.cache_cost

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
