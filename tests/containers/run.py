"""The container tests: each part builds on the images tests/containers/
images.sh made (debian:bookworm-slim, mcp-test-services and the service
images tagged as docker-compose.yml names them, mcp-node:local from the
release binary) and starts them with podman on networks of its own, reaching
them only over ports published on 127.0.0.1.

- image (image.py): the mcp-node image alone, as the chart runs it.
- compose (compose.py): docker-compose.yml with podman-compose.
- chart (chart.py): the chart's rendered Deployment with podman kube play.
- hosted (hosted.py): the image pattern for hosting a server from npm or
  PyPI (deploy/hosted).

Prints one line per check, then `N passed, M failed`; exits 1 on a failure.
"""

import sys

from common import Checks

PARTS = ("image", "compose", "chart", "hosted")


def main():
    parts = sys.argv[1:] or list(PARTS)
    checks = Checks()
    for part in parts:
        if part not in PARTS:
            sys.exit(f"unknown part {part!r}: one of {', '.join(PARTS)}")
        print(f"== {part}", flush=True)
        __import__(part).run(checks)
    print(f"{checks.passed} passed, {checks.failed} failed")
    sys.exit(0 if checks.failed == 0 else 1)


if __name__ == "__main__":
    main()
