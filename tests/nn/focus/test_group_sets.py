"""The one group-set code of the blocks, decoding and FlexAttention paths, against Python
sets (membership and intersection), up to the limit and past it."""
import pytest
import torch

from quest_geometric.nn.focus.group_sets import (
    MAX_SET_GROUPS,
    codable,
    code_of,
    group_set_codes,
    members,
    membership_codes,
)


def _groups(seed, n, top_k, num_groups):
    g = torch.Generator().manual_seed(seed)
    groups = torch.randint(0, num_groups, (n, top_k), generator=g)
    groups[:40, -1] = groups[:40, 0]  # repeated ids in a set
    groups[40:80] = torch.randint(0, 5, (40, top_k), generator=g)  # many overlaps
    return groups


@pytest.mark.parametrize("top_k", [1, 3])
def test_codes_meet_exactly_when_the_sets_meet(top_k):
    groups = _groups(top_k, 300, top_k, MAX_SET_GROUPS)
    groups[-1, 0] = MAX_SET_GROUPS - 1  # the highest codable group
    sets = [set(row) for row in groups.tolist()]
    codes = group_set_codes(groups)
    assert codes.dtype == torch.long and bool((codes >= 0).all())  # never the sign bit
    assert codes.tolist() == [code_of(row) for row in groups.tolist()]
    meet = (codes.view(-1, 1) & codes.view(1, -1)) != 0
    assert meet.tolist() == [[bool(a & b) for b in sets] for a in sets]
    assert [members(c) for c in codes.tolist()] == [sorted(x) for x in sets]
    member = torch.zeros(300, MAX_SET_GROUPS, dtype=torch.bool)
    member.scatter_(1, groups, True)
    assert torch.equal(membership_codes(member), codes)


def test_empty_sets_and_the_limit():
    assert group_set_codes(torch.empty(5, 0, dtype=torch.long)).tolist() == [0] * 5
    assert code_of([]) == 0 and members(0) == []
    assert codable(MAX_SET_GROUPS) and not codable(MAX_SET_GROUPS + 1)
    top = group_set_codes(torch.tensor([[MAX_SET_GROUPS - 1]]))
    assert int(top) == 2 ** (MAX_SET_GROUPS - 1) == code_of([MAX_SET_GROUPS - 1])
    with pytest.raises(ValueError, match=r"group_set_codes: group ids must be in \[0, 63\)"):
        group_set_codes(torch.tensor([[0, MAX_SET_GROUPS]]))
    with pytest.raises(ValueError, match="membership_codes: at most 63 groups"):
        membership_codes(torch.zeros(2, MAX_SET_GROUPS + 1, dtype=torch.bool))
