"""Sizes of real mail (pure): what the load tool and the demo write, so a cluster under test
carries items of many megabytes beside the many small ones, as a mailbox does.

Most messages are small: a log-normal around 12 KB (the body of a reply, a notification),
capped at 512 KiB.  One in `large_every` carries an attachment: 1 to 30 MiB, uniform (the
seeds' era allowed 10 MB on premises; Exchange Online takes 35/36 MB).  The draw is seeded,
so a run can be written again byte for byte.
"""

from __future__ import annotations

import random

MiB = 1024 * 1024
SMALL_MEDIAN = 12_000
SMALL_CAP = 512 * 1024
LARGE = (1 * MiB, 30 * MiB)


def mail_sizes(count: int, *, seed: int = 0, large_every: int = 200) -> list[int]:
    """`count` message sizes in bytes: mostly small, about one in `large_every` of 1-30 MiB
    (at least one when `count` reaches `large_every`)."""
    if count < 0 or large_every < 1:
        raise ValueError("count must be 0 or more and large_every 1 or more")
    rng = random.Random(seed)
    sizes = [
        min(SMALL_CAP, max(64, int(rng.lognormvariate(0, 1.2) * SMALL_MEDIAN)))
        for _ in range(count)
    ]
    large = count // large_every
    for i in rng.sample(range(count), large):
        sizes[i] = rng.randint(*LARGE)
    return sizes
