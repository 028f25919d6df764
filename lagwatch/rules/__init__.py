"""CORE: findings from a snapshot, its history, the configured rules and `now`. No I/O, no clock reads."""

from lagwatch.rules.engine import Evaluation, evaluate
from lagwatch.rules.resolver import RuleResolver
from lagwatch.rules.settings import RulesConfig, RuleSet

__all__ = ["Evaluation", "RuleResolver", "RuleSet", "RulesConfig", "evaluate"]
