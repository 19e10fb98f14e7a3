"""Paged KV cache of the global-attention layers.

Pure-Python bookkeeping (``page_pool``, ``patch_stream``, ``special_stream``, ``page_table``)
behind two torch doors (``storage``, ``layout``); ``PagedKVCache`` ties them together.
Several streams share one storage through ``SharedKVPool`` (ids granted by ``PageLedger``).
"""
from .camera_cache import CameraCacheTxn, CameraKVCache
from .camera_pool import SharedCameraPool
from .errors import CacheError, CacheFullError, TransactionError
from .frame_txn import FrameTxn
from .kv_cache import PagedKVCache, StepForecast
from .layout import PagedKVLayout
from .page_ledger import PageLedger
from .shared_pool import SharedKVPool
from .step_kind import StepKind

__all__ = ["CameraCacheTxn", "CameraKVCache", "CacheError", "CacheFullError", "TransactionError",
           "FrameTxn", "PagedKVCache", "PagedKVLayout", "PageLedger", "SharedCameraPool",
           "SharedKVPool", "StepForecast", "StepKind"]
