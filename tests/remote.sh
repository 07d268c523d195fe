#!/bin/sh
# The suites on the remote backend through a real control plane (the build's
# sbx-server over its local backend): see tests/hosted.sh.
exec sh "${SBX_TEST_SRCDIR:-$(dirname "$0")}/hosted.sh" remote
