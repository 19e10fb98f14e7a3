"""lingbot_ros.image_header: the size every format declares is read from its header and checked
before anything is decoded; unknown formats and broken headers are refused; a decoded size
must be the declared one. Real images come from cv2.imencode (or, where OpenCV writes no such
variant, from a few lines here that OpenCV then decodes); bombs are hand-made headers, and in
their tests ``cv2.imdecode`` is replaced by a function that fails the test if it is called."""
from __future__ import annotations

import struct

import cv2
import numpy as np
import pytest

from lingbot_ros.image_decode import OPENCV_ENCODINGS, ImageRejected, opencv_encoding
from lingbot_ros.image_header import FORMATS, ImageHeader, decode_compressed, read_header
from lingbot_ros.preprocess import preprocess

H, W = 37, 53  # odd, unequal: a swapped width and height shows
BOMB = 16000  # 16000 x 16000 = 256 megapixels declared
LIMIT = 4096 * 4096  # the node's default max_image_pixels

RNG = np.random.default_rng(0)
BGR = RNG.integers(0, 256, (H, W, 3), dtype=np.uint8)
BGRA = np.dstack([BGR, RNG.integers(0, 256, (H, W), dtype=np.uint8)])
GRAY = BGR[..., 0].copy()


def encode(ext: str, image: np.ndarray, *params: int) -> bytes:
    ok, buf = cv2.imencode(ext, image, list(params))
    assert ok, ext
    return buf.tobytes()


# --- hand-made encodings (variants cv2.imencode does not write) -------------------------------

def vp8l_constant(width: int, height: int, bgra=(10, 20, 30, 255)) -> bytes:
    """A complete lossless WebP of one colour: every prefix code has a single symbol, so the
    pixels take no bits at all and a few dozen bytes decode to ``width x height`` (real,
    decodable: the 16000 x 16000 one allocates over 1 GB in cv2.imdecode)."""
    bits: list[int] = []

    def put(value: int, n: int) -> None:
        bits.extend((value >> i) & 1 for i in range(n))

    put(width - 1, 14), put(height - 1, 14), put(0, 1), put(0, 3)  # size, no alpha, version 0
    put(0, 1), put(0, 1), put(0, 1)  # no transform, no colour cache, no meta prefix codes
    b, g, r, a = bgra
    for symbol in (g, r, b, a, 0):  # green, red, blue, alpha, distance: one symbol each
        put(1, 1), put(0, 1)  # simple code, one symbol
        if symbol < 2:
            put(0, 1), put(symbol, 1)
        else:
            put(1, 1), put(symbol, 8)
    payload = bytes([0x2F]) + bytes(sum(bit << k for k, bit in enumerate(bits[i:i + 8]))
                                    for i in range(0, len(bits), 8)) + bytes(8)
    payload += b"\0" * (len(payload) % 2)
    chunk = b"VP8L" + struct.pack("<I", len(payload)) + payload
    return b"RIFF" + struct.pack("<I", 4 + len(chunk)) + b"WEBP" + chunk


