"""Flag rules as the user writes them: parsing, checking against the rubric, defaults."""

from __future__ import annotations

import pytest

from clinjudge.errors import UserError
from clinjudge.inputs import FlagRuleError, default_flag_rules, parse_flag_rule
from clinjudge.rubrics import Rubric, load_rubric


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ("accurate=<2", "expected attribute<=value"),
        ("accurate<=x", "expected attribute<=value"),
        ("nonsense<=2", "unknown attribute"),
        ("prm_step<0.3", "unknown attribute"),
        ("prm<1.5", "probability"),
    ],
)
def test_bad_flag_rules(pdsqi9: Rubric, rule: str, message: str) -> None:
    with pytest.raises(FlagRuleError, match=message):
        parse_flag_rule(rule, pdsqi9)


def test_a_rule_reads_back_as_written_and_fires_on_its_side_only() -> None:
    rule = parse_flag_rule(" accurate <= 2 ")
    assert rule.text == "accurate<=2"
    assert [rule.fires(v) for v in (1, 2, 2.5, None)] == [True, True, False, False]
    assert parse_flag_rule("prm<0.5").text == "prm<0.5"
    assert issubclass(FlagRuleError, UserError)  # the CLI maps it to exit 2


def test_default_rules_follow_the_rubric(pdsqi9: Rubric) -> None:
    assert default_flag_rules(pdsqi9) == ["accurate<=2", "voice_summ>=1", "prm<0.5"]
    assert default_flag_rules(load_rubric("probsum")) == ["prm<0.5"]
    assert default_flag_rules(pdsqi9, prm_used=False) == ["accurate<=2", "voice_summ>=1"]
    assert default_flag_rules(load_rubric("probsum"), prm_used=False) == []
