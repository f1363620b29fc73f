"""Images in chat requests: where they come from (data URLs and raw base64; any other URL is a 400,
render never fetches), decoding, and the limits that guard it (sizes checked from the base64 text
and the file header before any pixel is decoded). Nothing is cached. The rules and the limits:
docs/render.md, "Images".
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import re
from dataclasses import dataclass
from typing import Any

from session.errors import RenderError

FORMATS = ("PNG", "JPEG", "WEBP")
MEDIA_TYPES = {"image/png": "PNG", "image/jpeg": "JPEG", "image/jpg": "JPEG", "image/webp": "WEBP"}
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:")
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class ImageLimits:
    """What render decodes at most. The defaults keep one request's decoding to tens of MB."""

    max_bytes: int = 20 * 1024 * 1024  # encoded file bytes per image
    max_pixels: int = 4096 * 4096  # width × height per image
    max_side: int = 16384  # width or height
    max_images: int = 16  # per request


@dataclass(frozen=True, slots=True)
class ImageRef:
    """One image of a conversation, before decoding: its URL and where the request put it."""

    url: str
    where: str  # for messages: "messages[0].content[1].image_url"
    param: str  # the error's ``param``: "messages.0.content.1.image_url"


@dataclass(frozen=True, slots=True)
class DecodedImage:
    image: Any  # a loaded PIL image (first frame of an animated file)
    digest: str  # sha256 of the file bytes (features.mm_hashes)
    ref: ImageRef


def decode(ref: ImageRef, limits: ImageLimits) -> DecodedImage:
    """Decode and validate one image (a :class:`RenderError` naming ``ref.where`` otherwise)."""
    declared, text = _source(ref)
    data = _base64(text, ref, limits)
    return DecodedImage(_open(data, declared, ref, limits), hashlib.sha256(data).hexdigest(), ref)


def _bad(ref: ImageRef, message: str) -> RenderError:
    return RenderError(f"{ref.where}: {message}", param=ref.param)


def _source(ref: ImageRef) -> tuple[str | None, str]:
    """The declared format (None: not declared) and the base64 text of a data URL or raw base64."""
    url = ref.url
    if url[:5].lower() == "data:":
        header, sep, payload = url[5:].partition(",")
        if not sep:
            raise _bad(ref, "the data URL has no ',' before its data; send data:image/png;base64,<data>.")
        media, *params = header.split(";")
        media = media.strip().lower()
        if "base64" not in (p.strip().lower() for p in params):
            raise _bad(ref, "only base64 data URLs are supported; send data:<media type>;base64,<data>.")
        if media and media not in MEDIA_TYPES:
            raise _bad(ref, f"unsupported image type {media!r}; send a PNG, JPEG or WebP image "
                            "(image/png, image/jpeg, image/webp).")
        return (MEDIA_TYPES[media] if media else None), payload
    if _SCHEME.match(url):  # a scheme: base64 text never holds a colon
        shown = url if len(url) <= 60 else url[:57] + "..."
        raise _bad(ref, f"render does not fetch images from URLs ({shown!r}); send the image inline as a "
                        "data URL (data:image/png;base64,<data>) or as base64.")
    return None, url


def _base64(text: str, ref: ImageRef, limits: ImageLimits) -> bytes:
    text = _SPACE.sub("", text)
    if not text:
        raise _bad(ref, "the image data is empty.")
    if len(text) // 4 * 3 > limits.max_bytes + 2:
        raise _bad(ref, f"the image is larger than {limits.max_bytes} bytes; send a smaller or more "
                        "compressed image.")
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise _bad(ref, "the image data is not valid base64; send standard base64 (A-Z, a-z, 0-9, '+', '/', "
                        "'=' padding).") from None
    if len(data) > limits.max_bytes:
        raise _bad(ref, f"the image is larger than {limits.max_bytes} bytes; send a smaller or more "
                        "compressed image.")
    return data


def _open(data: bytes, declared: str | None, ref: ImageRef, limits: ImageLimits) -> Any:
    from PIL import Image, UnidentifiedImageError

    try:
        # Any of the three formats, whatever the media type says (clients often label every image
        # image/jpeg, and vLLM does not check the label either). Reads the header only.
        image = Image.open(io.BytesIO(data), formats=FORMATS)
    except UnidentifiedImageError:
        what = f"the {declared} image it is declared as" if declared else "a PNG, JPEG or WebP image"
        raise _bad(ref, f"the data is not {what} (or its header is corrupt); send a PNG, JPEG or WebP "
                        "image.") from None
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise _bad(ref, _too_big(None, limits)) from None
    except (OSError, ValueError, SyntaxError, EOFError):
        raise _bad(ref, "the image header is corrupt or truncated; send a complete PNG, JPEG or WebP file.") from None
    width, height = image.size
    if width < 1 or height < 1 or width > limits.max_side or height > limits.max_side \
            or width * height > limits.max_pixels:
        image.close()
        raise _bad(ref, _too_big((width, height), limits))
    try:
        image.load()
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise _bad(ref, _too_big((width, height), limits)) from None
    except (OSError, ValueError, SyntaxError, EOFError, MemoryError):  # truncated / corrupt pixel data
        raise _bad(ref, "the image data is corrupt or truncated; send a complete PNG, JPEG or WebP file.") from None
    return image


def _too_big(size: tuple[int, int] | None, limits: ImageLimits) -> str:
    dims = f"is {size[0]}x{size[1]} pixels" if size else "has far too many pixels"
    return (f"the image {dims}; images may have at most {limits.max_pixels} pixels and "
            f"{limits.max_side} pixels a side. Send a smaller image.")
