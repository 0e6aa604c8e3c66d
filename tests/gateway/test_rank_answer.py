"""The Rank response is the JSON the encoder writes for it, byte for byte (Gateway._answer puts
it together from escaped strings)."""

from __future__ import annotations

import json

import numpy as np

from streaming_dpbandit.gateway.core import Gateway
from streaming_dpbandit.gateway.events import Event

ODD_IDS = ['a"b', "back\\slash", "tab\tnew\nline", "ünï", "emoji-😀", "ctl-\x01", "", "</script>"]


def test_rank_answer_is_the_encoders_json():
    rng = np.random.default_rng(0)
    gw = Gateway.__new__(Gateway)
    for trial in range(200):
        k = int(rng.integers(1, 51))
        ids = [f"item-{j}" for j in range(k)]
        for j in rng.choice(k, min(k, 3), replace=False):
            ids[j] = ODD_IDS[int(rng.integers(len(ODD_IDS)))] + str(j)
        order = rng.permutation(k)
        n_top = int(rng.integers(1, k + 1)) if trial % 3 == 0 else 1
        prop = 1.0 / n_top if trial % 5 else float(np.float64(1 / 3))
        ev = Event(0.0, int(order[0]), prop, 1, order.astype("<u2").tobytes(), n_top, b"\0" * 8)
        event_id = ODD_IDS[trial % len(ODD_IDS)] + f"-{trial}"
        want = json.dumps(
            {
                "ranking": [
                    {"id": ids[a], "probability": prop if i < n_top else 0.0}
                    for i, a in enumerate(order.tolist())
                ],
                "eventId": event_id,
                "rewardActionId": ids[int(order[0])],
            },
            separators=(",", ":"),
        ).encode()
        assert gw._answer(event_id, ids, ev) == want