def vp8x_wrap(simple_webp: bytes, width: int, height: int, xmp: bytes = b"") -> bytes:
    """A simple WebP's bitstream chunk in an extended (VP8X) file of canvas ``width x height``,
    optionally with an XMP metadata chunk."""
    body = (b"VP8X" + struct.pack("<I", 10) + bytes([0x04 if xmp else 0, 0, 0, 0])
            + (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
            + simple_webp[12:])
    if xmp:
        body += b"XMP " + struct.pack("<I", len(xmp)) + xmp + b"\0" * (len(xmp) % 2)
    return b"RIFF" + struct.pack("<I", 4 + len(body)) + b"WEBP" + body


def tiff_gray(image: np.ndarray, order: str = "<", bigtiff: bool = False,
              long_size: bool = False) -> bytes:
    """An uncompressed 8-bit grey baseline TIFF in byte order ``order`` ('<' II, '>' MM),
    classic or BigTIFF; ImageWidth/ImageLength as SHORT or LONG."""
    height, width = image.shape
    size_type = 4 if long_size else 3
    data_at = 16 if bigtiff else 8
    ifd_at = data_at + width * height + (width * height) % 2
    tags = [(256, size_type, width), (257, size_type, height), (258, 3, 8), (259, 3, 1),
            (262, 3, 1), (273, 4, data_at), (277, 3, 1), (278, 4, height),
            (279, 4, width * height)]
    if bigtiff:
        head = (b"II" if order == "<" else b"MM") + struct.pack(order + "HHHQ", 43, 8, 0,
                                                                   ifd_at)
        entries = struct.pack(order + "Q", len(tags))
        for tag, kind, value in tags:
            packed = struct.pack(order + ("H" if kind == 3 else "I"), value)
            entries += struct.pack(order + "HHQ", tag, kind, 1) + packed.ljust(8, b"\0")
        entries += struct.pack(order + "Q", 0)
    else:
        head = (b"II" if order == "<" else b"MM") + struct.pack(order + "HI", 42, ifd_at)
        entries = struct.pack(order + "H", len(tags))
        for tag, kind, value in tags:
            packed = struct.pack(order + ("H" if kind == 3 else "I"), value)
            entries += struct.pack(order + "HHI", tag, kind, 1) + packed.ljust(4, b"\0")
        entries += struct.pack(order + "I", 0)
    pixels = image.tobytes() + b"\0" * ((width * height) % 2)
    return head + pixels + entries


def jp2_codestream(jp2: bytes) -> bytes:
    """The raw J2K codestream inside a JP2 file (its jp2c box)."""
    pos = 0
    while pos < len(jp2):
        size, kind = struct.unpack_from(">I4s", jp2, pos)
        if kind == b"jp2c":
            return jp2[pos + 8:pos + size if size else len(jp2)]
        pos += size
    raise AssertionError("no jp2c box")


def box(kind: bytes, payload: bytes, full: bool = False) -> bytes:
    payload = (b"\0\0\0\0" if full else b"") + payload
    return struct.pack(">I", 8 + len(payload)) + kind + payload


def avif_header(width: int, height: int, sequence: bool = False) -> bytes:
    """An AVIF file's boxes up to its item properties: primary item 1 with an ispe of
    ``width x height`` (no image data: for header tests only)."""
    ftyp = box(b"ftyp", b"avif" + bytes(4) + b"avifmif1miaf")
    ipco = box(b"ipco", box(b"ispe", struct.pack(">II", width, height), full=True))
    ipma = box(b"ipma", struct.pack(">IHBB", 1, 1, 1, 0x81), full=True)  # item 1: property 1
    meta = box(b"meta", box(b"hdlr", bytes(4) + b"pict" + bytes(13), full=True)
               + box(b"pitm", struct.pack(">H", 1), full=True)
               + box(b"iprp", ipco + ipma), full=True)
    return ftyp + meta + (box(b"moov", bytes(8)) if sequence else b"") + box(b"mdat", bytes(16))


def patch_jpeg_size(jpeg: bytes, width: int, height: int) -> bytes:
    """A real JPEG whose SOF segment declares another size."""
    pos = 2
    while True:
        marker, length = jpeg[pos + 1], struct.unpack_from(">H", jpeg, pos + 2)[0]
        if 0xC0 <= marker <= 0xC2:
            return jpeg[:pos + 5] + struct.pack(">HH", height, width) + jpeg[pos + 9:]
        pos += 2 + length


def png_header(width: int, height: int) -> bytes:
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I4sIIBBBBB", 13, b"IHDR", width, height, 8, 2,
                                              0, 0, 0) + bytes(4)


