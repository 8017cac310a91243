"""The public names of the policies package are pinned."""

import policies


def test_exported_names_are_pinned_and_sorted():
    assert policies.__all__ == sorted(policies.__all__)
    assert set(policies.__all__) == {
        "UNDEFINED",
        "ApprovalRequirement",
        "EmbeddedEngine",
        "OPAEngine",
        "PolicyDecision",
        "PolicyEngine",
        "PolicyError",
        "PolicyLoadError",
        "ShadowEngine",
        "TestResult",
        "build_engine",
        "parse_decision",
        "run_tests",
        "single_value",
    }
    for name in policies.__all__:
        assert getattr(policies, name) is not None
