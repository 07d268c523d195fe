#!/bin/sh
# The suites on the kubernetes backend through its contract fake: see tests/hosted.sh.
exec sh "${SBX_TEST_SRCDIR:-$(dirname "$0")}/hosted.sh" kubernetes