def vp8_header(width: int, height: int) -> bytes:
    """A lossy WebP's RIFF and VP8 frame header (key frame) declaring ``width x height``."""
    frame = bytes([0x10, 0x02, 0x00]) + b"\x9d\x01\x2a" + struct.pack("<HH", width, height)
    chunk = b"VP8 " + struct.pack("<I", len(frame) + 20) + frame + bytes(20)
    return b"RIFF" + struct.pack("<I", 4 + len(chunk)) + b"WEBP" + chunk


# --- real images of every format --------------------------------------------------------------

def samples() -> list[tuple[str, str, bytes, object]]:
    """(id, format, data, expected (shape, encoding) or the reason decoding refuses it)."""
    b16 = BGR.astype(np.uint16) * 257
    jp2 = encode(".jp2", BGR)
    out = [
        ("jpeg", "jpeg", encode(".jpg", BGR), ((H, W, 3), "bgr8")),
        ("jpeg-gray", "jpeg", encode(".jpg", GRAY), ((H, W), "mono8")),
        ("png", "png", encode(".png", BGR), ((H, W, 3), "bgr8")),
        ("png-gray", "png", encode(".png", GRAY), ((H, W), "mono8")),
        ("png-bgra", "png", encode(".png", BGRA), ((H, W, 4), "bgra8")),
        ("png-16", "png", encode(".png", b16), ((H, W, 3), "bgr16")),
        ("png-16-bgra", "png", encode(".png", np.dstack([b16, b16[..., :1]])),
         ((H, W, 4), "bgra16")),
        ("png-mono16", "png", encode(".png", b16[..., 0].copy()), ((H, W), "mono16")),
        ("webp-vp8", "webp", encode(".webp", BGR, cv2.IMWRITE_WEBP_QUALITY, 80),
         ((H, W, 3), "bgr8")),
        ("webp-vp8l", "webp", encode(".webp", BGR, cv2.IMWRITE_WEBP_QUALITY, 101),
         ((H, W, 3), "bgr8")),
        ("webp-vp8x", "webp", encode(".webp", BGRA, cv2.IMWRITE_WEBP_QUALITY, 80),
         ((H, W, 4), "bgra8")),
        ("webp-vp8x-xmp", "webp", vp8x_wrap(vp8l_constant(W, H), W, H, b"<x/>" * 9),
         ((H, W, 3), "bgr8")),
        ("webp-constant", "webp", vp8l_constant(W, H), ((H, W, 3), "bgr8")),
        ("bmp", "bmp", encode(".bmp", BGR), ((H, W, 3), "bgr8")),
        ("bmp-gray", "bmp", encode(".bmp", GRAY), ((H, W), "mono8")),
        ("bmp-bgra", "bmp", encode(".bmp", BGRA), ((H, W, 4), "bgra8")),
        ("ppm", "pnm", encode(".ppm", BGR), ((H, W, 3), "bgr8")),
        ("pgm", "pnm", encode(".pgm", GRAY), ((H, W), "mono8")),
        ("pgm-16", "pnm", encode(".pgm", b16[..., 0].copy()), ((H, W), "mono16")),
        ("pbm", "pnm", encode(".pbm", GRAY), ((H, W), "mono8")),
        ("pgm-comments", "pnm", b"P5\n# made by hand 999 888\n%d # width\n# 7 7\n%d\n255\n"
         % (W, H) + GRAY.tobytes(), ((H, W), "mono8")),
        ("pgm-ascii", "pnm", b"P2 %d %d 255\n" % (W, H)
         + b" ".join(b"%d" % v for v in GRAY.reshape(-1)) + b"\n", ((H, W), "mono8")),
        ("pam", "pam", encode(".pam", BGR), ((H, W, 3), "bgr8")),
        ("pfm", "pfm", encode(".pfm", BGR.astype(np.float32)), "unknown_encoding"),
        ("tiff", "tiff", encode(".tiff", BGR), ((H, W, 3), "bgr8")),
        ("tiff-16", "tiff", encode(".tiff", b16), ((H, W, 3), "bgr16")),
        ("tiff-le-short", "tiff", tiff_gray(GRAY, "<"), ((H, W), "mono8")),
        ("tiff-be-short", "tiff", tiff_gray(GRAY, ">"), ((H, W), "mono8")),
        ("tiff-be-long", "tiff", tiff_gray(GRAY, ">", long_size=True), ((H, W), "mono8")),
        ("bigtiff-le", "tiff", tiff_gray(GRAY, "<", bigtiff=True, long_size=True),
         ((H, W), "mono8")),
        ("bigtiff-be", "tiff", tiff_gray(GRAY, ">", bigtiff=True), ((H, W), "mono8")),
        ("gif", "gif", encode(".gif", BGR), ((H, W, 3), "bgr8")),
        ("sunras", "sunras", encode(".ras", BGR), ((H, W, 3), "bgr8")),
        ("hdr", "hdr", encode(".hdr", BGR.astype(np.float32) / 255), "unknown_encoding"),
        ("jp2", "jpeg2000", jp2, ((H, W, 3), "bgr8")),
        ("jp2-16", "jpeg2000", encode(".jp2", b16), ((H, W, 3), "bgr16")),
        ("j2k", "jpeg2000", jp2_codestream(jp2), ((H, W, 3), "bgr8")),
    ]
    try:
        out.append(("avif", "avif", encode(".avif", BGR), ((H, W, 3), "bgr8")))
    except (cv2.error, AssertionError):  # an OpenCV built without an AVIF encoder
        pass
    return out


