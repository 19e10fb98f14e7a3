"""Stored place maps (loop/place_map.py, loop/map_folder.py): a bit-exact round trip, every
refusal with its reason, the atomic replace of our own folder only, the database rebuilt
whole, metres."""
import hashlib
import json
import os

import numpy as np
import pytest

from lingbot_ros.geometry import rotation_exp
from lingbot_ros.loop.config import LoopConfig
from lingbot_ros.loop.map_folder import MANIFEST, MARKER
from lingbot_ros.loop.place_db import PlaceDatabase
from lingbot_ros.loop.place_map import (MapNotReplaced, PlaceMap, PlaceMapError, database_from,
                                       place_map_from, read_place_map, to_metres,
                                       write_place_map)

H, W = 24, 32
K = np.array([[30.0, 0.0, 15.5], [0.0, 30.0, 11.5], [0.0, 0.0, 1.0]])


def pose(rotvec, t) -> np.ndarray:
    out = np.eye(4)
    out[:3, :3] = rotation_exp(np.asarray(rotvec, float))
    out[:3, 3] = t
    return out


def database(n: int = 6, seed: int = 0) -> PlaceDatabase:
    rng = np.random.default_rng(seed)
    db = PlaceDatabase(LoopConfig(), image_stride=2, depth_stride=4)
    for i in range(n):
        db.add(10 + i, 1_000_000_000 * (i + 1), pose(rng.normal(0, 0.3, 3), (2.0 * i, 0, 0)),
               i // 3, rng.standard_normal(256), rng.integers(0, 256, (H, W, 3), np.uint8),
               rng.uniform(0.5, 8.0, (H, W)))
    return db


def optimised(db: PlaceDatabase, seed: int = 1) -> dict:
    rng = np.random.default_rng(seed)
    return {int(i): pose(rng.normal(0, 0.5, 3), rng.normal(0, 3, 3)) for i in db.ids()}


def a_map(**kw) -> PlaceMap:
    db = database()
    return place_map_from(db, optimised(db), units=kw.pop("units", "model"),
                          intrinsics={int(i): K for i in db.ids()}, **kw)


FIELDS = ("ids", "stamps_ns", "segments", "poses", "codes", "desc_scales", "image_hw",
          "depth_hw", "images", "depths", "K")
HEADER = ("map_id", "frame_id", "created_ns", "units", "scale", "scale_source",
          "descriptor_version", "image_stride", "depth_stride")


def assert_same(a: PlaceMap, b: PlaceMap) -> None:
    for name in HEADER:
        assert getattr(a, name) == getattr(b, name), name
    for name in FIELDS:
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and x.shape == y.shape, name
        assert x.tobytes() == y.tobytes(), name  # bit-exact


def test_round_trip_is_bit_exact(tmp_path):
    m = a_map()
    write_place_map(tmp_path / "lab", m)
    assert sorted(os.listdir(tmp_path)) == ["lab"]  # no temporary left
    back = read_place_map(tmp_path / "lab")
    assert_same(m, back)
    manifest = json.loads((tmp_path / "lab" / MANIFEST).read_text())
    assert manifest["units"] == "model" and manifest["scale"] is None
    assert manifest["keyframes"] == 6 and "K.npy" in manifest["files"]
    for name, entry in manifest["files"].items():
        assert hashlib.sha256((tmp_path / "lab" / name).read_bytes()).hexdigest() \
            == entry["sha256"]
    np.testing.assert_array_equal(back.depth(2), database().get(12).depth)
    np.testing.assert_array_equal(back.image(5), database().get(15).image)


def test_the_map_holds_the_optimised_poses_and_the_database_comes_back_whole(tmp_path):
    db = database()
    poses = optimised(db)
    m = place_map_from(db, poses, units="model")
    assert m.K is None
    write_place_map(tmp_path / "m", m)
    back = database_from(read_place_map(tmp_path / "m"), LoopConfig())
    assert list(back.ids()) == list(db.ids())
    for i in db.ids():
        a, b = db.get(int(i)), back.get(int(i))
        np.testing.assert_array_equal(b.pose, poses[int(i)])
        assert b.descriptor.tobytes() == a.descriptor.tobytes()
        assert b.depth.tobytes() == a.depth.tobytes() and b.image.tobytes() == a.image.tobytes()
        assert (b.stamp_ns, b.segment, b.image_hw, b.depth_hw) == (a.stamp_ns, a.segment,
                                                                    a.image_hw, a.depth_hw)
    # retrieval finds a stored descriptor first
    assert back.candidates(db.get(13).descriptor, 1 << 62)[0].keyframe_id == 13


