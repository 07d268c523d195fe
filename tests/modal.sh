#!/bin/sh
# The suites on the modal backend through its gRPC contract fake: see tests/hosted.sh.
exec sh "${SBX_TEST_SRCDIR:-$(dirname "$0")}/hosted.sh" modal