SAMPLES = samples()


@pytest.mark.parametrize("name, fmt, data, expected", SAMPLES, ids=[s[0] for s in SAMPLES])
def test_every_format_has_its_size_read_and_decodes(name, fmt, data, expected):
    assert read_header(data) == ImageHeader(fmt, W, H)
    if isinstance(expected, str):  # decodes, but to a type no encoding names (float32)
        with pytest.raises(ImageRejected) as err:
            decode_compressed(data, max_pixels=LIMIT)
        assert err.value.reason == expected
        return
    array, encoding = decode_compressed(data, max_pixels=LIMIT)
    assert (array.shape, encoding) == expected
    # Every accepted format, any container of the bytes: the same pixels.
    for container in (bytearray(data), np.frombuffer(data, np.uint8), memoryview(data)):
        again, _ = decode_compressed(container, max_pixels=LIMIT)
        np.testing.assert_array_equal(again, array)
    # The limit is on the declared size: one pixel less and it is refused, undecoded.
    with pytest.raises(ImageRejected, match=f"declares {W}x{H}") as err:
        decode_compressed(data, max_pixels=W * H - 1)
    assert err.value.reason == "too_large"
    assert preprocess(array, encoding)[0].shape[0] == 3  # feeds preprocess as it is


def test_lossless_formats_keep_the_pixels():
    for ext in (".png", ".bmp", ".ppm", ".tiff", ".webp", ".pam", ".ras"):
        params = [cv2.IMWRITE_WEBP_QUALITY, 101] if ext == ".webp" else []
        array, encoding = decode_compressed(encode(ext, BGR, *params), max_pixels=LIMIT)
        np.testing.assert_array_equal(array, BGR, err_msg=ext)
    for order in ("<", ">"):
        array, _ = decode_compressed(tiff_gray(GRAY, order), max_pixels=LIMIT)
        np.testing.assert_array_equal(array, GRAY)


def test_every_format_is_covered():
    assert {fmt for _, fmt, _, _ in SAMPLES} >= set(FORMATS) - {"avif"}


# --- bombs: refused from the header, never decoded -----------------------------------------

@pytest.fixture
def no_decoding(monkeypatch):
    """cv2.imdecode fails the test if anything reaches it."""
    def imdecode(*args, **kwargs):
        raise AssertionError("cv2.imdecode was called")
    monkeypatch.setattr(cv2, "imdecode", imdecode)


