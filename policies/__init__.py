"""The policy decision layer: one engine protocol, an embedded Rego engine (regorus), an
OPA server client, shadow evaluation, replay, and a ``*_test.rego`` runner.

Errors::

    PolicyError       an evaluation could not produce a valid decision (deny)
    PolicyLoadError   a bundle could not be loaded
"""

from policies._decision import (
    UNDEFINED,
    ApprovalRequirement,
    PolicyDecision,
    parse_decision,
    single_value,
)
from policies._errors import PolicyError, PolicyLoadError
from policies._factory import build_engine
from policies._protocol import PolicyEngine
from policies.embedded import EmbeddedEngine
from policies.opa import OPAEngine
from policies.shadow import ShadowEngine
from policies.testing import TestResult, run_tests

__all__ = [
    "ApprovalRequirement",
    "EmbeddedEngine",
    "OPAEngine",
    "PolicyDecision",
    "PolicyEngine",
    "PolicyError",
    "PolicyLoadError",
    "ShadowEngine",
    "TestResult",
    "UNDEFINED",
    "build_engine",
    "parse_decision",
    "run_tests",
    "single_value",
]
