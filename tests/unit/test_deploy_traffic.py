"""The traffic rules both targets share: canary, promote, rollback."""

import pytest

from gkeflow.components.deploy import traffic as tr


def test_first_version_takes_everything_and_a_canary_takes_its_share():
    assert tr.canary({}, "a", 10) == {"a": 100}
    assert tr.canary({"a": 100}, "b", 10, ["a", "b"]) == {"a": 90, "b": 10}
    # a new canary replaces the old one; the stable version keeps the rest
    assert tr.canary({"a": 90, "b": 10}, "c", 20, ["a", "b", "c"]) == {"a": 80, "b": 0, "c": 20}
    assert tr.canary({"a": 100}, "b", 100) == {"a": 0, "b": 100}


def test_promote_keeps_the_most_recent_previous_versions():
    promotion = tr.promote({"a": 0, "b": 80, "c": 20}, "c", ["a", "b", "c"], keep=1)
    assert promotion.split == {"b": 0, "c": 100} and promotion.undeploy == ["a"]
    assert tr.promote({"a": 90, "b": 10}, "b", ["a", "b"], keep=0).undeploy == ["a"]
    with pytest.raises(tr.TrafficError, match="not deployed"):
        tr.promote({"a": 100}, "z", ["a"])


def test_rollback_restores_the_previous_split_over_what_is_deployed():
    back = tr.rollback({"a": 90, "b": 10}, {"a": 100})
    assert back.split == {"a": 100} and back.undeploy == ["b"]
    back = tr.rollback({"a": 0, "b": 100}, {"a": 90, "b": 10})
    assert back.split == {"a": 90, "b": 10} and back.undeploy == []
    with pytest.raises(tr.TrafficError, match="no longer deployed"):
        tr.rollback({"b": 100}, {"a": 90, "b": 10})
    with pytest.raises(tr.TrafficError, match="no earlier"):
        tr.rollback({"b": 100}, {})


@pytest.mark.parametrize("percent", [0, 101, 10.5, True, "10"])
def test_percent_is_a_whole_number_from_1_to_100(percent):
    with pytest.raises(tr.TrafficError, match="whole percent"):
        tr.canary({}, "a", percent)


def test_splits_add_up_to_100():
    with pytest.raises(tr.TrafficError, match="add up to 100"):
        tr.check_split({"a": 50, "b": 40})
    assert tr.describe({"a": 10, "b": 90}) == "b 90%, a 10%"