def bombs() -> list[tuple[str, bytes]]:
    jpeg = encode(".jpg", BGR)
    return [
        ("webp-vp8l-real", vp8l_constant(BOMB, BOMB)),  # 38 bytes, really decodes to 1 GB
        ("webp-vp8", vp8_header(BOMB, BOMB)),
        ("webp-vp8x", vp8x_wrap(vp8l_constant(BOMB, BOMB), BOMB, BOMB, b"<x/>" * 2500)),
        ("png", png_header(BOMB, BOMB)),
        ("jpeg", patch_jpeg_size(jpeg, BOMB, BOMB)),
        ("jpeg-sof2", b"\xff\xd8\xff\xe0\x00\x04ab\xff\xff\xc2\x00\x11\x08"
         + struct.pack(">HH", BOMB, BOMB) + bytes(10)),
        ("bmp", b"BM" + bytes(12) + struct.pack("<Iii", 40, BOMB, -BOMB) + bytes(30)),
        ("pnm", b"P6\n# big\n%d %d\n255\n" % (BOMB, BOMB)),
        ("pam", b"P7\nWIDTH %d\nHEIGHT %d\nDEPTH 3\nMAXVAL 255\nENDHDR\n" % (BOMB, BOMB)),
        ("pfm", b"PF\n%d %d\n-1.0\n" % (BOMB, BOMB)),
        ("tiff", b"MM\x00*" + struct.pack(">IH", 8, 2) + struct.pack(">HHIHH", 256, 3, 1, BOMB, 0)
         + struct.pack(">HHIHH", 257, 3, 1, BOMB, 0)),
        ("bigtiff", b"II+\x00" + struct.pack("<HHQQ", 8, 0, 16, 2)
         + struct.pack("<HHQQ", 256, 16, 1, BOMB) + struct.pack("<HHQQ", 257, 4, 1, BOMB)),
        ("gif", b"GIF89a" + struct.pack("<HH", BOMB, BOMB) + bytes(8)),
        ("sunras", b"\x59\xa6\x6a\x95" + struct.pack(">ii", BOMB, BOMB) + bytes(20)),
        ("hdr", b"#?RADIANCE\nFORMAT=32-bit_rle_rgbe\n\n-Y %d +X %d\n" % (BOMB, BOMB)),
        ("j2k", b"\xff\x4f\xff\x51\x00\x2f\x00\x00" + struct.pack(">IIII", BOMB, BOMB, 0, 0)
         + bytes(30)),
        ("jp2", encode(".jp2", BGR)[:encode(".jp2", BGR).index(b"jp2c") + 12]
         + struct.pack(">IIII", BOMB, BOMB, 0, 0) + bytes(30)),
        ("avif", avif_header(BOMB, BOMB)),
    ]


BOMBS = bombs()


@pytest.mark.parametrize("name, data", BOMBS, ids=[b[0] for b in BOMBS])
def test_a_declared_16000x16000_is_refused_without_decoding(name, data, no_decoding):
    assert len(data) < 12_000
    assert read_header(data).pixels == BOMB * BOMB
    with pytest.raises(ImageRejected, match=f"declares {BOMB}x{BOMB}, over max_pixels") as err:
        decode_compressed(data, max_pixels=LIMIT)
    assert err.value.reason == "too_large"


def test_the_real_webp_bomb_is_refused_before_opencv_sees_it(no_decoding):
    """The reported attack: a few bytes of valid lossless WebP declaring 16000 x 16000."""
    bomb = vp8l_constant(BOMB, BOMB)
    with pytest.raises(ImageRejected) as err:
        decode_compressed(bomb, max_pixels=LIMIT, max_bytes=64 * 2**20)
    assert err.value.reason == "too_large" and "webp header declares 16000x16000" in str(err.value)


