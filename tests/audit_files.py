"""The audit's switches (``tests/audit_conditions.py``) for the checks of the shard files' kinds, links, headers and tensor spans: each
turns one declared condition off, and names the matrix cases that must go red."""

from __future__ import annotations

from audit_switch import Switch

SWITCHES: tuple[Switch, ...] = ()
