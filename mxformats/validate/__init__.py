"""``mxformats validate``: verify quantized Kimi-K2-class checkpoints shard by shard.

Spec: ``docs`` validator guide (check catalogue generated from :data:`CHECKS`).
"""
