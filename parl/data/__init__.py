"""Data containers: field specs, batch packing, replay buffers and their frame storage."""

from parl.data.frame_store import FrameStore

__all__ = ["FrameStore"]
