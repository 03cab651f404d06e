"""Is this process running on a CI system? Said once, for every part that must act differently
there (the pytest plugin refuses to rewrite standards in CI).

Each system sets its own variable; ``CI`` is the common one, but not every runner sets it
(a container step on GitHub Actions may see only ``GITHUB_ACTIONS``, Jenkins sets none of
the others).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

# GitHub Actions, GitLab CI, Buildkite, Jenkins, Azure Pipelines (TF_BUILD), TeamCity, AWS CodeBuild,
# CircleCI, Travis CI, Drone: each sets its own variable even where it sets no CI.
CI_VARIABLES = ("CI", "GITHUB_ACTIONS", "GITLAB_CI", "BUILDKITE", "JENKINS_URL", "TF_BUILD", "TEAMCITY_VERSION",
                "CODEBUILD_BUILD_ID", "CIRCLECI", "TRAVIS", "DRONE")
_OFF = ("", "0", "false", "no", "off")


def ci_variable(env: Mapping[str, str] | None = None) -> str | None:
    """The first of ``CI_VARIABLES`` that is set to a value other than off/false/0, or None."""
    env = os.environ if env is None else env
    for name in CI_VARIABLES:
        if env.get(name, "").strip().lower() not in _OFF:
            return name
    return None