def test_no_thinning_on_load():
    db = PlaceDatabase(LoopConfig(min_keyframe_distance_m=0, min_keyframe_angle_deg=0))
    rng = np.random.default_rng(3)
    for i in range(3):  # three keyframes at one pose: a thinning database would keep one
        db.add(i, i, np.eye(4), 0, rng.standard_normal(256),
               rng.integers(0, 256, (H, W, 3), np.uint8), np.ones((H, W)))
    m = place_map_from(db, {i: np.eye(4) for i in range(3)}, units="model")
    assert len(database_from(m, LoopConfig())) == 3  # default thinning is on


def test_metres(tmp_path):
    m = a_map()
    metric = to_metres(m, 0.25, "scale.locked:depth_prior")
    assert (metric.units, metric.scale, metric.scale_source) == ("m", 0.25,
                                                                 "scale.locked:depth_prior")
    np.testing.assert_array_equal(metric.poses[:, :3, 3], m.poses[:, :3, 3] * 0.25)
    np.testing.assert_array_equal(metric.poses[:, :3, :3], m.poses[:, :3, :3])
    np.testing.assert_array_equal(metric.depths, (m.depths * 0.25).astype(np.float16))
    np.testing.assert_array_equal(metric.K, m.K)
    write_place_map(tmp_path / "m", metric)
    manifest = json.loads((tmp_path / "m" / MANIFEST).read_text())
    assert (manifest["units"], manifest["scale"], manifest["scale_source"]) == (
        "m", 0.25, "scale.locked:depth_prior")
    assert_same(metric, read_place_map(tmp_path / "m"))
    with pytest.raises(ValueError, match="already in 'm'"):
        to_metres(metric, 2.0, "again")
    with pytest.raises(ValueError, match="metres_per_unit"):
        to_metres(m, 0.0, "x")
    with pytest.raises(ValueError, match="scale"):
        a_map(units="m")  # metres without a scale


def test_bad_input_to_the_builders():
    db = database()
    poses = optimised(db)
    del poses[12]
    with pytest.raises(ValueError, match="keyframe 12"):
        place_map_from(db, poses, units="model")
    with pytest.raises(ValueError, match="units"):
        place_map_from(db, optimised(db), units="feet")
    with pytest.raises(ValueError, match="no K for keyframe 10"):
        place_map_from(db, optimised(db), units="model", intrinsics={})
    with pytest.raises(ValueError, match="map_id"):
        a_map(map_id="lab-1")


# -- refusals ---------------------------------------------------------------------------------
@pytest.fixture
def saved(tmp_path):
    return write_place_map(tmp_path / "map", a_map())


def reseal(folder, manifest: dict) -> None:
    """Rewrite the manifest and the marker's digest of it (a consistent edit)."""
    text = json.dumps(manifest).encode()
    (folder / MANIFEST).write_bytes(text)
    head = (folder / MARKER).read_text().splitlines()[0]
    (folder / MARKER).write_text(f"{head}\nmanifest-sha256 {hashlib.sha256(text).hexdigest()}\n")


def test_a_flipped_byte_is_refused(saved):
    blob = bytearray((saved / "depths.npy").read_bytes())
    blob[-3] ^= 0x01
    (saved / "depths.npy").write_bytes(bytes(blob))
    with pytest.raises(PlaceMapError, match="depths.npy does not match its SHA-256"):
        read_place_map(saved)


def test_a_flipped_byte_in_the_manifest_is_refused(saved):
    text = (saved / MANIFEST).read_bytes().replace(b'"model"', b'"modem"')
    (saved / MANIFEST).write_bytes(text)
    with pytest.raises(PlaceMapError, match="does not match the checksum"):
        read_place_map(saved)


def test_a_missing_or_truncated_file_is_refused(saved):
    blob = (saved / "poses.npy").read_bytes()
    (saved / "poses.npy").write_bytes(blob[:-8])
    with pytest.raises(PlaceMapError, match="poses.npy has .* bytes, the manifest says .*"
                                            "truncated"):
        read_place_map(saved)
    (saved / "poses.npy").unlink()
    with pytest.raises(PlaceMapError, match="the file poses.npy is missing"):
        read_place_map(saved)


def test_a_foreign_folder_is_refused(tmp_path, saved):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / MANIFEST).write_text("{}")
    with pytest.raises(PlaceMapError, match="no lingbot_ros_place_map marker"):
        read_place_map(foreign)
    (foreign / MARKER).write_text("lingbot_ros.stream_snapshot 2\n")
    with pytest.raises(PlaceMapError, match="not a lingbot_ros place map"):
        read_place_map(foreign)
    (saved / MARKER).write_text("lingbot_ros.place_map 1\nwriting\n")
    with pytest.raises(PlaceMapError, match="unfinished"):
        read_place_map(saved)
    with pytest.raises(PlaceMapError, match="nothing at that path"):
        read_place_map(tmp_path / "none")


