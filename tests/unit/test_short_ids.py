"""The controller's entity ids: OpenZiti's short-id shape, drawn from the OS's random source."""

from __future__ import annotations

from controller.system import ShortIds


def test_short_ids_keep_openziti_shape() -> None:
    ids = [ShortIds().new_id() for _ in range(5000)]
    assert len(set(ids)) == len(ids)
    assert all(len(i) == 10 and i[0] not in ".-" and i[-1] not in ".-" for i in ids)
    alphabet = set("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-")
    assert set("".join(ids)) == alphabet  # every character is drawn