def test_too_many_bytes_are_refused_before_the_header(no_decoding):
    with pytest.raises(ImageRejected, match="over max_bytes=10") as err:
        decode_compressed(encode(".png", BGR), max_pixels=LIMIT, max_bytes=10)
    assert err.value.reason == "too_large"


# --- unknown, truncated, corrupt, lying -----------------------------------------------------

@pytest.mark.parametrize("data", [
    b"garbage that is no image at all",
    b"\x00" * 64,
    b"II*",  # shorter than any TIFF header
    box(b"ftyp", b"heic" + bytes(4) + b"mif1heic") + bytes(32),  # HEIF: no decoder here
    b"\xff\x0a\xff\x07",  # JPEG XL codestream: not built into this OpenCV
    b"v/1\x01" + bytes(60),  # OpenEXR: not built
    b"\x00\x00\x01\x00\x01\x00",  # Windows icon
])
def test_unknown_formats_are_refused_undecoded(data, no_decoding):
    with pytest.raises(ImageRejected) as err:
        decode_compressed(data, max_pixels=LIMIT)
    assert err.value.reason == "unknown_format", str(err.value)


def test_avif_sequences_are_refused_undecoded(no_decoding):
    assert read_header(avif_header(W, H)) == ImageHeader("avif", W, H)
    with pytest.raises(ImageRejected) as err:
        read_header(avif_header(W, H, sequence=True))
    assert err.value.reason == "unknown_format" and "sequence" in str(err.value)


def test_no_data_is_zero_size():
    for data in (b"", bytearray(), np.zeros(0, np.uint8)):
        with pytest.raises(ImageRejected) as err:
            decode_compressed(data, max_pixels=LIMIT)
        assert err.value.reason == "zero_size"


@pytest.mark.parametrize("name, fmt, data, expected", SAMPLES, ids=[s[0] for s in SAMPLES])
def test_truncated_headers_are_refused_never_crash(name, fmt, data, expected, no_decoding):
    """Every prefix of every sample, until the header is complete: refused with a reason
    (decode_failed once the format is recognisable), never another exception."""
    full = read_header(data)
    for cut in range(len(data)):
        try:
            header = read_header(data[:cut])
        except ImageRejected as err:
            reason = err.reason
            if cut == 0:
                assert reason == "zero_size"
            elif cut >= 12:  # every format is recognisable from 12 bytes
                assert reason == "decode_failed", (cut, str(err))
            else:
                assert reason in ("unknown_format", "decode_failed"), (cut, str(err))
            continue
        assert header == full, cut  # complete from here on
        break


