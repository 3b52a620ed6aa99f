"""The bound on what a YAML document's aliases expand to (`autotune.ground.yaml_bound`)."""

from __future__ import annotations

import pytest
import yaml

from autotune.flags.catalog import parse_catalog
from autotune.ground.errors import AutotuneError
from autotune.ground.yaml_bound import YamlTooLargeError, bounded_load, expanded_size


def test_aliases_count_as_what_they_expand_to():
    node = yaml.compose("a: &x [1, 2, 3]\nb: [*x, *x]\n")
    # the mapping, 2 keys, the list (1 + 3), and a list of it twice (1 + 2 * 4)
    assert expanded_size(node, 1000) == 1 + 2 + 4 + 9
    assert expanded_size(node, 10) == 11  # counted just past the limit, no further
    assert bounded_load("a: &x [1, 2, 3]\nb: [*x, *x]\n") == {"a": [1, 2, 3],
                                                             "b": [[1, 2, 3], [1, 2, 3]]}
    assert bounded_load("") is None


def test_past_the_bound_or_recursive_nothing_is_built():
    text = "a: &x [1, 2, 3, 4]\nb: [*x, *x, *x]\n"  # 1 + 2 keys + 5 + (1 + 3 * 5) = 24 values
    with pytest.raises(YamlTooLargeError, match="more than 23 values"):
        bounded_load(text, limit=23)
    assert bounded_load(text, limit=24)["b"][2] == [1, 2, 3, 4]
    with pytest.raises(YamlTooLargeError):
        bounded_load("a: &x [*x]\n")
    with pytest.raises(yaml.YAMLError):  # not YAML at all: PyYAML's own error
        bounded_load("a: [1,\n")


def test_a_catalog_with_an_alias_bomb_is_refused():
    from test_apply import BOMB

    with pytest.raises(AutotuneError, match="catalog is malformed: the YAML stands for more "
                       "than 100000 values"):
        parse_catalog("schema_version: 1\nflags: []\n" + BOMB)
