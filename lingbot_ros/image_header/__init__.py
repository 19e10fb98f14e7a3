"""Compressed image bytes -> numpy, with the image size read from the header *before* decoding.

A few bytes can declare an enormous image (a 38-byte lossless WebP declares 16000x16000 and
decodes to 1 GB), so nothing reaches ``cv2.imdecode`` before :func:`read_header` has read its
width and height from the format's own header and :func:`decode_compressed` has checked them
against the pixel limit. Data whose format is not identified here is refused
(``unknown_format``), never handed to OpenCV to sniff; a truncated or inconsistent header is
``decode_failed``. After decoding, the array's size must equal the header's (a header that lies
about the size is refused too).

Formats (everything this OpenCV build decodes; where the size is read):

======== ============================================================================
jpeg     the first SOFn segment (other segments skipped by length, fill bytes and
         stray bytes between segments skipped as libjpeg does)
png      IHDR (APNG frames must fit inside it: OpenCV checks)
webp     VP8 (lossy key frame), VP8L (lossless) or the VP8X canvas (extended; for a
         still image the VP8/VP8L bitstream inside must declare the canvas size)
bmp      BITMAPINFOHEADER (and later versions) or BITMAPCOREHEADER
pnm      P1-P6 (PBM/PGM/PPM; comments), P7 (PAM), PF/Pf (PFM)
tiff     the first IFD (ImageWidth, ImageLength), both byte orders, classic and BigTIFF
gif      the logical screen (OpenCV checks that every frame fits inside it)
sunras   Sun raster header
hdr      Radiance RGBE resolution line (``-Y H +X W``)
jpeg2000 the codestream's SIZ marker (a raw J2K codestream, or the jp2c box of a JP2)
avif     the ispe property of the primary item (still images; image sequences are refused)
======== ============================================================================

The decoded array is named by :func:`lingbot_ros.image_decode.opencv_encoding` (the one table:
mono8/16, bgr8/16, bgra8/16). Used by the ROS node (``ros/intake/convert.py``) and the offline
sources (``tools/sources/frame.py``). No rclpy, no torch; OpenCV is imported on the first decode.

Modules: ``decode.py`` (identification, :func:`read_header`, :func:`decode_compressed` and the
size checks); the header readers by kind of header: ``binary.py`` (jpeg, png, webp, bmp, tiff,
gif, sunras), ``text.py`` (pnm, pam, pfm, hdr), ``isobmff.py`` (jpeg2000, avif); ``common.py``
(what they share: ``Corrupt``, ``need``, ``MAX_SEGMENTS``, :func:`byte_view`).
"""
from .common import byte_view
from .decode import FORMATS, ImageHeader, decode_compressed, read_header

__all__ = ["FORMATS", "ImageHeader", "byte_view", "decode_compressed", "read_header"]