@pytest.mark.parametrize("data", [
    png_header(W, H)[:12] + b"IDAT" + bytes(13),  # the first chunk is not IHDR
    b"\xff\xd8\xff\xda\x00\x08" + bytes(20),  # scan data before any frame header
    b"\xff\xd8\xff\xd8" + bytes(20),  # two SOI markers
    b"\xff\xd8\xff\xe0\x00\x01" + bytes(20),  # a segment length below 2
    b"\xff\xd8 this is no jpeg",
    b"RIFF\x20\x00\x00\x00WEBPVP8L\x10\x00\x00\x00\x2e" + bytes(16),  # bad VP8L signature
    b"RIFF\x20\x00\x00\x00WEBPVP8 \x10\x00\x00\x00\x10\x02\x00\x00\x00\x00" + bytes(16),
    b"RIFF\x20\x00\x00\x00WEBPALPH\x10\x00\x00\x00" + bytes(16),  # no VP8/VP8L/VP8X first
    vp8x_wrap(vp8l_constant(W, H), W + 1, H),  # the canvas is not the bitstream's size
    b"BM" + bytes(12) + struct.pack("<Iii", 20, W, H) + bytes(30),  # unknown DIB header
    b"BM" + bytes(12) + struct.pack("<Iii", 40, -W, H) + bytes(30),  # negative width
    b"P5\n" + b"9" * 30 + b" 5\n255\n",  # an absurdly long number
    b"P5 # a comment without end",
    b"P7\nWIDTH 5\nDEPTH 1\nENDHDR\n",  # no HEIGHT
    b"P7\nWIDTH 5\nHEIGHT 5\n",  # no ENDHDR
    b"#?RADIANCE\nFORMAT=32-bit_rle_rgbe\n\n+X 5 -Y 5\n",  # an orientation OpenCV refuses
    tiff_gray(GRAY, "<")[:4] + struct.pack("<I", 2**31),  # IFD beyond the data
    b"II*\x00\x08\x00\x00\x00\x01\x00" + struct.pack("<HHII", 258, 3, 1, 8),  # no size tags
    b"\xff\x4f\xff\x51\x00\x2f\x00\x00" + struct.pack(">IIII", 5, 5, 9, 0) + bytes(30),
    encode(".jp2", BGR)[:40],  # no codestream box
    avif_header(W, H)[:60] + bytes(8),  # meta box cut short
], ids=lambda d: repr(d[:12]))
def test_corrupt_headers_are_decode_failed(data, no_decoding):
    with pytest.raises(ImageRejected) as err:
        decode_compressed(data, max_pixels=LIMIT)
    assert err.value.reason == "decode_failed", str(err.value)


@pytest.mark.parametrize("data", [png_header(0, H), b"GIF89a" + bytes(8),
                                  b"\xff\xd8\xff\xc0\x00\x11\x08\x00\x00\x00\x05" + bytes(10)])
def test_a_declared_zero_size_is_refused(data, no_decoding):
    with pytest.raises(ImageRejected) as err:
        decode_compressed(data, max_pixels=LIMIT)
    assert err.value.reason == "zero_size"


def test_a_decoded_size_other_than_the_headers_is_refused(monkeypatch):
    """A header that lies about the size does not slip through: after decoding, the array
    must have the declared size (here OpenCV is made to return a bigger one)."""
    data = encode(".png", BGR)
    real = cv2.imdecode
    monkeypatch.setattr(cv2, "imdecode", lambda buf, flags: np.pad(real(buf, flags),
                                                                     ((0, 1), (0, 0), (0, 0))))
    with pytest.raises(ImageRejected, match=f"decoded {W}x{H + 1} is not the {W}x{H}") as err:
        decode_compressed(data, max_pixels=LIMIT)
    assert err.value.reason == "decode_failed"


def test_opencv_failures_are_decode_failed():
    png = encode(".png", BGR)
    for data in (png[:len(png) // 2],  # header intact, image data cut
                 png[:33] + bytes(len(png) - 33)):  # image data zeroed
        with pytest.raises(ImageRejected) as err:
            decode_compressed(data, max_pixels=LIMIT)
        assert err.value.reason == "decode_failed"


# --- the one table of decoded encodings -------------------------------------------------------

def test_the_encodings_table():
    assert OPENCV_ENCODINGS == {(1, "uint8"): "mono8", (3, "uint8"): "bgr8",
                                (4, "uint8"): "bgra8", (1, "uint16"): "mono16",
                                (3, "uint16"): "bgr16", (4, "uint16"): "bgra16"}
    for (channels, dtype), name in OPENCV_ENCODINGS.items():
        shape = (H, W) if channels == 1 else (H, W, channels)
        assert opencv_encoding(np.zeros(shape, dtype)) == name
    assert opencv_encoding(np.zeros((H, W, 1), np.uint8)) == "mono8"
    for bad in (np.zeros((H, W, 3), np.float32), np.zeros((H, W, 2), np.uint8),
                np.zeros((H, W, 3), np.int16), np.zeros(5, np.uint8)):
        with pytest.raises(ImageRejected) as err:
            opencv_encoding(bad)
        assert err.value.reason == "unknown_encoding"
