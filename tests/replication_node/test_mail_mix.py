"""The sizes of real mail the load tool and the demo write (pure)."""

import pytest

from replication_node.cli.mail_mix import LARGE, SMALL_CAP, mail_sizes


@pytest.mark.parametrize(
    ("count", "large_every", "large"),
    [(0, 200, 0), (199, 200, 0), (200, 200, 1), (2000, 200, 10), (2000, 400, 5), (3, 1, 3)],
)
def test_about_one_in_large_every_is_an_attachment_of_1_to_30_mib(count, large_every, large):
    sizes = mail_sizes(count, seed=3, large_every=large_every)
    assert len(sizes) == count
    big = [s for s in sizes if s > SMALL_CAP]
    assert len(big) == large and all(LARGE[0] <= s <= LARGE[1] for s in big)
    assert all(64 <= s <= SMALL_CAP for s in sizes if s not in big)


def test_the_same_seed_draws_the_same_mail_and_most_is_small():
    sizes = mail_sizes(5000, seed=11)
    assert sizes == mail_sizes(5000, seed=11) != mail_sizes(5000, seed=12)
    small = sorted(s for s in sizes if s <= SMALL_CAP)
    assert 5_000 < small[len(small) // 2] < 30_000, "a median of some KB"


def test_nonsense_is_refused():
    with pytest.raises(ValueError):
        mail_sizes(-1)
    with pytest.raises(ValueError):
        mail_sizes(10, large_every=0)
