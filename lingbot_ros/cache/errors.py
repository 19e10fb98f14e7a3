"""Typed errors of the paged KV cache. Pure Python."""


class CacheError(RuntimeError):
    """A request the cache cannot serve; the cache state is unchanged."""


class CacheFullError(CacheError):
    """The pool would exceed its byte budget (or device memory).

    The message names the knobs: bound the trajectory memory with ``max_special_frames`` or
    raise ``max_cache_bytes``.
    """


class TransactionError(CacheError):
    """A frame transaction was misused (double commit, rollback with nothing pending, ...)."""