def test_symlinks_are_refused(tmp_path, saved):
    os.rename(saved / "codes.npy", tmp_path / "codes.npy")
    os.symlink(tmp_path / "codes.npy", saved / "codes.npy")
    with pytest.raises(PlaceMapError, match="codes.npy.*symlink"):
        read_place_map(saved)
    os.symlink(saved, tmp_path / "link")
    with pytest.raises(PlaceMapError, match="a symlink, not a folder"):
        read_place_map(tmp_path / "link")


def test_a_newer_schema_is_refused(saved):
    manifest = json.loads((saved / MANIFEST).read_text())
    manifest["version"] = 2
    reseal(saved, manifest)
    with pytest.raises(PlaceMapError, match="version 2; this build reads"):
        read_place_map(saved)
    (saved / MARKER).write_text("lingbot_ros.place_map 2\nwriting\n")
    with pytest.raises(PlaceMapError, match="format version 2 is unknown"):
        read_place_map(saved)


def test_schema_breaches_are_refused(saved):
    good = json.loads((saved / MANIFEST).read_text())
    for edit, reason in ((lambda m: m["files"].update({"../x.npy": m["files"]["K.npy"]}),
                          "not this schema's"),
                         (lambda m: m["files"].pop("ids.npy"), "not this schema's"),
                         (lambda m: m.update(units="furlongs"), "units"),
                         (lambda m: m.update(keyframes=7), "keyframes 7"),
                         (lambda m: m["files"]["ids.npy"].update(shape=[7]), "the manifest"
                                                                             " says")):
        manifest = json.loads(json.dumps(good))
        edit(manifest)
        reseal(saved, manifest)
        with pytest.raises(PlaceMapError, match=reason):
            read_place_map(saved)
    # a consistent file of the wrong dtype: the schema, not the digest, refuses it
    manifest = json.loads(json.dumps(good))
    ids = np.load(saved / "ids.npy").astype(np.int32)
    np.save(saved / "ids.npy", ids)
    blob = (saved / "ids.npy").read_bytes()
    manifest["files"]["ids.npy"].update(dtype=ids.dtype.str, bytes=len(blob),
                                        sha256=hashlib.sha256(blob).hexdigest())
    reseal(saved, manifest)
    with pytest.raises(PlaceMapError, match="breaks its schema: PlaceMap.ids must be int64"):
        read_place_map(saved)


def test_an_object_array_is_never_unpickled(saved):
    manifest = json.loads((saved / MANIFEST).read_text())
    np.save(saved / "ids.npy", np.array([{"x": 1}] * 6, dtype=object), allow_pickle=True)
    blob = (saved / "ids.npy").read_bytes()
    manifest["files"]["ids.npy"].update(bytes=len(blob), sha256=hashlib.sha256(blob).hexdigest())
    reseal(saved, manifest)
    with pytest.raises(PlaceMapError, match="not a numpy array file.*pickle"):
        read_place_map(saved)


# -- replacing --------------------------------------------------------------------------------
def test_only_our_own_folder_is_replaced(tmp_path, saved):
    second = a_map()
    write_place_map(saved, second)  # a complete map of ours: replaced in one step
    assert read_place_map(saved).map_id == second.map_id
    assert sorted(os.listdir(tmp_path)) == ["map"]
    empty = tmp_path / "empty"
    empty.mkdir()
    write_place_map(empty, second)
    foreign = tmp_path / "home"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(MapNotReplaced, match="no lingbot_ros_place_map marker"):
        write_place_map(foreign, second)
    assert os.listdir(foreign) == ["notes.txt"]
    (saved / "extra.txt").write_text("mine")
    with pytest.raises(MapNotReplaced, match="also holds files not of the map"):
        write_place_map(saved, second)
    (saved / "extra.txt").unlink()
    (saved / "ids.npy").write_bytes(b"x")  # a corrupted map of ours is still ours by digest
    write_place_map(saved, second)
    file = tmp_path / "file"
    file.write_text("x")
    with pytest.raises(MapNotReplaced, match="a regular file"):
        write_place_map(file, second)
    assert sorted(p for p in os.listdir(tmp_path) if p.startswith(".")) == []


def test_a_killed_saves_temporary_is_swept_and_one_not_ours_is_left(tmp_path, saved):
    stale = tmp_path / ".map.0123456789ab.tmp"
    stale.mkdir()
    (stale / MARKER).write_text("lingbot_ros.place_map 1\nwriting\n")
    other = tmp_path / ".map.ba9876543210.tmp"  # not ours: no marker
    other.mkdir()
    write_place_map(saved, a_map())
    assert not stale.exists() and other.exists()
